"""Model FLOPs utilisation (MFU): the share of the GPU's dense peak that a training run's model arithmetic uses.

    flops per token (6N plus attention, from the model's parameters and config) x tokens per second per GPU
    -----------------------------------------------------------------------------------------------------
                        the GPU's dense peak for the dtype the matrix multiplies run in

As torchtitan, MosaicML Composer, nanoGPT and llm.c count it (PaLM, appendix B): 6 FLOPs per weight per token for the
forward and backward matrix multiplies, the weights counted without learned position embeddings (a lookup, not a
multiply) and a tied output layer once; plus 12 x layers x width x sequence for attention's scores and mixing.
Recomputation (gradient checkpointing) is not counted: MFU, unlike hardware FLOPs utilisation, counts the model's
arithmetic once.

Standard library only: dev/gpu-kit imports it before anything is installed, and opentc-compare without torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


# Dense peaks per GPU, TFLOPS, without sparsity, by the dtype the matrix multiplies run in: "bf16", "fp16", "tf32"
# (float32 that PyTorch routes to the tensor cores: torch.backends.cuda.matmul.allow_tf32, or a float32 matmul
# precision other than "highest") and "fp32" (plain float32, PyTorch's default). Looked up by the name the driver
# gives the GPU, most specific names first; each row names its source. A GPU or dtype not here has no MFU, said so.
@dataclass(frozen=True)
class Peak:
    name: str                      # matched as a substring of the GPU's name ("NVIDIA H100 80GB HBM3")
    tflops: dict[str, float]
    source: str


PEAKS = (
    Peak("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0},
         "NVIDIA H100 datasheet, PCIe column (1,513 bf16 and 756 tf32 with sparsity)"),
    Peak("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0},
         "NVIDIA H100 datasheet, NVL column (1,671 bf16 and 835 tf32 with sparsity)"),
    Peak("H100", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0},
         "NVIDIA H100 datasheet, SXM column (1,979 bf16 and 989 tf32 with sparsity)"),
    Peak("H200 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0},
         "NVIDIA H200 datasheet, NVL column (1,671 bf16 and 835 tf32 with sparsity)"),
    Peak("H200", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0},
         "NVIDIA H200 datasheet, SXM column (1,979 bf16 and 989 tf32 with sparsity)"),
    Peak("B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1125.0, "fp32": 75.0},
         "NVIDIA HGX B200 datasheet, per GPU (4.5 PFLOPS bf16 and 2.25 tf32 with sparsity)"),
    Peak("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
         "NVIDIA A100 datasheet (624 bf16 and 312 tf32 with sparsity)"),
    Peak("A10G", {"bf16": 70.0, "fp16": 70.0},
         "no NVIDIA datasheet for AWS's A10G; baseten.co's 'NVIDIA A10 vs A10G' from the two spec sheets"),
    Peak("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
         "NVIDIA A10 datasheet (250 bf16 and 125 tf32 with sparsity)"),
    Peak("L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6},
         "NVIDIA L40S datasheet (733 bf16 and 366 tf32 with sparsity)"),
    Peak("L40", {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5},
         "NVIDIA L40 datasheet (362 bf16 and 181 tf32 with sparsity)"),
    Peak("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
         "NVIDIA L4 datasheet (242 bf16 and 120 tf32 with sparsity)"),
    Peak("T4", {"fp16": 65.0, "fp32": 8.1}, "NVIDIA T4 datasheet (no bf16 or tf32 tensor cores)"),
    Peak("V100", {"fp16": 125.0, "fp32": 15.7}, "NVIDIA V100 datasheet, SXM2 column (no bf16 or tf32 tensor cores)"),
)
DTYPES = ("bf16", "fp16", "tf32", "fp32")
# Learned position embeddings: a table lookup, not a matrix multiply, so not among the weights 6N counts.
POSITION_TABLES = ("wpe.", "embed_positions.", "position_embeddings.")


def peak_for(gpu: str, dtype: str) -> Peak | None:
    """The table's row for this GPU when it has a peak for this dtype, else None (said as unknown, never guessed)."""
    row = next((peak for peak in PEAKS if peak.name in gpu), None)
    return row if row is not None and dtype in row.tflops else None


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs count needs from a model: its weights (shared ones once, position tables left out), its layers
    (an encoder's and a decoder's together) and its width."""
    weights: int
    layers: int
    width: int

    def flops_per_token(self, sequence: int) -> float:
        return 6.0 * self.weights + 12.0 * self.layers * self.width * sequence


def shape_of(named_parameters: Iterable[tuple[str, Any]], config: Any) -> ModelShape | None:
    """From a model's named_parameters() (each shared tensor listed once, as torch lists them) and its Hugging Face
    style config; None when there is no config saying its layers and width (not a transformer this formula counts)."""
    weights = sum(p.numel() for name, p in named_parameters if not any(t in name for t in POSITION_TABLES))
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    if layers is not None and getattr(config, "is_encoder_decoder", False):   # T5, BART: that was the encoder's
        layers += _first(config, "num_decoder_layers", "decoder_layers") or 0
    width = _first(config, "hidden_size", "n_embd", "d_model")
    return ModelShape(weights, layers, width) if layers and width else None


def _first(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def utilisation(flops_per_token: float, tokens_per_s_per_gpu: float, peak: Peak, dtype: str) -> float:
    """MFU as a fraction of the peak."""
    return flops_per_token * tokens_per_s_per_gpu / (peak.tflops[dtype] * 1e12)


def job_utilisation(model: Mapping[str, Any] | None, device: str | None, gpu: str | None,
                    tokens_per_second: float | None, samples_per_second: float | None, gpus: int) -> dict:
    """A job's MFU and what it is made of, or why it has none (`why_not`): from the model the worker saw (its
    record's `model`: weights, layers, width, the dtype its matrix multiplies ran in), the host's tokens and samples
    per second from the batches (their ratio is the sequence length) over its `gpus` workers, and the GPU's name."""
    figures: dict = {"mfu": None}
    if not device or not device.startswith("cuda"):
        return {**figures, "why_not": f"MFU is a GPU figure: this job ran on {device or 'an unknown device'}"}
    if not model:
        return {**figures, "why_not": "the worker saw no model it could count (a Trainer's or Accelerate's, one given "
                                      "to torch.compile, or a transformers model that trains)"}
    dtype = model.get("matmul_dtype") or "fp32"
    figures.update(model=model.get("name"), dtype=dtype, dtype_from=model.get("dtype_from"), gpu=gpu)
    if not model.get("layers") or not model.get("width"):
        return {**figures, "why_not": f"{model.get('name')} has no transformer config giving its layers and width: "
                                      f"MFU here counts a transformer's FLOPs (6N plus attention)"}
    if not tokens_per_second or not samples_per_second:
        return {**figures, "why_not": "no tokens/s measured from the batches (a batch of integer token ids, from a "
                                      "DataLoader, after warm-up)"}
    peak = peak_for(gpu or "", dtype)
    if peak is None:
        return {**figures, "why_not": f"no dense {dtype} peak for GPU {gpu or 'unknown'} in opentc_launcher.mfu.PEAKS"}
    sequence = tokens_per_second / samples_per_second
    shape = ModelShape(model["weights"], model["layers"], model["width"])
    per_gpu = tokens_per_second / max(1, gpus)
    flops = shape.flops_per_token(round(sequence))
    return {**figures, "mfu": round(utilisation(flops, per_gpu, peak, dtype), 4), "flops_per_token": flops,
            "sequence": round(sequence, 1), "tokens_per_second_per_gpu": round(per_gpu, 1),
            "peak_tflops": peak.tflops[dtype], "peak_source": peak.source}
