"""The environment fingerprint's torch facts: read once per installation on a machine without a GPU driver, and
then from the cache folder without importing torch (the parent of every run would pay about 2 s for it)."""

import json
import os
import subprocess
import sys

import pytest

from bench.core.environment import GPU_DRIVER_PATHS, TORCH_FACTS_FILE

# a child process, so that whether torch was imported is its own: prints the facts and whether torch got loaded
PROBE = (
    "import json, sys; from bench.core.environment import torch_facts; "
    "facts = torch_facts(); print(json.dumps({'facts': facts, 'imported': 'torch' in sys.modules}))"
)
NO_GPU_DRIVER = not any(os.path.exists(p) for p in GPU_DRIVER_PATHS)
pytestmark = pytest.mark.slow  # each probe that reads the facts afresh imports torch: seconds
without_gpu_driver = pytest.mark.skipif(not NO_GPU_DRIVER, reason="a GPU driver is here: torch's facts are not kept")


def probe(cache, **variables):
    env = {**os.environ, "BENCH_CACHE_DIR": str(cache), **variables}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(NO_GPU_DRIVER, reason="no GPU driver here: torch's facts are kept")
def test_a_gpu_machine_reads_torch_facts_afresh_every_time(tmp_path):
    assert probe(tmp_path)["imported"] and probe(tmp_path)["imported"]
    assert not (tmp_path / TORCH_FACTS_FILE).exists()


@without_gpu_driver
def test_torch_facts_are_kept_by_what_they_depend_on_and_read_without_importing_torch(tmp_path):
    first = probe(tmp_path)
    assert first["imported"] and first["facts"]["torch"]
    kept = json.loads((tmp_path / TORCH_FACTS_FILE).read_text())
    assert list(kept.values()) == [first["facts"]]
    assert probe(tmp_path) == {"facts": first["facts"], "imported": False}
    # the thread default follows OMP_NUM_THREADS: read afresh under it, and kept beside the first
    other = probe(tmp_path, OMP_NUM_THREADS="1")
    assert other["imported"] and other["facts"]["torch_threads_default"] == 1
    assert len(json.loads((tmp_path / TORCH_FACTS_FILE).read_text())) == 2


@without_gpu_driver
def test_an_unreadable_cache_is_read_afresh_and_written_again(tmp_path):
    (tmp_path / TORCH_FACTS_FILE).write_text('{"truncated')
    again = probe(tmp_path)
    assert again["imported"]
    assert list(json.loads((tmp_path / TORCH_FACTS_FILE).read_text()).values()) == [again["facts"]]


@without_gpu_driver
def test_the_distributed_check_before_a_launch_reads_the_kept_facts(tmp_path):
    check = (
        "import json, sys; from bench.backends.shared.ddp import distributed_problem; "
        "print(json.dumps({'problems': [distributed_problem('cpu'), distributed_problem('cuda')], "
        "'imported': 'torch' in sys.modules}))"
    )
    env = {**os.environ, "BENCH_CACHE_DIR": str(tmp_path)}

    def checked():
        proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = checked()
    assert first["imported"] and first["problems"][0] is None  # gloo is in every torch build the suite installs
    facts = next(iter(json.loads((tmp_path / TORCH_FACTS_FILE).read_text()).values()))
    no_nccl = "this torch build has no NCCL; install a CUDA build of torch"
    assert first["problems"][1] == (None if facts["nccl"] else no_nccl)
    assert checked() == {**first, "imported": False}
