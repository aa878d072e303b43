"""Writes which class torch-xla registered for PJRT_DEVICE=CUDA, as this process sees it.

    python cuda_plugin_seen.py OUT_DIR [launch]   (launch: also from a torch_xla.launch / xmp.spawn child)
"""

import json
import os
import sys


def record(tag: str) -> None:
    from torch_xla.experimental import plugins

    plugin = plugins._plugin_registry.get("CUDA")
    seen = f"{type(plugin).__module__}.{type(plugin).__name__}" if plugin is not None else None
    with open(os.path.join(sys.argv[1], f"{tag}-{os.getpid()}.json"), "w") as f:
        json.dump({"tag": tag, "plugin": seen, "parent": os.getppid()}, f)


def _mp_fn(index):
    record("launch-child")


if __name__ == "__main__":
    import torch_xla  # registers the installed plugins

    record("torchrun-worker" if "TORCHELASTIC_RUN_ID" in os.environ else "main")
    if sys.argv[2:] == ["launch"]:
        torch_xla.launch(_mp_fn)
