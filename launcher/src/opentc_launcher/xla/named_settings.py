"""The settings XLA's messages tell their reader to change (setting_names: each worded as the front end calls it)."""

from __future__ import annotations

from ..setting_names import Setting, option_setting

UNSYNCHRONIZED = option_setting("cpu_multi_worker", "unsynchronized")
LIBRARY_PATCHES_OFF = option_setting("library_patches", "false")
INDUCTOR_INSTEAD = option_setting("backend", "inductor")
DEBUG_LOG = Setting("PT_XLA_DEBUG_LEVEL=1")   # among debug mode's switches (xla.session.debug_environment)
