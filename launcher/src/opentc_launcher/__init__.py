"""opentc_launcher: runs a training script on a compiler backend (PyTorch/XLA on PJRT, or torch.compile's
TorchInductor), one process per device.

`opentc-run` is the command (torchrun's options plus a few of its own); `opentc_launcher.worker` is the
bootstrap each worker process runs before it hands control to the user's script. Each compiler sits behind
`backend.CompilerBackend` (eager.py, xla/, inductor/).
"""

__version__ = "0.1.0"
