"""The reproducible Horovod build: the patch, the cache key, and reuse of the cached wheel."""

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench.core.environment import SETUP_RECORD, setup_record
from bench.tools import horovod_build as hb
from conftest import ROOT


@pytest.mark.parametrize(
    "torch_version, standard", [("2.14.1+cu130", 20), ("2.13.0", 17), ("2.1.2", 17), ("1.13.1", 14)]
)
def test_cxx_standard_follows_torch(torch_version, standard):
    assert hb.cxx_standard_for(torch_version) == standard


def _extract(tmp_path):
    sdist = hb.cache_root() / "sdist" / f"horovod-{hb.HOROVOD_VERSION}.tar.gz"
    assert sdist.exists(), "run `python -m bench.tools.horovod_build` first (the nox sessions do)"
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / f"horovod-{hb.HOROVOD_VERSION}"


def test_patch_is_minimal_and_complete(tmp_path):
    src = _extract(tmp_path)
    changes = hb.patch_source(src, 20, cuda=False)
    assert len(changes) == 3
    for rel in hb.PATCHED_CMAKE:
        text = (src / rel).read_text()
        assert "set(CMAKE_CXX_STANDARD 20)" in text and "set(CMAKE_CXX_STANDARD 14)" not in text
    assert "set(Pytorch_CUDA FALSE)" in (src / "cmake/Modules/FindPytorch.cmake").read_text()


def test_gpu_build_keeps_cuda_detection(tmp_path):
    src = _extract(tmp_path)
    changes = hb.patch_source(src, 20, cuda=True)
    assert len(changes) == 3
    assert "set(Pytorch_CUDA FALSE)" not in (src / "cmake/Modules/FindPytorch.cmake").read_text()
    # CUDA 13's headers refuse C++11, which the kernels' CMakeLists asked for
    kernels = (src / hb.CUDA_KERNELS_CMAKE).read_text()
    assert "set(CMAKE_CUDA_STANDARD 17)" in kernels and "set(CMAKE_CUDA_STANDARD 11)" not in kernels


def test_only_missing_runtime_deps_are_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "yaml" else real(name, *a))
    missing = hb.missing_runtime_deps()
    assert "pyyaml" in missing and "psutil" not in missing  # psutil is one of the project's own needs


def test_unexpected_source_is_refused(tmp_path):
    src = _extract(tmp_path)
    (src / "cmake/Modules/FindPytorch.cmake").write_text("# rewritten upstream\n")
    with pytest.raises(hb.BuildError, match="not as expected"):
        hb.patch_source(src, 20, cuda=False)


def test_cache_key_names_versions_and_features():
    info = hb.plan()
    import torch

    assert f"horovod-{hb.HOROVOD_VERSION}" in info["key"]
    assert torch.__version__.replace("+", "_") in info["key"]
    assert f"py{sys.version_info.major}{sys.version_info.minor}" in info["key"]
    assert "gloo" in info["features"]


def test_second_setup_reuses_the_cached_wheel():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.tools.horovod_build"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "already installed" in proc.stdout and "building" not in proc.stdout


def test_failed_build_names_its_first_errors():
    log = "\n".join(
        ["-- configuring"] * 50
        + [
            "/src/horovod/common/group_table.h:35:47: error: 'string' in namespace 'std' does not name a type",
            "   35 |   int32_t GetGroupIDFromTensorName(const std::string& tensor_name) const;",
        ]
        + ["[ 40%] Building CXX object"] * 40
        + ["ERROR: Failed building wheel for horovod"]
    )
    shown = hb.first_errors(log)
    assert shown.splitlines()[0].endswith("does not name a type")  # the cause, not pip's closing words
    assert "GetGroupIDFromTensorName" in shown and len(shown.splitlines()) < 15


def test_new_gcc_gets_the_headers_horovod_forgets(monkeypatch):
    monkeypatch.setattr(hb, "gcc_major", lambda: 13)
    env = {"CXXFLAGS": "-O2"}
    assert hb.compiler_flags(env) and env["CXXFLAGS"] == "-O2 -include cstdint -include string -include stdexcept"
    monkeypatch.setattr(hb, "gcc_major", lambda: 12)
    env = {}
    assert hb.compiler_flags(env) == [] and env == {}


def test_horovod_without_mpi_is_honoured(monkeypatch):
    monkeypatch.setenv("HOROVOD_WITHOUT_MPI", "1")
    assert hb.plan()["mpi"] is False and "mpi" not in hb.plan()["features"]


def test_a_torch_only_build_keeps_its_key(monkeypatch):
    """Without TensorFlow (or with Horovod's own switch leaving it out) the key is what it always was, so an
    environment's cached torch-only wheel stays valid; with TensorFlow the key and the frameworks name it."""
    monkeypatch.setattr(hb, "tensorflow_install", lambda: None)
    plain = hb.plan()
    assert "_tf-" not in plain["key"] and plain["frameworks"] == ["torch"] and plain["tensorflow"] is None
    monkeypatch.setattr(hb, "tensorflow_install", lambda: ("2.21.0", "/nowhere/include"))
    both = hb.plan()
    assert both["key"] == plain["key"].replace("_py", "_tf-2.21.0_py", 1)
    assert both["frameworks"] == ["torch", "tensorflow"] and both["tensorflow"] == "2.21.0"


def test_horovod_without_tensorflow_is_honoured(monkeypatch):
    monkeypatch.setenv("HOROVOD_WITHOUT_TENSORFLOW", "1")
    assert hb.tensorflow_install() is None and hb.plan()["frameworks"] == ["torch"]


def test_xla_ops_are_left_out_where_tensorflow_lacks_their_headers(tmp_path):
    """TF >= 2.19 ships no tensorflow/compiler/xla/client/xla_builder.h (and not the highwayhash headers the moved
    XLA headers need): Horovod's XLA ops file is compiled empty. A TF that has the header keeps it whole."""
    src = _extract(tmp_path / "src")
    new_tf, old_tf = tmp_path / "tf-new", tmp_path / "tf-old"
    (old_tf / hb.XLA_OPS_HEADER).parent.mkdir(parents=True)
    (old_tf / hb.XLA_OPS_HEADER).write_text("")
    new_tf.mkdir()
    original = (src / hb.XLA_OPS_SOURCE).read_text()
    assert not any("xla_mpi_ops" in c for c in hb.patch_source(src, 20, cuda=False, tf_include=str(old_tf)))
    assert (src / hb.XLA_OPS_SOURCE).read_text() == original
    changes = hb.patch_source(src, 20, cuda=False, tf_include=str(new_tf))
    assert changes[0].startswith(hb.XLA_OPS_SOURCE) and not any("CMAKE_CXX_STANDARD" in c for c in changes)
    text = (src / hb.XLA_OPS_SOURCE).read_text()
    assert hb.XLA_OPS_GUARD not in text and text.count("#if 0") == 1
    with pytest.raises(hb.BuildError, match="not as expected"):  # twice: the guard is gone
        hb.patch_source(src, 20, cuda=False, tf_include=str(new_tf))


def fake_site(tmp_path, header=True, library=True):
    """A site-packages directory as the nvidia-nccl-cu* wheel leaves it (or without its header or library)."""
    nccl = tmp_path / "site-packages" / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "lib").mkdir()
    if header:
        (nccl / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    if library:
        (nccl / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    return nccl.parent.parent


def gpu_plan(site, device=True, torch_cuda="13.0", toolkit="/usr/local/cuda-13.0", **environ):
    return hb.gpu_build(
        device_present=device, torch_cuda=torch_cuda, toolkit=toolkit, site_dirs=[site], environ=environ, cc_list="90"
    )


def test_a_gpu_machine_builds_with_the_nccl_torch_ships(tmp_path):
    site = fake_site(tmp_path)
    plan = gpu_plan(site)
    assert plan == {
        "gpu_operations": "NCCL",
        "cuda_home": "/usr/local/cuda-13.0",
        "nccl_dir": str(site / "nvidia" / "nccl"),
        "cc_list": "90",
    }
    # laid out as Horovod's FindNCCL looks for it, over torch's own files
    home = hb.nccl_home(Path(plan["nccl_dir"]), tmp_path / "nccl-home")
    assert (home / "include" / "nccl.h").read_text() == "#define NCCL_MAJOR 2\n"
    assert (home / "lib" / "libnccl.so").resolve() == (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").resolve()
    assert hb.nccl_home(Path(plan["nccl_dir"]), home) == home  # a second set-up relinks in place


def test_a_cpu_machine_builds_for_the_cpu(tmp_path):
    assert gpu_plan(fake_site(tmp_path), device=False, toolkit=None) == {}
    assert gpu_plan(fake_site(tmp_path / "b"), BENCH_HOROVOD_CPU="1") == {}  # asked for, on a GPU machine


@pytest.mark.parametrize(
    "change, names",
    [
        (dict(torch_cuda=None), "install a CUDA build of torch"),
        (dict(toolkit=None), "nvcc"),
        (dict(header=False), "nvidia-nccl-cu13"),
        (dict(library=False), "libnccl-dev"),
        (dict(HOROVOD_NCCL_HOME="/nowhere"), "HOROVOD_NCCL_HOME=/nowhere has no include/nccl.h"),
    ],
)
def test_a_gpu_build_that_cannot_use_the_gpu_is_refused_in_one_line(tmp_path, change, names):
    tree = {k: change.pop(k) for k in ("header", "library") if k in change}
    with pytest.raises(hb.BuildError) as refused:
        gpu_plan(fake_site(tmp_path, **tree), **change)
    message = str(refused.value)
    assert names in message and "\n" not in message
    if "HOROVOD_NCCL_HOME" not in change:
        assert "BENCH_HOROVOD_CPU=1" in message  # the way out, on a GPU machine


def test_an_explicit_gpu_build_is_honoured_and_refused_by_its_variable(tmp_path):
    site = fake_site(tmp_path)
    assert gpu_plan(site, device=False, HOROVOD_GPU_OPERATIONS="NCCL")["gpu_operations"] == "NCCL"
    with pytest.raises(hb.BuildError) as refused:
        gpu_plan(site, device=False, torch_cuda=None, HOROVOD_GPU_OPERATIONS="NCCL")
    assert str(refused.value).startswith("HOROVOD_GPU_OPERATIONS=NCCL asks for a GPU build but torch has no CUDA")
    assert "BENCH_HOROVOD_CPU" not in str(refused.value)  # the way out is to unset what was asked


def test_the_build_keeps_a_record_of_its_time_and_changes_and_the_set_up_one_of_how_it_installed(tmp_path):
    """A build's record (what it was built against, its changes, its seconds, its day) and the environment's set-up
    record that holds it; a wheel built before records were kept has its record read back from its build log."""
    info = {"torch": "2.14.1+cu130", "tensorflow": None, "features": ["gloo"], "key": "k"}
    changes = ["CMakeLists.txt: CMAKE_CXX_STANDARD 14 -> 20"]
    facts = hb.build_facts(info, changes, 451.26, 1_796_000_000.0)
    assert facts["changes"] == changes and facts["build_seconds"] == 451.3 and facts["built"] == "2026-11-30"
    assert facts["horovod"] == hb.HOROVOD_VERSION and facts["torch"] == "2.14.1+cu130"
    log = tmp_path / "k.log"
    log.write_text(f"plan: {info}\npatches: {changes}\n-- configuring\n\nbuild took 451 s (exit 0)\n")
    read = hb.recorded_build(tmp_path / "k", log)  # no build.json: the log's
    assert read["changes"] == changes and read["build_seconds"] == 451.0 and read["torch"] == "2.14.1+cu130"
    log.write_text(f"plan: {info}\npatches: {changes}\n\nbuild took 12 s (exit 1)\n")
    assert hb.recorded_build(tmp_path / "k", log) is None  # a failed build is no record
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / hb.BUILD_RECORD).write_text(json.dumps(facts))
    assert hb.recorded_build(tmp_path / "k", log) == facts  # its own record first
    path = hb.record_setup("k", facts, "built from source here", 460.04, prefix=tmp_path)
    kept = setup_record(str(tmp_path))
    assert path == tmp_path / SETUP_RECORD and kept["build"] == facts and kept["install_seconds"] == 460.0
    assert kept["how"] == "built from source here" and re.fullmatch(r"\d{4}-\d\d-\d\d", kept["installed"])
    assert setup_record(str(tmp_path / "none")) is None


def test_the_environment_this_suite_runs_in_holds_its_set_up_record():
    """The set-up (run again here, as a second set-up: nothing built) leaves its record in the environment, which
    every run's fingerprint then holds."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.tools.horovod_build"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    kept = setup_record()
    assert kept is not None and kept["key"] == hb.installed_key(), kept
    probe = (
        "import json; from bench.core.environment import fingerprint; print(json.dumps(fingerprint()['horovod_setup']))"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert json.loads(shown.stdout) == kept, shown.stderr
