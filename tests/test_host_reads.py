"""Host reads counted on every backend (opentc_launcher.host_reads), and a Trainer step that makes none
(opentc_launcher.sync_free_step).

The rules are tested in this process, on torch's real tensors, with the wrappers installed for the test and taken
off after it; the promise, a Trainer job whose steps that log nothing read nothing back, through the real `train`
with the patches on and off. Nothing here needs a GPU: on a CPU job a read counts where a GPU job would wait."""

import json
import textwrap

import numpy as np
import pytest
import torch

from conftest import run_train
from opentc_launcher.host_reads import (
    COMPILING,
    DATA_LOADING,
    OPTIMIZER_BOOKKEEPING,
    READ_METHODS,
    THE_IMAGES,
    HostReads,
    per_step_finding,
)
from opentc_launcher.sync_free_step import (
    ALL_ONES,
    NAN_INF_FILTER,
    _counts_parameters_once,
    _filter_on_device,
    all_ones_on_the_host,
    fast_collation,
    known_all_ones,
)

HERE = __file__


@pytest.fixture
def reads():
    """A HostReads for a CPU job, its wrappers on torch.Tensor for the test only."""
    originals = {name: torch.Tensor.__dict__.get(name) for name in READ_METHODS}
    watch = HostReads("cpu").install()
    yield watch
    for name, original in originals.items():
        if original is None:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, original)


def line_of(text: str) -> int:
    """The line of this file that holds `text` (a read's place)."""
    with open(HERE, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "line_of(" not in line)


def test_a_read_is_counted_at_its_line_once_and_in_its_step(reads):
    loss = torch.tensor(2.5)
    assert loss.item() == 2.5                                   # step 1 (the set-up's): counted in it only
    reads.step_ended()
    print(loss)                                                # printing reads several times: one read
    if loss > 0:                                               # bool() of a tensor
        pass
    reads.step_ended()
    assert float(loss) == 2.5
    reads.step_ended()
    reads.step_ended()                                         # a step that read nothing
    figures = reads.figures()
    assert list(reads.per_step) == [1, 2, 1, 0]
    assert (figures["measured_steps"], figures["reads"], figures["steps_with_reads"]) == (3, 3, 2)
    places = [site["where"] for site in figures["sites"]]
    assert places == [f"{HERE}:{line_of(text)} (test_a_read_is_counted_at_its_line_once_and_in_its_step)"
                      for text in ("print(loss)", "if loss > 0:", "assert float(loss) == 2.5")], places
    assert figures["per_step_sites"] == []                      # each place in one step of three: not every step


def test_what_a_gpu_would_not_wait_for_is_left_out(reads):
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1, foreach=False)   # reads its step counter: bookkeeping
    parameter.grad = torch.ones(3)
    optimizer.step()
    loader = torch.utils.data.DataLoader([[1, 2], [3, 4]], batch_size=2,
                                         collate_fn=lambda rows: torch.tensor(rows).tolist())   # a read in collation
    assert next(iter(loader)) == [[1, 2], [3, 4]]
    assert all_ones_on_the_host(torch.ones(2, 4, dtype=torch.long))      # the image's own read of a host mask
    compiled = torch.compile(lambda x: (x * 2).sum(), backend="eager")  # Dynamo's own work while it compiles
    compiled(torch.ones(4))
    figures = reads.figures()
    assert reads.pending == 0 and figures["sites"] == [], figures
    assert figures["left_out"][OPTIMIZER_BOOKKEEPING] >= 1 and figures["left_out"][DATA_LOADING] >= 1, figures
    assert figures["left_out"][THE_IMAGES] >= 1, figures
    assert set(figures["left_out"]) <= {OPTIMIZER_BOOKKEEPING, DATA_LOADING, THE_IMAGES, COMPILING}


def test_on_a_gpu_only_the_gpus_tensors_count(reads):
    """The job's device decides what a read is: on a GPU job (device type cuda) a host tensor's value is no wait."""
    reads.device_type = "cuda"
    host = torch.tensor([1.0, 2.0])
    assert host.tolist() == [1.0, 2.0] and float(host.sum()) == 3.0
    assert reads.pending == 0 and reads.sites == {}


def test_a_compiled_function_that_reads_runs_as_without_the_watch(reads):
    """Dynamo traces a tensor's methods itself: with the wrappers on, a compiled function with a graph break at
    .item() and a .cpu() inside its graph gives what it gives without them, and the read after the break counts."""
    def step(x):
        y = (x * 2).cpu()
        return y * y.sum().item()

    x = torch.arange(4.0)
    assert torch.equal(torch.compile(step, backend="eager")(x), step(x))
    assert reads.figures()["reads"] == 0 and reads.pending >= 1     # counted, in the step still open


def test_a_read_in_what_a_compiled_function_runs_eagerly_counts_as_the_scripts(reads):
    """The head region runs the model's trunk eagerly behind torch.compiler.disable, under Dynamo's frames: a read
    there is the script's (masking_utils' in a trunk), not the compiler's own."""
    @torch.compiler.disable
    def eager_part(x):
        return x * x.sum().item()

    compiled = torch.compile(lambda x: eager_part(x + 1) * 2, backend="eager")
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 24.0))
    assert reads.pending == 1 and COMPILING not in reads.left_out, (reads.pending, reads.left_out)


def test_a_place_that_reads_every_step_is_a_finding_and_logging_steps_are_not(reads):
    loss = torch.tensor(1.0)
    for step in range(1, 9):
        bool(torch.isnan(loss))                                 # every step
        if step % 4 == 0:
            loss.item()                                         # a logging step's read
        reads.step_ended()
    figures = reads.figures()
    assert [site["where"].split(" ")[0] for site in figures["per_step_sites"]] == \
        [f"{HERE}:{line_of('bool(torch.isnan(loss))')}"]
    assert figures["per_step_median"] == 1 and figures["steps_with_reads"] == 7 and figures["reads"] == 9
    problem = per_step_finding(figures)
    assert problem.startswith("a device tensor was read back to the host in 7 of 7 optimizer steps (1 a step at the "
                              "median), every step at: ") and "(7 read(s) in 7 step(s))" in problem, problem


def test_the_nan_inf_filter_is_rewritten_to_the_same_total_without_a_read():
    """The rewrite on the text transformers 4.x and 5.x both have (names differ: args/self.args, tr_loss/
    self._tr_loss), and what the rewritten lines compute, nan, inf and a finite loss alike."""
    source = """\
    def loop(self, args, tr_loss, tr_loss_step):
        if True:
            if (
                args.logging_nan_inf_filter
                and not is_torch_xla_available()
                and (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step))
            ):
                # if loss is nan or inf simply add the average of previous logged losses
                tr_loss += tr_loss / (1 + self.state.global_step - self._globalstep_last_logged)
            else:
                if tr_loss.device != tr_loss_step.device:
                    raise ValueError("device")
                tr_loss += tr_loss_step
        return tr_loss
"""
    rewritten = NAN_INF_FILTER.sub(_filter_on_device, source)
    assert rewritten.count("\n") == source.count("\n") and "isnan" not in rewritten, rewritten
    namespace = {"torch": torch, "is_torch_xla_available": lambda: False}
    for text, name in ((source, "original"), (rewritten, "rewritten")):
        exec(textwrap.dedent(text).replace("def loop", f"def {name}"), namespace)

    class Self:
        state = type("State", (), {"global_step": 7})()
        _globalstep_last_logged = 3

    args = type("Args", (), {"logging_nan_inf_filter": True})()
    for value in (0.5, float("nan"), float("inf")):
        totals = [namespace[name](Self(), args, torch.tensor(2.0), torch.tensor(value))
                  for name in ("original", "rewritten")]
        assert torch.equal(totals[0], totals[1]), (value, totals)


def test_a_mask_known_all_ones_builds_transformers_mask_without_a_read(reads):
    """masking_utils' create_causal_mask, wrapped as the patch wraps it: given a mask the host found all ones (or the
    view GPT-2 makes of it), the mask transformers builds for an all-ones mask, without reading it back; a mask with
    padding is read and built as before."""
    import inspect

    from transformers import GPT2Config
    from transformers.masking_utils import create_causal_mask

    from opentc_launcher.sync_free_step import _without_known_mask

    mask = torch.ones(2, 8, dtype=torch.long)
    assert all_ones_on_the_host(mask) and not all_ones_on_the_host(torch.tensor([[1, 1, 0]]))
    assert not all_ones_on_the_host(torch.ones(2, 1, 8, 8))    # not a padding mask
    setattr(mask, ALL_ONES, True)
    assert known_all_ones(mask) and known_all_ones(mask.view(2, -1)) and not known_all_ones(torch.ones(2, 8))
    patched = _without_known_mask(create_causal_mask, inspect.signature(create_causal_mask))
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8)
    config._attn_implementation = "sdpa"
    common = {"config": config, "inputs_embeds": torch.zeros(2, 8, 8), "past_key_values": None,
              "position_ids": torch.arange(8).expand(2, -1)}   # GPT-2 passes them: looked at without a mask only
    reads.step_ended()
    expected = create_causal_mask(attention_mask=torch.ones(2, 8, dtype=torch.long), **common)
    assert reads.pending == 1                                  # transformers reads the mask to find it all ones ...
    reads.step_ended()
    assert patched(attention_mask=mask.view(2, -1), **common) is expected is None   # ... and builds none: SDPA's
    assert reads.pending == 0                                                      # is_causal; known: no read
    padded = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    assert torch.equal(patched(attention_mask=padded, **common), create_causal_mask(attention_mask=padded, **common))


def test_collation_through_numpy_gives_transformers_batches_or_leaves_them_to_it():
    from transformers.data.data_collator import torch_default_data_collator

    features = [{"input_ids": [i, i + 1, i + 2], "attention_mask": [1, 1, 1]} for i in range(4)]
    fast, original = fast_collation(features), torch_default_data_collator(features)
    assert fast.keys() == original.keys()
    assert all(fast[k].dtype == original[k].dtype and torch.equal(fast[k], original[k]) for k in fast)
    for other in ([{"input_ids": [1, 2], "label": 1}], [{"x": [0.5, 1.0]}], [{"x": [1, 2]}, {"x": [1]}],
                  [{"x": [True, False]}], [{"x": np.arange(3)}], [{"x": [[1], [2]]}], [{"x": [2**70]}], []):
        assert fast_collation(other) is None, other


def parameter_counting_library(era: int):
    """A stand-in for transformers.trainer (its Trainer and PreTrainedModel, the mixin that counts parameters): the
    FLOPs counted as transformers 5's Trainer counts them, or through the model's own floating_point_ops as 4.x's
    does, each line as written there. Its models count how often their modules are walked."""
    import types

    class ModuleUtilsMixin:
        walks = 0

        def num_parameters(self, only_trainable=False, exclude_embeddings=False):
            ModuleUtilsMixin.walks += 1
            return 1000 - 100 * exclude_embeddings - 10 * only_trainable

        def floating_point_ops(self, input_dict, exclude_embeddings=True):
            return 6 * input_dict["input_ids"].numel() * self.num_parameters(exclude_embeddings=exclude_embeddings)

    class PreTrainedModel(ModuleUtilsMixin):
        main_input_name = "input_ids"

    class Trainer:
        def __init__(self, model):
            self.model = model

        if era == 5:
            def floating_point_ops(self, inputs):
                if (main_input := getattr(self.model, "main_input_name", "input_ids")) in inputs and hasattr(
                    self.model, "num_parameters"
                ):
                    return 6 * inputs[main_input].numel() * self.model.num_parameters(exclude_embeddings=True)
                return 0
        else:
            def floating_point_ops(self, inputs):
                if hasattr(self.model, "floating_point_ops"):
                    return self.model.floating_point_ops(inputs)
                else:
                    return 0

    return types.SimpleNamespace(Trainer=Trainer, PreTrainedModel=PreTrainedModel), ModuleUtilsMixin


@pytest.mark.parametrize("era", [5, 4])
def test_the_trainers_flops_count_its_models_parameters_once(era):
    """Patched, the Trainer's FLOPs are what they were, step after step, for each model, from one count of its
    parameters; num_parameters called anywhere else counts them every time, as it did."""
    library, mixin = parameter_counting_library(era)
    unpatched = [library.Trainer(library.PreTrainedModel()).floating_point_ops({"input_ids": torch.ones(4, 8)})]
    _counts_parameters_once(library)
    first, second = library.PreTrainedModel(), library.PreTrainedModel()
    mixin.walks = 0
    flops = [library.Trainer(model).floating_point_ops({"input_ids": torch.ones(4, 8)})
             for model in (first, first, first, second, second)]
    assert flops == unpatched * 5 == [6 * 32 * 900] * 5 and mixin.walks == 2, (flops, mixin.walks)
    assert [first.num_parameters(exclude_embeddings=True), first.num_parameters(), second.num_parameters(True)] \
        == [900, 1000, 990] and mixin.walks == 5


def test_the_parameter_count_is_not_kept_where_the_trainer_counts_otherwise():
    """A Trainer that counts its FLOPs some other way is left as it is: the patch refuses, it does not guess."""
    from opentc_launcher.patching import TargetChanged

    library, _ = parameter_counting_library(5)

    def floating_point_ops(self, inputs):
        return sum(p.numel() for p in self.model.parameters())
    library.Trainer.floating_point_ops = floating_point_ops
    with pytest.raises(TargetChanged, match="no longer counts its FLOPs"):
        _counts_parameters_once(library)


def test_a_batch_is_copied_to_a_gpu_without_waiting_and_elsewhere_as_asked():
    """accelerate's send_to_device, patched: non_blocking for a GPU whatever accelerate asked, as asked elsewhere. No
    GPU here: accelerate's own function is stood in for by one that records its arguments, on a module like its."""
    import types

    from opentc_launcher.sync_free_step import _copies_without_waiting

    calls = []

    def send_to_device(tensor, device, non_blocking=False, skip_keys=None):
        calls.append((device, non_blocking, skip_keys))
        return tensor

    class DataLoaderShard:   # the line the patch checks for, as accelerate's DataLoaderShard.__iter__ has it
        def __iter__(self):
            yield send_to_device(current_batch, self.device, non_blocking=self._non_blocking)  # noqa: F821

    module = types.SimpleNamespace(send_to_device=send_to_device, DataLoaderShard=DataLoaderShard)
    _copies_without_waiting(module)
    for device, asked in (("cuda:0", False), ("cuda", True), ("cpu", False), ("cpu:0", True), ("xla:0", False)):
        module.send_to_device({"input_ids": 1}, device, non_blocking=asked, skip_keys=["x"])
    assert calls == [("cuda:0", True, ["x"]), ("cuda", True, ["x"]), ("cpu", False, ["x"]), ("cpu:0", True, ["x"]),
                     ("xla:0", False, ["x"])]


# --- the promise, through `train` -------------------------------------------------------------------------------------

STEPS, LOGGING_STEPS = 9, 3


def trainer_job(make_job, **extra):
    job = make_job(script="run_clm_tiny.py", sagemaker_training_compiler_enabled=False)
    job.set_hyperparameters(output_dir=str(job.model), max_steps=STEPS, per_device_train_batch_size=4,
                            learning_rate=0.003, logging_steps=LOGGING_STEPS, save_strategy="no", report_to="none",
                            optim="adamw_torch", dataloader_drop_last=True, block_size=64, seed=0, **extra)
    return job


@pytest.mark.slow
def test_a_trainer_step_reads_nothing_back_with_the_patches_and_three_times_without(make_job):
    """The tiny run_clm Trainer job with the compiler off (the step's reads are transformers' and accelerate's,
    whatever the backend): with the library patches, no read on a step that does not log, and the same losses as
    without them, where the nan/inf filter reads twice a step and the mask check once, each named at its line."""
    runs = {}
    for patched in (True, False):
        job = trainer_job(make_job, sagemaker_training_compiler_library_patches=patched)
        result = run_train(job)
        assert result.returncode == 0, result.output[-5000:]
        runs[patched] = (job, result, job.read_json("output/data/job-summary.json"))
    job, result, summary = runs[True]
    for name in ("transformers-nan-inf-filter-on-device", "accelerate-notes-all-ones-masks",
                 "transformers-trainer-keeps-mask-facts", "transformers-masks-known-all-ones",
                 "transformers-collation-through-numpy", "accelerate-copies-batches-without-waiting",
                 "transformers-trainer-counts-parameters-once"):
        assert f"library patch {name} applied" in result.output, name
    reads = summary["host_reads"]
    assert reads["per_step"] == 0 and reads["measured_steps"] == STEPS - 1, reads
    # A logging step reads the loss (after the optimizer step: counted in the next one): at most those.
    assert reads["steps_with_reads"] <= STEPS // LOGGING_STEPS - 1 and reads["every_step_at"] == [], reads
    assert not any("read back to the host" in f for f in summary["findings"]), summary["findings"]

    plain_job, plain, plain_summary = runs[False]
    assert "library patches armed" not in plain.output
    plain_reads = plain_summary["host_reads"]
    assert plain_reads["per_step"] == 3, plain_reads
    places = " ".join(plain_reads["every_step_at"])
    assert "transformers/trainer.py:" in places and "transformers/masking_utils.py:" in places, places
    assert any(f.startswith("a device tensor was read back to the host in 8 of 8 optimizer steps (3 a step")
               for f in plain_summary["findings"]), plain_summary["findings"]
    losses = [json.loads((j.output / "data" / "trainer_metrics.json").read_text())["losses"]
              for j in (job, plain_job)]
    assert len(losses[0]) == STEPS // LOGGING_STEPS and losses[0] == losses[1], losses
    # the FLOPs total from one count of the parameters, the same as from one a step
    flos = [json.loads((j.output / "data" / "trainer_metrics.json").read_text())["total_flos"]
            for j in (job, plain_job)]
    assert flos[0] == flos[1] > 0, flos
