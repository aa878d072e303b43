"""Triton links `-lcuda`: where the driver's folder has only libcuda.so.1 (the NVIDIA container runtime, SageMaker),
the Inductor worker gives Triton a folder with a libcuda.so link (TRITON_LIBCUDA_PATH). No GPU or driver exists
here: a stub library named libcuda.so.1 stands in for the driver's, and gcc links against it as Triton would."""

import os
import subprocess

from opentc_launcher.inductor.libcuda import driver_folders, linkable_libcuda


def stub_driver(folder):
    """A shared library with soname libcuda.so.1, alone in its folder, as a mounted driver is."""
    folder.mkdir()
    source = folder.parent / "stub.c"
    source.write_text("int cuInit(unsigned int flags) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(source)], check=True)
    return folder


def link_with_lcuda(tmp_path, library_dir):
    """What Triton's launcher build does: a shared object linked with -L<dir> -lcuda."""
    source = tmp_path / "launcher.c"
    source.write_text("int cuInit(unsigned int); int launch(void) { return cuInit(0); }\n")
    return subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "launcher.so"), str(source),
                           f"-L{library_dir}", "-lcuda"], capture_output=True, text=True)


def test_only_libcuda_so_1_mounted_gets_a_linkable_folder(tmp_path):
    driver = stub_driver(tmp_path / "driver")
    failed = link_with_lcuda(tmp_path, driver)
    assert failed.returncode != 0 and "cannot find -lcuda" in failed.stderr   # the failure Triton hits
    env = linkable_libcuda({}, [str(driver)], scratch=str(tmp_path))
    folder = env["TRITON_LIBCUDA_PATH"]
    assert os.path.realpath(os.path.join(folder, "libcuda.so")) == str(driver / "libcuda.so.1")
    linked = link_with_lcuda(tmp_path, folder)
    assert linked.returncode == 0, linked.stderr
    assert sorted(os.listdir(driver)) == ["libcuda.so.1"]                         # nothing written there


def test_nothing_changes_where_triton_can_link_already(tmp_path):
    driver = stub_driver(tmp_path / "driver")
    assert linkable_libcuda({"TRITON_LIBCUDA_PATH": "/mine"}, [str(driver)]) == {}   # the user's choice
    assert linkable_libcuda({}, []) == {}                                               # no driver at all
    os.symlink("libcuda.so.1", driver / "libcuda.so")
    assert linkable_libcuda({}, [str(driver)]) == {}                                    # linkable as it is


def test_driver_folders_are_read_as_triton_reads_them(tmp_path):
    driver = stub_driver(tmp_path / "driver")
    ldconfig = tmp_path / "ldconfig"
    ldconfig.write_text("#!/bin/sh\ncat <<'END'\n2 libs found in cache `/etc/ld.so.cache'\n"
                        f"\tlibcudart.so.12 (libc6,x86-64) => /usr/lib/libcudart.so.12\n"
                        f"\tlibcuda.so.1 (libc6,x86-64) => {driver}/libcuda.so.1\nEND\n")
    ldconfig.chmod(0o755)
    assert driver_folders(str(ldconfig)) == [str(driver)]
    assert driver_folders(str(tmp_path / "no-ldconfig")) == []
