"""The model a job trains, for its MFU (mfu.py), seen with no change to the script, and described at its first optimizer
step: what it is (class, weights, layers, width) and the dtype its matrix multiplies run in.

Where a model is seen: Accelerate's prepare_model (the Trainer's, and every Accelerate script's), the module given
to torch.compile (torch's wrapper, OptimizedModule, is made around it, also by the regional default), and every
transformers model made (post_init), which covers a plain loop that compiles nothing. At the first optimizer step,
of the models still alive with a parameter that trains, the largest is the one trained (a frozen teacher is left
out; a transformers model's inner model is smaller than the one around it).

The dtype: the weights' own when they are half precision, else Accelerate's mixed precision, else torch.autocast's
on CUDA, else float32 (as TF32 when torch is allowed to).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from types import ModuleType
from typing import Any

from .mfu import shape_of
from .patching import OBSERVER, LibraryChange, arm_change
from .replace import replace_once
from .worker_record import ModelFigures

log = logging.getLogger("opentc_launcher")

MAX_CANDIDATES = 10_000   # a script that makes models in a loop keeps the first ones
HALF = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}
MIXED = {"bf16": "bf16", "fp16": "fp16"}   # Accelerate's mixed_precision values


class ModelWatch:
    """Hooks where models are seen once their libraries import; `describe()` at the first optimizer step."""

    def __init__(self) -> None:
        self._candidates: list[tuple[weakref.ref, str]] = []
        self._mixed_precision = ""   # Accelerate's, when it prepared a model
        self._autocast = ""          # the dtype of the last CUDA autocast entered
        self.figures: ModelFigures | None = None

    def install(self) -> ModelWatch:
        arm_change(SEEN_IN_ACCELERATE, self._hook_accelerate)
        arm_change(SEEN_MADE, self._hook_transformers)
        arm_change(SEEN_COMPILED, self._hook_compile)
        arm_change(AUTOCAST_SEEN, self._hook_autocast)
        return self

    def seen(self, model: Any, how: str) -> None:
        if len(self._candidates) < MAX_CANDIDATES:
            with contextlib.suppress(TypeError):   # an object without weak references: not a torch module
                self._candidates.append((weakref.ref(model), how))

    def _hook_accelerate(self, module: ModuleType) -> None:
        original = module.Accelerator.prepare_model
        watch = self

        def prepare_model(accelerator: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            watch.seen(model, "Accelerate's prepare_model")
            watch._mixed_precision = str(getattr(accelerator, "mixed_precision", "") or "")
            return original(accelerator, model, *args, **kwargs)

        replace_once(module.Accelerator, "prepare_model", prepare_model)

    def _hook_transformers(self, module: ModuleType) -> None:
        original = module.PreTrainedModel.post_init
        watch = self

        def post_init(model: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(model, *args, **kwargs)
            watch.seen(model, "a transformers model")
            return result

        replace_once(module.PreTrainedModel, "post_init", post_init)

    def _hook_compile(self, module: ModuleType) -> None:
        optimized = module.OptimizedModule
        original = optimized.__init__
        watch = self

        def init(wrapper: Any, mod: Any, *args: Any, **kwargs: Any) -> None:
            original(wrapper, mod, *args, **kwargs)
            watch.seen(mod, "torch.compile")

        replace_once(optimized, "__init__", init)

    def _hook_autocast(self, module: ModuleType) -> None:
        original = module.autocast.__enter__
        watch = self

        def enter(context: Any) -> Any:
            result = original(context)
            if getattr(context, "device", None) == "cuda" and getattr(context, "_enabled", False):
                watch._autocast = HALF.get(str(getattr(context, "fast_dtype", "")), "")
            return result

        replace_once(module.autocast, "__enter__", enter)

    def describe(self) -> ModelFigures | None:
        """The trained model, as ModelFigures, once (at the first optimizer step); never raises."""
        if self.figures is None:
            try:
                self.figures = self._describe()
            except Exception as e:  # noqa: BLE001  (a measurement is never a reason for a job to fail)
                log.debug("model watch: %s: %s", type(e).__name__, e)
        return self.figures

    def _describe(self) -> ModelFigures | None:
        trained = []
        for order, (ref, how) in enumerate(self._candidates):
            model = ref()
            if model is not None and hasattr(model, "parameters"):
                parameters = list(model.parameters())
                if any(p.requires_grad for p in parameters):
                    trained.append((sum(p.numel() for p in parameters), order, model, how))
        if not trained:
            return None
        # The largest; of equals, the last seen: a model around another with no weights of its own (a language-model
        # head tied to the embeddings) is made, and seen, after the one inside it.
        _, _, model, how = max(trained, key=lambda found: found[:2])
        config = getattr(model, "config", None)
        shape = shape_of(model.named_parameters(), config)
        dtype, source = self._matmul_dtype(model)
        return ModelFigures(name=type(model).__name__, seen_by=how,
                            weights=shape.weights if shape else sum(p.numel() for p in model.parameters()),
                            layers=shape.layers if shape else None, width=shape.width if shape else None,
                            matmul_dtype=dtype, dtype_from=source)

    def _matmul_dtype(self, model: Any) -> tuple[str, str]:
        weights = next((str(p.dtype) for p in model.parameters() if p.is_floating_point()), "")
        if weights in HALF:
            return HALF[weights], "the weights' dtype"
        if self._mixed_precision in MIXED:
            return MIXED[self._mixed_precision], "Accelerate's mixed_precision"
        if self._autocast:
            return self._autocast, "torch.autocast"
        import torch

        if torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest":
            return "tf32", "float32 matrix multiplies allowed to use TF32"
        return "fp32", "float32 weights, no mixed precision seen"


SEES = "the model trained, for its MFU (its size, layers, width and the dtype its matrix multiplies run in)"
SEEN_IN_ACCELERATE = LibraryChange(
    name="model-seen-by-accelerate-prepare", module="accelerate.accelerator",
    target="accelerate.accelerator.Accelerator.prepare_model", kind=OBSERVER, apply=ModelWatch._hook_accelerate,
    why=f"{SEES}: each model Accelerate prepares (the Trainer's, every Accelerate script's) and its mixed precision",
    unpatched="a model prepared by Accelerate is not seen, and its mixed precision not known (the MFU may be missing)")
SEEN_MADE = LibraryChange(
    name="model-seen-when-made", module="transformers.modeling_utils",
    target="transformers.modeling_utils.PreTrainedModel.post_init", kind=OBSERVER, apply=ModelWatch._hook_transformers,
    why=f"{SEES}: each transformers model made, which covers a plain loop that compiles nothing",
    unpatched="a transformers model is not seen when made (the MFU may be missing)")
SEEN_COMPILED = LibraryChange(
    name="model-seen-by-torch-compile", module="torch._dynamo.eval_frame",
    target="torch._dynamo.eval_frame.OptimizedModule.__init__", kind=OBSERVER, apply=ModelWatch._hook_compile,
    why=f"{SEES}: the module given to torch.compile (torch's wrapper is made around it)",
    unpatched="a module given to torch.compile is not seen (the MFU may be missing)")
AUTOCAST_SEEN = LibraryChange(
    name="autocast-dtype-seen", module="torch.amp.autocast_mode", target="torch.amp.autocast_mode.autocast.__enter__",
    kind=OBSERVER, apply=ModelWatch._hook_autocast,
    why="the dtype of CUDA's autocast, for the MFU's peak (bf16, fp16)",
    unpatched="autocast's dtype is not known (the MFU takes float32's peak)")
CHANGES = (SEEN_IN_ACCELERATE, SEEN_MADE, SEEN_COMPILED, AUTOCAST_SEEN)
