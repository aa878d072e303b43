"""Model FLOPs utilisation, value by value: the FLOPs count against published parameter counts (GPT-2, Llama 2,
T5, BERT: models built on torch's meta device, from configs, nothing downloaded), the peak table's lookup by the
driver's GPU names, each reason a job has no MFU, and the job summary and opentc-compare with a GPU's name given as a
fact (no GPU here: the real jobs that carry a model's figures run on the CPU, in test_job_summary.py)."""

import pytest

from opentc_compare.inputs import Job
from opentc_compare.summary import headline
from opentc_compare.table import render
from opentc_launcher.mfu import PEAKS, job_utilisation, peak_for, shape_of
from opentc_toolkit.job_summary import TRAINER_RATE, _utilisation

H100 = "NVIDIA H100 80GB HBM3"   # as the driver and torch name the lent machine's GPU


def meta_model(name, **config):
    import torch
    import transformers

    model_class = getattr(transformers, name)   # imported before the meta device is the default
    config_class = model_class.config_class
    with torch.device("meta"):   # shapes only: nothing allocated or initialised
        return model_class(config_class(**config))


@pytest.mark.parametrize(("model", "config", "published", "position_table", "layers", "width"), [
    # GPT-2 small: 124,439,808 parameters, its 1024 x 768 learned position table among them.
    ("GPT2LMHeadModel", {}, 124_439_808, 1024 * 768, 12, 768),
    # Llama 2 7B: 6,738,415,616 parameters; rotary positions, no table.
    ("LlamaForCausalLM", {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                          "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}, 6_738_415_616,
     0, 32, 4096),
    # T5-base: 222,903,552 parameters (its output layer tied to the embeddings); 12 encoder and 12 decoder layers.
    ("T5ForConditionalGeneration", {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12,
                                    "vocab_size": 32128}, 222_903_552, 0, 24, 768),
    # BERT base (uncased): 109,482,240 parameters, its 512 x 768 position table among them.
    ("BertModel", {}, 109_482_240, 512 * 768, 12, 768),
])
def test_the_weights_6n_counts_are_the_published_parameters_less_the_position_table(model, config, published,
                                                                                      position_table, layers, width):
    built = meta_model(model, **config)
    assert sum(p.numel() for p in built.parameters()) == published
    shape = shape_of(built.named_parameters(), built.config)
    assert (shape.weights, shape.layers, shape.width) == (published - position_table, layers, width)
    # 6N plus attention's 12 x layers x width x sequence (PaLM's count, as llm.c and nanoGPT make it)
    assert shape.flops_per_token(512) == 6 * shape.weights + 12 * layers * width * 512


def test_a_model_without_a_transformer_config_has_no_shape():
    import torch

    assert shape_of(torch.nn.Linear(4, 4).named_parameters(), None) is None


def test_tokens_are_counted_only_where_a_batch_holds_token_ids():
    """Issue 51 (6): a DataLoader of uint8 images (B, 3, H, W) counted 3 tokens an image, and an MFU was built from
    them. Tokens are a 2-D int64 or int32 batch (alone, or first in a tuple) or a mapping's input_ids; anything else
    counts samples only, so its rate has no tokens and no MFU."""
    import time

    import torch

    from opentc_launcher.measurements import BatchWatch

    ids = torch.zeros(4, 16, dtype=torch.int64)

    class Encoding:   # a transformers BatchEncoding: a mapping that is no dict, its ids an attribute
        def __init__(self, input_ids):
            self.input_ids = input_ids

    cases = [(ids, 64), (ids.int(), 64), ((ids, torch.zeros(4)), 64), ({"input_ids": ids, "labels": ids}, 64),
             (Encoding(ids), 64), (torch.zeros(4, 3, 8, 8, dtype=torch.uint8), 0),
             ([torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.zeros(4, dtype=torch.int64)], 0),
             ({"pixel_values": torch.zeros(4, 3, 8, 8), "labels": torch.zeros(4, dtype=torch.int64)}, 0),
             ({"labels": ids}, 0), (torch.zeros(4, 16), 0), (torch.zeros(4, 16, 2, dtype=torch.int64), 0),
             (torch.zeros(4, 16, dtype=torch.uint8), 0), (torch.zeros(4, 16, dtype=torch.bool), 0)]
    for batch, tokens in cases:
        watch = BatchWatch()
        start = time.monotonic()
        watch.seen(batch)
        assert (watch.samples[-1], watch.tokens[-1]) == (4, tokens), batch
        rates = watch.rates(start - 1, time.monotonic() + 1)
        assert (rates["tokens_per_second"] is None) is (tokens == 0), batch
    why = job_utilisation(GPT2_SMALL, "cuda", H100, None, 100.0, 1)["why_not"]
    assert why.startswith("no tokens/s measured from the batches"), why


@pytest.mark.parametrize(("gpu", "dtype", "tflops"), [
    (H100, "bf16", 989.0), ("NVIDIA H100 PCIe", "bf16", 756.0), ("NVIDIA H100 NVL", "bf16", 835.0),
    ("NVIDIA H200", "bf16", 989.0), ("NVIDIA H200 NVL", "bf16", 835.0), ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156.0), ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
    ("NVIDIA A10G", "bf16", 70.0), ("NVIDIA A10", "bf16", 125.0), ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40S", "bf16", 362.0), ("Tesla T4", "fp16", 65.0), ("Tesla V100-SXM2-16GB", "fp16", 125.0),
])
def test_a_gpu_finds_its_own_row_not_one_whose_name_is_inside_its_own(gpu, dtype, tflops):
    """An A100's name holds "A10", an L40S's "L4", an H100 PCIe's "H100": the most specific row wins."""
    assert peak_for(gpu, dtype).tflops[dtype] == tflops


@pytest.mark.parametrize(("gpu", "dtype"), [("Tesla T4", "bf16"), ("Tesla V100-SXM2-16GB", "tf32"),
                                            ("NVIDIA A10G", "fp32"), ("NVIDIA RTX PRO 6000", "bf16"), ("", "bf16")])
def test_a_gpu_or_dtype_not_in_the_table_has_no_peak(gpu, dtype):
    assert peak_for(gpu, dtype) is None


def test_every_peak_names_its_source():
    assert all(peak.source and peak.tflops for peak in PEAKS)


GPT2_SMALL = {"name": "GPT2LMHeadModel", "seen_by": "torch.compile", "weights": 123_653_376, "layers": 12,
              "width": 768, "matmul_dtype": "bf16", "dtype_from": "torch.autocast"}


@pytest.mark.parametrize(("model", "device", "gpu", "tokens", "gpus", "expected"), [
    (GPT2_SMALL, "cuda", H100, 463_000, 1, 0.3738),          # llm.c's H100 figure: "about 40%"
    (GPT2_SMALL, "cuda", H100, 926_000, 2, 0.3738),          # the host's tokens/s, over its GPUs
    (GPT2_SMALL, "cuda", "NVIDIA A100-SXM4-80GB", 231_000, 1, 0.5912),   # llm.c's A100 figure: "about 60%"
    ({**GPT2_SMALL, "matmul_dtype": "fp32"}, "cuda", H100, 10_000, 1, 0.1192),   # plain float32: 67 TFLOPS
])
def test_mfu_is_flops_per_token_times_tokens_per_second_per_gpu_over_the_peak(model, device, gpu, tokens, gpus,
                                                                               expected):
    found = job_utilisation(model, device, gpu, tokens, tokens / 512, gpus)
    assert found["mfu"] == pytest.approx(expected, abs=1e-4) and "why_not" not in found
    assert found["sequence"] == 512 and found["flops_per_token"] == 798_543_360
    assert found["dtype"] == model["matmul_dtype"] and found["peak_source"]


@pytest.mark.parametrize(("model", "device", "gpu", "tokens", "why"), [
    (GPT2_SMALL, "cpu", None, 1000, "MFU is a GPU figure: this job ran on cpu"),
    (GPT2_SMALL, "xla", None, 1000, "MFU is a GPU figure: this job ran on xla"),
    (None, "cuda", H100, 1000, "the worker saw no model it could count"),
    ({**GPT2_SMALL, "layers": None, "width": None, "name": "Net"}, "cuda", H100, 1000,
     "Net has no transformer config giving its layers and width"),
    (GPT2_SMALL, "cuda", H100, None, "no tokens/s measured from the batches"),
    (GPT2_SMALL, "cuda", "Tesla T4", 1000, "no dense bf16 peak for GPU Tesla T4"),
    (GPT2_SMALL, "cuda", None, 1000, "no dense bf16 peak for GPU unknown"),
])
def test_a_job_without_mfu_says_why(model, device, gpu, tokens, why):
    found = job_utilisation(model, device, gpu, tokens, tokens and tokens / 512, 1)
    assert found["mfu"] is None and found["why_not"].startswith(why), found


def record(model):
    return {"process": "rank0", "rank": 0, "model": model}


def test_the_job_summary_counts_mfu_from_the_batches_only():
    """On an H100 (given as a fact): from the batches' tokens/s; not from the Trainer's whole-run rate, which
    includes compilation."""
    batches = {"samples_per_second": 904.3, "tokens_per_second": 463_000.0, "source": "batch shapes, steady state"}
    found = _utilisation(record(GPT2_SMALL), "cuda", H100, batches, 1)
    assert found["mfu"] == pytest.approx(0.374, abs=1e-3) and found["gpu"] == H100 and found["dtype"] == "bf16"
    trainer = {**batches, "source": TRAINER_RATE}
    assert _utilisation(record(GPT2_SMALL), "cuda", H100, trainer, 1)["why_not"].startswith("no tokens/s measured")


def summary(name, device, utilisation):
    return {"format": "opentc-job-summary/1", "job_name": name, "device": device, "backend": "inductor",
            "workers": 1, "optimizer_steps": 10, "throughput": {"tokens_per_second": 463_000.0},
            "utilisation": utilisation}


def test_compare_shows_mfu_beside_tokens_per_second_and_says_why_a_job_has_none():
    on_gpu = summary("gpu", "cuda", job_utilisation(GPT2_SMALL, "cuda", H100, 463_000, 904.3, 1))
    on_cpu = summary("cpu", "cpu", job_utilisation(GPT2_SMALL, "cpu", None, 463_000, 904.3, 1))
    table = render([Job("gpu", "gpu", on_gpu), Job("cpu", "cpu", on_cpu)])
    rows = table.splitlines()
    mfu_row = next(row for row in rows if row.startswith("| MFU"))
    assert mfu_row == "| MFU (% of the GPU's dense peak) | 37.4 | - |"
    assert rows.index(mfu_row) == next(i for i, row in enumerate(rows) if row.startswith("| tokens/s vs first")) + 1
    assert "No MFU:" in rows and "- inductor (cpu): MFU is a GPU figure: this job ran on cpu" in rows
    assert "MFU 37.4%" in headline(on_gpu) and "MFU" not in headline(on_cpu)
    only_cpu = render([Job("cpu", "cpu", on_cpu)])
    assert "MFU" not in only_cpu   # no row of dashes where no job has one
