"""The GPU kit's arithmetic (dev/gpu-kit), value by value: the largest-batch search and MFU. No GPU here: the search
is driven by a stand-in for "does this batch fit", and MFU by figures of the size llm.c publishes."""

import importlib.machinery
import importlib.util

import pytest

from conftest import REPO

_loader = importlib.machinery.SourceFileLoader("gpu_kit", str(REPO / "dev" / "gpu-kit"))
_spec = importlib.util.spec_from_loader("gpu_kit", _loader)
kit = importlib.util.module_from_spec(_spec)
_loader.exec_module(kit)

GPT2_SMALL_FLOPS_PER_TOKEN = 798_543_360   # bench_worker's count for GPT-2 small at sequence 512


@pytest.mark.parametrize(("capacity", "found"), [
    (0, (0, 8)), (8, (8, 16)), (100, (96, 104)), (127, (120, 128)), (128, (128, 136)), (4096, (4096, None)),
    (10**6, (4096, None)),
])
def test_the_largest_batch_is_found_by_doubling_then_bisecting_to_within_eight(capacity, found):
    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= capacity

    assert kit.search_largest(fits) == found
    assert len(tried) == len(set(tried)) <= 16   # each batch tried once, in a handful of fresh processes


@pytest.mark.parametrize(("gpu", "tokens_per_s", "world", "expected"), [
    ("NVIDIA H100 80GB HBM3", 463_000, 1, "37.4%"),      # llm.c's H100 figure: "about 40%"
    ("NVIDIA A100-SXM4-80GB", 231_000, 1, "59.1%"),      # llm.c's A100 figure: "about 60%"
    ("NVIDIA H100 PCIe", 463_000, 1, "48.9%"),           # the PCIe card's lower peak, not the SXM's
    ("NVIDIA H100 80GB HBM3", 926_000, 2, "37.4%"),      # a DDP row's tokens/s are the world's: per GPU
    ("Tesla T4", 463_000, 1, ""),                        # not in the table: said as unknown, not guessed
])
def test_mfu_is_flops_per_token_times_tokens_per_second_over_the_gpus_dense_bf16_peak(gpu, tokens_per_s, world,
                                                                                        expected):
    row = {"tokens_per_s": tokens_per_s, "flops_per_token": GPT2_SMALL_FLOPS_PER_TOKEN, "world": world}
    assert kit.mfu(row, gpu) == expected


def test_flops_per_token_is_six_times_the_weights_plus_attention():
    """GPT-2 small at sequence 512: 123,653,376 weights without the position embeddings (the output layer shares the
    token embeddings), so 6N = 741,920,256, plus 12 x 12 layers x 768 wide x 512 = 56,623,104 for attention."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from bench_worker import flops_per_token
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):   # shapes only: nothing allocated or initialised
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=512, n_layer=12, n_head=12, n_embd=768))
    assert flops_per_token(model) == 6 * 123_653_376 + 12 * 12 * 768 * 512 == GPT2_SMALL_FLOPS_PER_TOKEN


@pytest.mark.parametrize(("figures", "expected"), [
    ({1}, ["GPT-2 small, eager", "GPT-2 small, Inductor cold", "GPT-2 small, Inductor warm"]),
    ({3, 5}, ["run_clm (the seeds' job), compiler off", "run_clm (the seeds' job), Inductor",
              "run_clm (the seeds' job), side by side", "nested compile regions: gradients against eager"]),
    ({6}, ["DDP over NCCL, 2 GPUs, eager", "DDP over NCCL, 2 GPUs, inductor"]),
])
def test_run_figures_picks_the_install_steps_then_the_figures_asked_for_in_order(figures, expected):
    """A lent machine runs 10 minutes a call: `run --figures` splits the kit over several calls."""
    steps = kit.commands("python3", "/tmp/venv", "/tmp/out", gpus=2)
    picked = [name for name, _ in kit.chosen(steps, figures)]
    assert picked[:kit.INSTALL_STEPS] == [name for name, _ in steps[:kit.INSTALL_STEPS]]
    assert picked[kit.INSTALL_STEPS:] == expected


def test_every_step_belongs_to_exactly_one_figure():
    steps = kit.commands("python3", "/tmp/venv", "/tmp/out", gpus=2)[kit.INSTALL_STEPS:]
    for name, _ in steps:
        owners = [number for number, prefixes in kit.FIGURES.items() if name.startswith(prefixes)]
        assert len(owners) == 1, (name, owners)


def test_figures_outside_the_list_are_refused(capsys):
    with pytest.raises(SystemExit) as refused:
        kit.main(["run", "--figures", "1,9"])
    assert refused.value.code == 2
    assert "--figures 1,9: numbers from 1 to 6, comma-separated" in capsys.readouterr().err
