"""The rules by which a job's loss series and the Trainer's throughput are read from the lines its workers print
(opentc_toolkit.loss_lines), and the time that reading takes: linear in the line, whatever the line holds."""

import time

import pytest

from opentc_compare.summary import headline
from opentc_toolkit.loss_lines import SCRIPT, TRAINER, LossLines


def read(*lines):
    reader = LossLines()
    for line in lines:
        reader.feed(line)
    return reader


def points(*lines):
    return [(p["step"], p["loss"]) for p in read(*lines).loss()["points"]]


@pytest.mark.parametrize("line", ["loss 1.25", "loss: 1.25", "loss=1.25", "train loss 1.25", "Loss = 1.25",
                                  "step 3 loss 1.25", "loss: 1.25e0 (lr 3e-4)"])
def test_a_scripts_own_loss_line_is_read(line):
    assert [loss for _, loss in points(line)] == [1.25]
    assert read(line).loss()["source"] == SCRIPT


@pytest.mark.parametrize("line", ["train_loss 1.2", "eval_loss: 1.2", "loss_type 2", "first loss 5.99, last loss 1.84",
                                  "model.loss 1.2", "lossless 3", "the loss went down", "{'eval_loss': '1.2'}"])
def test_what_is_not_one_loss_is_not_read(line):
    assert points(line) == []


@pytest.mark.parametrize("line", [
    "Test set: Average loss: 0.0022, Accuracy: 9911/10000 (99%)",   # pytorch/examples' MNIST, the peer's mnist.py
    "validation loss 1.2", "Validation Loss = 0.8", "epoch 3 val loss: 0.7", "Eval loss=0.5", "test loss 0.4",
    "2026-11-29 INFO Evaluating: step 10 loss 0.9", "Testing: 100%|##| loss=0.3"])
def test_an_evaluations_loss_is_no_point_of_the_training_curve(line):
    """Issue 52: the peer's MNIST job's headline said "loss 2.263 -> 0.0022", its last point a test set's loss."""
    reader = read("Train Epoch: 1 [0/256 (0%)]\tLoss: 2.263", line)
    assert [p["loss"] for p in reader.loss()["points"]] == [2.263]
    assert reader.loss()["evaluation_lines"] == 1


@pytest.mark.parametrize("line", ["Epoch 0: 100%|##| 10/10 [00:01, loss=0.5, v_num=0, val_loss=0.4]",
                                  "step 3 loss 0.5 (test_run)", "[validate_every=100] loss 0.5",
                                  "{'loss': '0.5', 'epoch': '1.0', 'eval_steps': 10}"])
def test_a_training_loss_beside_evaluation_words_that_are_not_before_it_is_read(line):
    reader = read(line)
    assert [p["loss"] for p in reader.loss()["points"]] == [0.5] and reader.loss()["evaluation_lines"] == 0


def test_the_headline_says_where_the_curve_came_from_or_that_there_was_none():
    def said(*lines):
        line = headline({"loss": read(*lines).loss()})
        return line[line.index("peak memory"):].split("; ", 1)[1]   # the loss part, last

    assert said("step 1 loss 2.0", "step 2 loss 1.5") == "loss 2 -> 1.5 (from the script's own loss lines)"
    assert said("{'loss': 2.0}", "Test set: Average loss: 0.1") == \
        "loss 2 -> 2 (from the Trainer's log; 1 evaluation line left out)"
    assert said("Test set: Average loss: 0.1", "Test set: Average loss: 0.05") == \
        "no training loss in the log (2 evaluation lines left out)"
    assert said("no loss here") == "no training loss in the log"
    assert headline({}).endswith("; no training loss in the log")   # a summary of before (or of no job)


def test_steps_order_the_series_and_the_first_value_for_a_step_wins():
    assert points("step 2 loss 2.0", "step: 1 loss 3.0", "step=2 loss 9.0") == [(1, 3.0), (2, 2.0)]


def test_lines_without_a_step_are_numbered_in_the_order_they_came():
    assert points("loss 3.0", "loss 2.0") == [(0, 3.0), (1, 2.0)]


def test_the_trainers_lines_and_its_final_rates():
    reader = read("{'loss': '4.51', 'grad_norm': '1.2', 'learning_rate': '3e-05', 'epoch': '0.25'}",
                  "{'loss': 3.9, 'epoch': 0.5}",
                  "{'train_runtime': '10.5', 'train_samples_per_second': '30.4', 'train_tokens_per_second': '1945.6'}")
    assert [p["loss"] for p in reader.loss()["points"]] == [4.51, 3.9]
    assert reader.loss()["source"] == TRAINER
    assert reader.trainer_rates() == {"train_runtime": 10.5, "train_samples_per_second": 30.4,
                                      "train_tokens_per_second": 1945.6}


def test_a_loss_that_is_not_a_number_is_kept_as_null():
    assert points("step 1 loss inf", "step 2 loss 1.5", "step 3 loss nan") == [(1, None), (2, 1.5), (3, None)]


# Each line makes a regular expression with two adjacent runs of blanks try every split of them before it fails:
# quadratic time, a minute for 50,000 blanks. A supervisor's pump reads lines up to 128 KiB long.
@pytest.mark.parametrize("line", ["loss" + " " * 131072, "step" + " " * 131072 + "loss 1", "loss:" + " " * 131072 + "x",
                                  "'loss'" + " " * 131072, "loss " * 26214, "{'loss': " + " " * 131072])
def test_reading_a_line_takes_linear_time(line):
    started = time.process_time()
    read(line)
    # Linear reading takes about a millisecond here; the quadratic one took minutes. 2 s of CPU time holds on any
    # machine, busy or not.
    assert time.process_time() - started < 2.0
