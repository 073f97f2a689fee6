"""The reproducible Horovod build: the patch, the cache key, and reuse of the cached wheel."""

import subprocess
import sys
import tarfile

import pytest

from bench import horovod_build as hb
from conftest import ROOT


@pytest.mark.parametrize("torch_version, standard", [("2.14.1+cu130", 20), ("2.13.0", 17), ("2.1.2", 17),
                                                     ("1.13.1", 14)])
def test_cxx_standard_follows_torch(torch_version, standard):
    assert hb.cxx_standard_for(torch_version) == standard


def _extract(tmp_path):
    sdist = hb.cache_root() / "sdist" / f"horovod-{hb.HOROVOD_VERSION}.tar.gz"
    assert sdist.exists(), "run `python -m bench.horovod_build` first (the nox sessions do)"
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
    assert len(changes) == 2
    assert "set(Pytorch_CUDA FALSE)" not in (src / "cmake/Modules/FindPytorch.cmake").read_text()


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
    proc = subprocess.run([sys.executable, "-m", "bench.horovod_build"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "already installed" in proc.stdout and "building" not in proc.stdout
