"""The folders a launch's options name, made before anything starts: a worker's debug artefacts (debug mode's
--debug-dir, or its default), its compile report and its measurements. torch opens its log file (TORCH_LOGS_OUT) in
the debug folder as it is imported, and a folder that does not exist ended the worker there (FileNotFoundError);
one that cannot be made or written is refused before the launch, naming the option. The compilation cache's folders
are its own to make (working_cache.py: an empty one would read as a damaged cache)."""

from __future__ import annotations

from .files import unwritable
from .options import WorkerOptions


def named_folders(options: WorkerOptions) -> dict[str, str]:
    """{option: folder} of the folders the workers write into."""
    folders = {"--debug-dir": options.debug_folder()} if options.debug_mode else {}
    folders.update({f"--{name.replace('_', '-')}": getattr(options, name)
                    for name in ("compile_report_dir", "summary_dir") if getattr(options, name)})
    return folders


def folder_problem(options: WorkerOptions) -> str | None:
    """Each folder the options name, made; why the first that cannot be made or written cannot, else None."""
    for option, folder in named_folders(options).items():
        why = unwritable(folder)
        if why is not None:
            return (f"{option} {folder} cannot be used: {why}. Name a folder the workers can create and write in (or "
                    f"leave the option out).")
    return None
