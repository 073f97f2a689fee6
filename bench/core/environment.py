"""The environment fingerprint stored with every run (docs/method.md, "Records")."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.core.cgroups import cpu_quota
from bench.core.gpu_node import node_facts

# the folder that holds the `bench` and `workloads` packages, two above this file (bench/core/): the checkout. It
# goes first on the PYTHONPATH of a run's processes, and a process started on another host starts there.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
VARIABLE_PREFIXES = (
    "HOROVOD_",
    "TORCH",
    "NCCL_",
    "OMP_",
    "MKL_",
    "GLOO_",
    "CUDA_VISIBLE_DEVICES",
    "MASTER_",
    "OPENBLAS_",
    "KMP_",
    "PYTORCH_",
    # TensorFlow's own: the Keras its import loads (TF_USE_LEGACY_KERAS), oneDNN's kernels on or off
    # (TF_ENABLE_ONEDNN_OPTS, which changes its numerics), its thread pools
    "TF_",
)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction sets that decide how fast the same code runs on a CPU (torch picks its kernels by them).
SPEED_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx_vnni",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def cpu_flags() -> list[str]:
    """The speed-deciding instruction sets this CPU reports (Linux /proc/cpuinfo), in SPEED_FLAGS order."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [f for f in SPEED_FLAGS if f in present]
    except OSError:
        pass
    return []


def calibrate(repeats: int = 10) -> dict[str, float]:
    """How fast this host runs a short fixed piece of work, on one thread, best of `repeats`: a 256x256
    float32 matrix product (GFLOP/s) and a ResNet-like 3x3 convolution step, forward and backward (ms).
    What decides whether absolute throughput measured here can be compared with a baseline's
    (docs/method.md, "Regression gate"): labels such as the CPU model do not."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        conv = torch.nn.Conv2d(64, 64, 3, padding=1)
        x = torch.randn(8, 64, 32, 32)
        gemm, step = float("inf"), float("inf")
        for _ in range(2):  # untimed: first-call costs (allocation, kernel selection)
            torch.mm(a, b)
            conv(x).sum().backward()
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(20):
                torch.mm(a, b)
            gemm = min(gemm, (time.perf_counter() - t0) / 20)
            t0 = time.perf_counter()
            conv(x).sum().backward()
            step = min(step, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return {"gemm_gflops": 2 * 256**3 / gemm / 1e9, "conv_step_ms": step * 1e3}


# In the environment's folder (sys.prefix), written by its set-up (bench.tools.horovod_build): how its Horovod was
# installed, how long its build took and what the build changed. Each run's fingerprint holds it ("horovod_setup"),
# from which the page's "What it takes to run" says so.
SETUP_RECORD = "horovod-setup.json"


def setup_record(prefix: str | None = None) -> dict[str, Any] | None:
    """The set-up's record of this environment's Horovod (SETUP_RECORD), None where it kept none."""
    try:
        loaded = json.loads((Path(prefix or sys.prefix) / SETUP_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty if commit else None}


def cache_dir() -> Path:
    """Where the suite keeps what it can rebuild (torch's facts, the Horovod wheels): $BENCH_CACHE_DIR, else the
    user's cache folder."""
    base = os.environ.get("BENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "elastic-vs-horovod-bench"
    )
    return Path(base)


TORCH_FACTS_FILE = "torch-facts.json"
# what a CPU build's facts depend on besides the installation: the thread default follows these and the cores this
# process may use, the kernel family the CPU and ATEN_CPU_CAPABILITY
TORCH_FACTS_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY")
TORCH_FACTS_VERSION = 2  # part of the key: facts kept by an older bench lack ones read now (v2: `distributed`)


def torch_installation_key() -> str | None:
    """The installation and conditions a CPU build's facts hold for, without importing torch; None where torch is
    not installed (importing it then says so). What is built against this torch (Horovod) is keyed by it too."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    version_file = Path(spec.origin).parent / "version.py"
    try:
        stat = version_file.stat()
    except OSError:
        return None
    parts = [
        f"facts v{TORCH_FACTS_VERSION}",
        sys.executable,
        str(version_file),
        str(stat.st_mtime_ns),
        str(stat.st_size),
        socket.gethostname(),
        cpu_model(),
        ",".join(cpu_flags()),
        str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
        *(f"{name}={os.environ.get(name, '')}" for name in TORCH_FACTS_VARIABLES),
    ]
    return "|".join(parts)


# a GPU driver's traces (NVIDIA's, and ROCm's, which torch also reaches through torch.cuda)
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")


def gpu_driver_here() -> bool:
    return any(os.path.exists(p) for p in GPU_DRIVER_PATHS)


def kept_facts(
    file_name: str,
    key: str | None,
    read: Callable[[], dict[str, Any]],
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """`read()`'s answer, kept in the cache folder's `file_name` under `key` (what the answer depends on: an
    installation's files and the conditions it is read under) and read from there while the key holds. Read afresh
    every time where the key is None or a GPU driver is present (what torch sees follows the driver's state and
    CUDA_VISIBLE_DEVICES), and kept only where keep(answer), if given (so that a failure is looked at again)."""
    if key is None or gpu_driver_here():
        return read()
    path = cache_dir() / file_name
    kept: dict[str, Any] = {}
    try:
        loaded = json.loads(path.read_text())
        kept = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass  # none yet, or unreadable: read afresh and written again
    if isinstance(kept.get(key), dict):
        return dict(kept[key])
    answer = read()
    if keep is not None and not keep(answer):
        return answer
    kept[key] = answer
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(kept, indent=1, sort_keys=True))
        os.replace(temporary, path)  # whole or not at all: another process may read it now
    except OSError:  # a cache that cannot be written costs time, never a run; nor does it leave a part behind
        temporary.unlink(missing_ok=True)
    return answer


def torch_facts() -> dict[str, Any]:
    """torch's facts. Importing torch costs the parent about 2 s before every launch, so on a machine without a GPU
    driver they are kept in the cache folder (TORCH_FACTS_FILE), keyed by the installation and what they depend on,
    and read from there; where a driver is present they are read afresh every time (kept_facts)."""
    return kept_facts(TORCH_FACTS_FILE, torch_installation_key(), _imported_torch_facts)


def _imported_torch_facts() -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    facts = {
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "distributed": dist.is_available(),
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available(),
        "mpi": dist.is_available() and dist.is_mpi_available(),
        "nccl_version": None,
        "cuda_devices": [],
        "torch_threads_default": torch.get_num_threads(),
        # the kernel family torch dispatches to on this CPU (DEFAULT, AVX2, AVX512, ...)
        "cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: None)(),
    }
    if torch.cuda.is_available():
        facts["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        try:
            facts["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # NCCL missing from this build: recorded as None
            pass
    return facts


@functools.cache
def _static_fingerprint() -> dict[str, Any]:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_quota": cpu_quota(),  # CPUs' time its cgroup allows (None: no limit): fewer than the CPUs throttles
        "cpu_flags": cpu_flags(),
        "memory_bytes": memory,
        **torch_facts(),
        "packages": {
            name: package_version(name)
            for name in ("torchvision", "numpy", "horovod", "mpi4py", "tensorflow", "tf-keras")
        },
        "git": git_state(),
        "bench": package_version("elastic-vs-horovod-bench"),
        "horovod_setup": setup_record(),
    }


def fingerprint(
    worker_env: dict[str, str] | None = None, gpu_nodes: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Machine and software facts, plus the variables the workers saw that tune distributed runs, and what each
    host's GPU node is made of (`gpu_nodes`, one per host: bench.core.gpu_node; this host's unless given, as a run
    across hosts gathers them: bench.cluster.hosts.gpu_nodes)."""
    env = worker_env if worker_env is not None else dict(os.environ)
    variables = {k: v for k, v in sorted(env.items()) if k.startswith(VARIABLE_PREFIXES)}
    return {
        **_static_fingerprint(),
        "variables": variables,
        "python_executable": sys.executable,
        "gpu_nodes": gpu_nodes if gpu_nodes is not None else [node_facts(env)],
    }
