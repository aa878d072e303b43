"""The settings Inductor's messages tell their reader to change (setting_names: each worded as the front end calls
it)."""

from __future__ import annotations

from ..setting_names import Setting, option_setting

REGIONAL_OFF = option_setting("defaults_off", "regional")
PATCHES_OFF = option_setting("library_patches", "false")
DEBUG_LOG = Setting("TORCH_LOGS=graph_breaks")   # what debug mode sets among its switches (TORCH_LOGS=graph_breaks,...)
