"""Inductor's hashes of torch's and Triton's sources kept per installation (opentc_launcher.inductor.source_keys),
rule by rule, in this process.

What names an installation is tested on a package made here. torch 2.14's two caches (`prefetchable_cache`, with its
`set()`) are not in this venv's torch 2.7: they are stood in for by `Cache` below, with 2.14's behaviour (a value set
twice is refused); tests/test_inductor.py runs the real ones in the inductor image, in a cold and a warm job."""

import json
import os
import sys

import pytest

from opentc_launcher.inductor import source_keys

TORCH_KEY = bytes(range(32))
TRITON_KEY = "3.6.0" + "-ab" * 40


class Cache:
    """torch 2.14's prefetchable_cache, as far as source_keys uses it: called, it computes once; set, it holds."""

    def __init__(self, value):
        self.value, self.held, self.computed = value, None, 0

    def __call__(self):
        if self.held is None:
            self.computed += 1
            self.held = self.value
        return self.held

    def set(self, value):
        if self.held is not None:
            raise RuntimeError("prefetchable_cache value already set")
        self.held = value


@pytest.fixture
def codecache(monkeypatch):
    from torch._inductor import codecache

    monkeypatch.setattr(codecache, "torch_key", Cache(TORCH_KEY))
    monkeypatch.setattr(codecache, "triton_key", Cache(TRITON_KEY), raising=False)   # 2.7 has none
    return codecache


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package of our own, named as the installation's: a module, a subpackage, headers in a skipped folder."""
    root = tmp_path / "site" / "opentc_sources_pkg"
    (root / "sub").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "kernels.py").write_text("X = 1\n")
    (root / "include" / "vec.h").write_text("// header\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(source_keys, "PACKAGES", ("opentc_sources_pkg", "opentc_not_installed_pkg"))
    monkeypatch.setattr(source_keys, "SKIPPED", {"opentc_sources_pkg": ("include",)})
    sys.modules.pop("opentc_sources_pkg", None)
    return root


def test_an_installation_is_named_by_each_files_path_size_and_time(package):
    first = source_keys.installation()
    assert source_keys.installation() == first
    kernels = package / "sub" / "kernels.py"
    stat = kernels.stat()

    (package / "include" / "vec.h").write_text("// another header, which no module is\n")
    assert source_keys.installation() == first

    kernels.write_text("X = 2\n")                                  # same size, another time
    os.utime(kernels, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    touched = source_keys.installation()
    assert touched != first
    os.utime(kernels, ns=(stat.st_atime_ns, stat.st_mtime_ns))     # the same time again: the same name
    assert source_keys.installation() == first

    kernels.write_text("X = 22\n")                                 # another size, the same time
    os.utime(kernels, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert source_keys.installation() not in (first, touched)
    kernels.write_text("X = 1\n")
    os.utime(kernels, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (package / "sub" / "more.py").write_text("")                   # a file added
    assert source_keys.installation() != first


def test_the_hashes_one_job_kept_are_given_to_torch_by_the_next_on_that_installation(tmp_path, codecache):
    first = source_keys.SourceKeys(str(tmp_path))
    assert first.give() == "hashed here: none kept for this installation yet"
    first.keep()                                                   # after its first compilation: computed there
    assert codecache.torch_key.computed == codecache.triton_key.computed == 1
    kept = json.loads((tmp_path / source_keys.KEYS_FILE).read_text())
    assert kept == {"installation": source_keys.installation(), "torch_key": TORCH_KEY.hex(), "triton_key": TRITON_KEY}

    codecache.torch_key, codecache.triton_key = Cache(b"not this"), Cache("not this")   # the next job's process
    second = source_keys.SourceKeys(str(tmp_path))
    assert second.give() == "given from the cache folder: kept for this installation"
    assert (codecache.torch_key(), codecache.triton_key()) == (TORCH_KEY, TRITON_KEY)
    assert codecache.torch_key.computed == codecache.triton_key.computed == 0
    second.keep()                                                  # given: nothing written again
    assert json.loads((tmp_path / source_keys.KEYS_FILE).read_text()) == kept

    codecache.torch_key, codecache.triton_key = Cache(TORCH_KEY), Cache(TRITON_KEY)
    codecache.torch_key()                                          # something computed it before: torch's value stands
    third = source_keys.SourceKeys(str(tmp_path))
    assert third.give() == "hashed here: prefetchable_cache value already set"


@pytest.mark.parametrize("content", [
    '{"installation": "%s", "torch_key": "00", "triton_key": null}',                 # not a hash's length
    '{"installation": "%s", "torch_key": "' + "zz" * 32 + '", "triton_key": null}',  # not hexadecimal
    '{"installation": "%s", "torch_key": "' + "00" * 32 + '", "triton_key": 7}',     # Triton's is text or null
    '{"installation": "another", "torch_key": "' + "00" * 32 + '", "triton_key": null}',
    '["%s"]', "not json %s", "{" * 100_000 + "%s",
])
def test_a_file_that_is_not_this_installations_hashes_gives_torch_nothing(tmp_path, codecache, content):
    """The file comes back from S3 with the cache folder: anything but this installation's two hashes is ignored,
    and torch hashes as without it (and the job keeps its own over it)."""
    (tmp_path / source_keys.KEYS_FILE).write_text(content.replace("%s", source_keys.installation()))
    keys = source_keys.SourceKeys(str(tmp_path))
    assert keys.give() == "hashed here: none kept for this installation yet"
    assert codecache.torch_key.held is None and codecache.triton_key.held is None
    keys.keep()
    assert json.loads((tmp_path / source_keys.KEYS_FILE).read_text())["torch_key"] == TORCH_KEY.hex()


def test_a_torch_whose_caches_cannot_be_filled_ahead_hashes_as_before(tmp_path, monkeypatch):
    """torch 2.7's two hashes are plain memoized functions: nothing is given, and nothing kept."""
    from torch._inductor import codecache

    monkeypatch.setattr(codecache, "torch_key", lambda: TORCH_KEY)
    keys = source_keys.SourceKeys(str(tmp_path))
    assert keys.give() == "not on this torch: its source hashes cannot be given ahead"
    keys.keep()
    assert not (tmp_path / source_keys.KEYS_FILE).exists()
