"""The rows of docs/hyperparameters-and-variables.md for the Training Compiler's settings, made from their declarations
(job_settings.JOB_SETTINGS for the job's own; opentc_launcher.options for the worker options with a `setting`), so
that a setting is declared once and the page follows.

    python -m opentc_toolkit.settings_table docs/hyperparameters-and-variables.md   # rewrites those rows in place

tests/test_docs.py checks that the page holds exactly these rows.
"""

from __future__ import annotations

import json
import re
import sys

from opentc_launcher.api import DEFAULT_NAMES, settable_options

from .job_settings import COMPILER_KEYS, JOB_SETTINGS, WORKER_SETTINGS


def worker_setting_rows() -> list[str]:
    """One table row per setting: the job's own (JOB_SETTINGS), then the worker settings in the order WorkerOptions
    declares them."""
    defaults = ", ".join(f"`{name}`" for name in DEFAULT_NAMES)
    rows = [f"| `{s.key}` | {s.default_cell} | {s.doc} |" for s in JOB_SETTINGS]
    for name, declared, default in settable_options():
        setting = declared.setting
        assert setting is not None   # settable_options' promise
        means = f" ({setting.default_means})" if setting.default_means else ""
        rows.append(f"| `{WORKER_SETTINGS[name]}` | `{json.dumps(default)}`{means} | "
                    f"{setting.doc.replace('{defaults}', defaults)} |")
    return rows


def with_worker_setting_rows(page: str) -> str:
    """`page` with its worker settings' rows replaced by worker_setting_rows(), where the first of them was (at the end
    of the page's first table when it has none)."""
    keys = set(COMPILER_KEYS)
    lines = page.splitlines()
    ours = [i for i, line in enumerate(lines) if (m := re.match(r"\| `([a-z_]+)` \|", line)) and m.group(1) in keys]
    if ours:
        at = ours[0]
    else:
        first = next(i for i, line in enumerate(lines) if line.startswith("|"))
        at = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    kept = [line for i, line in enumerate(lines) if i not in set(ours)]
    at -= sum(1 for i in ours if i < at)
    return "\n".join([*kept[:at], *worker_setting_rows(), *kept[at:]]) + ("\n" if page.endswith("\n") else "")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m opentc_toolkit.settings_table PAGE.md", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        page = f.read()
    with open(args[0], "w", encoding="utf-8") as f:
        f.write(with_worker_setting_rows(page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
