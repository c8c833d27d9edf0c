"""run/outdir.choose_run_dir (one run per directory, nothing created) and run/meta.py's pure parts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ipcbench.run import meta
from ipcbench.run.outdir import choose_run_dir


def test_explicit_out_is_used_as_is_and_not_created(tmp_path):
    target = tmp_path / "a" / "b"
    assert choose_run_dir(str(target), "ignored") == (target, None)
    assert not (tmp_path / "a").exists()


def test_explicit_out_with_results_is_refused(tmp_path):
    (tmp_path / "results.csv").write_text("x\n")
    path, err = choose_run_dir(str(tmp_path), "ignored")
    assert path is None and "already holds a run (results.csv)" in err and "never appends" in err


def test_explicit_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    path, err = choose_run_dir(str(f), "ignored")
    assert path is None and "exists and is not a directory" in err
    path, err = choose_run_dir(str(f / "sub"), "ignored")  # below a file
    assert path is None and "is a file, not a directory" in err


def test_default_ids_get_suffixes_past_used_directories(tmp_path):
    root = tmp_path / "results"
    assert choose_run_dir(None, "run", root=str(root)) == (root / "run", None)
    (root / "run").mkdir(parents=True)
    assert choose_run_dir(None, "run", root=str(root)) == (root / "run", None)  # empty: reusable
    (root / "run" / "results.csv").write_text("")
    (root / "run-2").mkdir()
    (root / "run-2" / "meta.json").write_text("{}")  # a failed start's leftovers count as used
    assert choose_run_dir(None, "run", root=str(root)) == (root / "run-3", None)
    assert sorted(p.name for p in root.iterdir()) == ["run", "run-2"]  # nothing created


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_parent_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        path, err = choose_run_dir(str(ro / "x"), "ignored")
        assert path is None and "is not writable" in err
    finally:
        ro.chmod(0o700)


def test_clean_strips_nul_padding():
    assert meta.clean("  Open MPI v5\x00\x00 ") == "Open MPI v5"


def test_run_id_from_slurm_or_time(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert meta.make_run_id("node7") == "4242-node7"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert re.fullmatch(r"\d{8}-\d{6}-node7", meta.make_run_id("node7"))
    assert meta.make_run_id().endswith("-" + os.uname().nodename.split(".")[0])


def test_base_meta_and_times():
    m = meta.base_meta("rid", ["copy", "--quick"]).as_json()
    assert m["run_id"] == "rid" and m["command"] == ["ipcbench", "copy", "--quick"]
    assert m["status"] == "running" and m["end"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", m["start"])
    assert re.fullmatch(r"[0-9a-f]{16}", m["source_digest"])


def test_source_digest_follows_the_code_and_only_the_code(tmp_path, monkeypatch):
    """Same tree, same digest; one changed byte in a module or a kernel changes it; caches and other files
    do not. Run on a copy of the package laid out as an editable checkout is (kernels/ beside ipcbench/)."""
    import shutil
    import subprocess
    import sys

    root = Path(meta.__file__).resolve().parents[2]
    shutil.copytree(root / "ipcbench", tmp_path / "ipcbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "kernels", tmp_path / "kernels")
    (tmp_path / "ipcbench" / "kernels").symlink_to(tmp_path / "kernels")  # the package data, where a wheel has it
    code = "from ipcbench.run.meta import source_digest; print(source_digest())"

    def digest():
        return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout.strip()

    first = digest()
    assert re.fullmatch(r"[0-9a-f]{16}", first) and digest() == first
    (tmp_path / "ipcbench" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "ipcbench" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (tmp_path / "ipcbench" / "notes.txt").write_text("not code")
    assert digest() == first
    (tmp_path / "kernels" / "copy.cu").write_text((tmp_path / "kernels" / "copy.cu").read_text() + "\n")
    second = digest()
    assert second != first
    (tmp_path / "ipcbench" / "sizes.py").write_text((tmp_path / "ipcbench" / "sizes.py").read_text() + "#\n")
    assert digest() not in (first, second)


class FakeNvml:
    """A stand-in for pynvml's module: the calls mem_bandwidth_gbps makes."""

    NVML_CLOCK_MEM = 2

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return bus

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_MEM
        return 2619

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 5120


def test_mem_bandwidth_from_nvml(monkeypatch):
    from ipcbench.core import topology

    monkeypatch.setattr(topology, "_nvml", lambda: FakeNvml())
    assert meta.mem_bandwidth_gbps("0000:1b:00.0") == pytest.approx(3352.3)  # 2619 MHz x 5120 bit x 2 / 8

    def broken():
        raise OSError("no NVML")

    monkeypatch.setattr(topology, "_nvml", broken)
    assert meta.mem_bandwidth_gbps("0000:1b:00.0") is None


def test_package_versions():
    assert meta._pkg("pytest") is not None and meta._pkg("no-such-package-ipcbench") is None


def test_cuda_versions_keys(monkeypatch):
    from cupy.cuda import runtime

    from ipcbench.core import topology

    monkeypatch.setattr(topology, "nvml_driver_version", lambda: "570.1")
    v = meta.cuda_versions()
    assert v["driver"] == "570.1" and v["cuda_runtime"] == runtime.runtimeGetVersion()
    assert isinstance(v["cuda_driver"], int)


REPO = __import__("pathlib").Path(meta.__file__).resolve().parents[2]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_git_commit_of_the_checkout():
    import subprocess

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    got = meta.git_commit()
    assert got is not None and got.startswith(head)
