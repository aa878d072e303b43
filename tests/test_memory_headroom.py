"""A compiled job's peak memory against its GPU's, value by value (launcher measurements.headroom_finding; toolkit
job_summary's device_memory and the headline). No GPU here: the figures a GPU worker records are given as numbers;
the worker's own reading (torch.cuda.get_device_properties) is dev/gpu-kit's to run on a lent GPU."""

import pytest

from opentc_compare.summary import headline
from opentc_launcher.measurements import FILLED_SHARE, HEADROOM_SHARE, headroom_finding
from opentc_toolkit.job_summary import _device_memory

H100 = 81_559.0   # MB, as torch reports an H100 80GB's memory


@pytest.mark.parametrize(("peak", "device"), [(None, H100), (20_000.0, None), (0.0, H100),
                                              (HEADROOM_SHARE * H100, H100), (70_000.0, H100)])
def test_no_finding_without_a_gpu_or_with_half_its_memory_used(peak, device):
    assert headroom_finding(peak, device) is None


def test_a_job_using_a_quarter_of_its_gpu_is_told_a_larger_batch_would_fit_and_nothing_is_changed():
    problem = headroom_finding(H100 / 4, H100)
    assert problem.startswith("the GPU's memory was at most 25% used (20,390 MB at the peak of 81,559 MB): a batch up "
                              "to about 3.4x as large would likely fit"), problem
    assert f"until the peak is about {FILLED_SHARE:.0%} of the memory" in problem
    assert "the image never changes the batch itself" in problem


def test_the_summary_says_the_peak_against_the_gpus_memory_and_only_on_a_gpu():
    gpu = _device_memory({"peak_memory_mb": 20_390.0, "device_memory_mb": H100})
    assert gpu == {"peak_mb": 20_390.0, "device_mb": H100, "share": 0.25}
    assert _device_memory({"peak_memory_mb": 900.0, "device_memory_mb": None}) is None   # a CPU job
    assert _device_memory(None) is None
    line = headline({"backend": "inductor", "device": "cuda", "workers": 1, "optimizer_steps": 10,
                     "peak_memory_mb": 20_390.0, "device_memory": gpu, "host_reads": {"per_step": 0.0}})
    assert "peak memory 20,390 MB (25% of the GPU's 81,559 MB)" in line and "0 host read(s) a step" in line, line
