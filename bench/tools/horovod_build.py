"""Build Horovod 0.28.1 against the installed torch (and TensorFlow, where it is installed), once, and cache the
wheel outside the checkout.

Why: Horovod's last release is a source distribution whose CMakeLists.txt (top level and
horovod/torch/) hard-code `set(CMAKE_CXX_STANDARD 14)`, while torch's headers demand C++17 (2.1 to
2.13) or C++20 (2.14: "C++20 or later compatible compiler is required to use ATen"). The minimal fix
is to raise those two lines to what the installed torch needs. A second fix, for CPU-only builds:
with a CUDA build of torch (PyPI's default on x86_64) cmake/Modules/FindPytorch.cmake treats torch as
CUDA whenever some CUDA_HOME exists, then needs cudart and a full toolkit; on a machine with no GPU
work to do we tell it torch is CPU-only, and get a working CPU build with or without a toolkit. A
third, for CUDA builds: horovod/common/ops/cuda/CMakeLists.txt compiles its kernels as C++11, which
CUDA 13's headers no longer accept; they are compiled as C++17 (any CUDA 11 or later takes it). And
for CMake 4, which refuses projects declaring `cmake_minimum_required` below 3.5 (the bundled gloo and
flatbuffers say 2.8.12), the build sets CMAKE_POLICY_VERSION_MINIMUM=3.5 (older CMake ignores it).
GCC 13 and later no longer pull <string>, <stdexcept> and <cstdint> in through other standard headers,
and Horovod's sources lean on that (group_table.h uses std::string, common.h std::logic_error without
including them): with such a compiler those three headers are force-included (CXXFLAGS -include).

TensorFlow (the `tf` extra): one build holds both frameworks' libraries, each compiled with its own flags (Horovod's
horovod/tensorflow/CMakeLists.txt sets C++17 for TF >= 2.10 in its own scope, so torch's C++20 does not reach it).
Horovod 0.28.1's CI stopped at TF 2.12. From TF 2.19 the XLA builder header that horovod/tensorflow/xla_mpi_ops.cc
includes, tensorflow/compiler/xla/client/xla_builder.h, is gone from the wheel (moved to xla/hlo/builder/), and the
XLA headers it would then reach include highwayhash, which the wheel does not ship. That file holds Horovod's XLA
ops only (opt-in through HOROVOD_ENABLE_XLA_OPS=1 under jit_compile; the suite never uses them): with such a TF it
is compiled empty (XLA_OPS_SOURCE), and everything else of Horovod's TensorFlow library builds unchanged.
HOROVOD_WITHOUT_TENSORFLOW=1 leaves TensorFlow out though it is installed.

Recipe: fetch the sdist from PyPI (pip download), patch, `pip wheel --no-build-isolation` in the
environment that already has torch, with Gloo always, MPI when an MPI compiler (mpicxx) is present,
CUDA and NCCL where a CUDA device is present (gpu_build: torch.cuda.is_available(), or nvidia-smi lists a GPU) or
HOROVOD_GPU_OPERATIONS=NCCL asks, TensorFlow when it is installed. On a GPU machine nothing needs setting: NCCL is
the one torch ships (the nvidia-nccl-cu* wheel's include/ and lib/ under site-packages/nvidia/nccl, linked as
HOROVOD_NCCL_HOME) unless HOROVOD_NCCL_HOME names another, and the kernels are compiled for this machine's GPUs
only (HOROVOD_BUILD_CUDA_CC_LIST, unless set). A GPU build that cannot be made (torch without CUDA, no nvcc, no
NCCL headers) is refused before anything is fetched or compiled, in one line naming what to install;
BENCH_HOROVOD_CPU=1 builds for the CPU only on a GPU machine. The wheel is cached under
~/.cache/elastic-vs-horovod-bench/horovod (or $BENCH_CACHE_DIR), keyed by Horovod, torch, TensorFlow (when built
with it) and Python versions and the features built, so a second set-up reuses it.

The set-up keeps a record of what it did: beside the cached wheel, BUILD_RECORD (when it was built, against what, in
how many seconds, and each change the build needed); in the environment's folder, bench.core.environment's
SETUP_RECORD (that build, and whether this environment built it or installed it from the cache, in how many seconds),
which every run's fingerprint holds and the page's "What it takes to run" states. A cached wheel built before the
record was kept has it read back from its build log (the plan, the changes and "build took N s").

Usage: python -m bench.tools.horovod_build [--force] [--print-key]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench.core.environment import SETUP_RECORD, cache_dir

HOROVOD_VERSION = "0.28.1"
# distribution -> the module it provides: only missing ones are installed, so an offline machine that
# already has them (a GPU node's image, say) needs no package index (else PIP_NO_INDEX=1 and
# PIP_FIND_LINKS=DIR point pip at wheels carried there)
RUNTIME_DEPS = {
    "cloudpickle": "cloudpickle",
    "psutil": "psutil",
    "pyyaml": "yaml",
    "packaging": "packaging",
    "cffi": "cffi",
}
PATCHED_CMAKE = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
CUDA_KERNELS_CMAKE = "horovod/common/ops/cuda/CMakeLists.txt"
# Horovod's XLA ops, and the header whose absence (TF >= 2.19) means the TF wheel can no longer compile them
XLA_OPS_SOURCE = "horovod/tensorflow/xla_mpi_ops.cc"
XLA_OPS_HEADER = "tensorflow/compiler/xla/client/xla_builder.h"
XLA_OPS_GUARD = "#if TENSORFLOW_VERSION >= 2006000000\n"


BUILD_RECORD = "build.json"  # beside a cached wheel: its build's record (build_facts)


class BuildError(Exception):
    pass


# What each missing piece of a GPU build is installed with, for the refusal's one line
INSTALL_CUDA_TORCH = "a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu130)"
INSTALL_NVCC = (
    "the CUDA toolkit's nvcc (apt install cuda-toolkit, or pip install nvidia-cuda-nvcc) on PATH or CUDA_HOME"
)
INSTALL_NCCL = (
    "NCCL's headers (pip install nvidia-nccl-cu13, the wheel torch ships NCCL in, or apt install libnccl-dev)"
)
CPU_ONLY = "BENCH_HOROVOD_CPU"  # =1: a CPU-only Horovod on a machine with a GPU


def torch_nccl_dir(site_dirs) -> Path | None:
    """The NCCL of torch's own wheel (nvidia-nccl-cu*): the first site directory whose nvidia/nccl holds both the
    header and the library."""
    for site in site_dirs:
        root = Path(site, "nvidia", "nccl")
        if (root / "include" / "nccl.h").is_file() and any((root / "lib").glob("libnccl.so*")):
            return root
    return None


def gpu_build(
    *, device_present: bool, torch_cuda: str | None, toolkit: str | None, site_dirs, environ, cc_list: str = ""
) -> dict:
    """How Horovod is built for this machine's GPUs: {} for a CPU build (no CUDA device here and no
    HOROVOD_GPU_OPERATIONS asked, or BENCH_HOROVOD_CPU=1), else the build's GPU settings: gpu_operations ("NCCL"),
    cuda_home, nccl_dir (torch's NCCL, to be linked as HOROVOD_NCCL_HOME; None where HOROVOD_NCCL_HOME or the system
    has NCCL) and cc_list (the kernels' compute capabilities, "" for Horovod's default). A BuildError, before any
    build, when the GPU cannot be used: its one line names what to install."""
    asked = environ.get("HOROVOD_GPU_OPERATIONS", "")
    if environ.get(CPU_ONLY) == "1" and not asked:
        return {}
    if not (device_present or asked):
        return {}
    why = f"HOROVOD_GPU_OPERATIONS={asked} asks for a GPU build" if asked else "this machine has a CUDA device"
    also = "" if asked else f"; or {CPU_ONLY}=1 for a CPU-only Horovod"
    if not torch_cuda:
        raise BuildError(f"{why} but torch has no CUDA: install {INSTALL_CUDA_TORCH}{also}")
    if not toolkit:
        raise BuildError(f"{why} and Horovod's GPU build needs {INSTALL_NVCC} (CUDA {torch_cuda}, as torch){also}")
    nccl_dir = None
    if environ.get("HOROVOD_NCCL_HOME"):
        if not Path(environ["HOROVOD_NCCL_HOME"], "include", "nccl.h").is_file():
            raise BuildError(
                f"HOROVOD_NCCL_HOME={environ['HOROVOD_NCCL_HOME']} has no include/nccl.h: unset it to use torch's "
                f"NCCL, or install {INSTALL_NCCL}"
            )
    elif not any(Path(d, "nccl.h").is_file() for d in ("/usr/include", f"{toolkit}/include")):
        nccl_dir = torch_nccl_dir(site_dirs)
        if nccl_dir is None:
            raise BuildError(f"{why} and Horovod's GPU build needs {INSTALL_NCCL}{also}")
    return {
        "gpu_operations": asked or "NCCL",
        "cuda_home": toolkit,
        "nccl_dir": str(nccl_dir) if nccl_dir else None,
        "cc_list": environ.get("HOROVOD_BUILD_CUDA_CC_LIST") or cc_list,
    }


def nccl_home(nccl_dir: Path, home: Path) -> Path:
    """A directory laid out as Horovod's FindNCCL looks for it (include/, lib/libnccl.so) over torch's NCCL, whose
    wheel ships only libnccl.so.N: Horovod then links the library torch loads."""
    (home / "lib").mkdir(parents=True, exist_ok=True)
    include = home / "include"
    if include.is_symlink() or include.exists():
        include.unlink()
    include.symlink_to(nccl_dir / "include")
    libraries = sorted((nccl_dir / "lib").glob("libnccl.so*"))
    for lib in [*libraries, home / "lib" / "libnccl.so"]:
        link = home / "lib" / lib.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(lib if lib in libraries else libraries[0])
    return home


def device_present() -> bool:
    """Whether this machine has a CUDA device: torch sees one, or nvidia-smi lists one (torch without CUDA on a GPU
    machine, which gpu_build refuses)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def local_cc_list() -> str:
    """The compute capabilities of this machine's GPUs as Horovod's HOROVOD_BUILD_CUDA_CC_LIST takes them ("90"),
    "" where torch sees none: kernels for these only, rather than every one nvcc knows (minutes less)."""
    import torch

    if not torch.cuda.is_available():
        return ""
    capabilities = (torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
    found = {f"{major}{minor}" for major, minor in capabilities}
    return ",".join(sorted(found))


def cache_root() -> Path:
    return cache_dir() / "horovod"


def cxx_standard_for(torch_version: str) -> int:
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", torch_version).groups())
    if (major, minor) >= (2, 14):
        return 20
    if (major, minor) >= (2, 1):
        return 17
    return 14


def find_cuda_toolkit() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").exists():
            return home
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


def tensorflow_install() -> tuple[str, str] | None:
    """(version, include directory) of the installed TensorFlow, or None when there is none or
    HOROVOD_WITHOUT_TENSORFLOW=1 leaves it out. Read without importing it (seconds, and its threads)."""
    import importlib.metadata
    import importlib.util

    if os.environ.get("HOROVOD_WITHOUT_TENSORFLOW") == "1":
        return None
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return None
    dists = importlib.metadata.packages_distributions().get("tensorflow", [])
    versions = [
        importlib.metadata.version(d) for d in dists if d.startswith(("tensorflow", "tf-nightly", "tf_nightly"))
    ]
    if not versions:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    return versions[0], str(root / "include")


def plan() -> dict:
    """What this machine's build will contain, and the cache key that names it."""
    import torch

    gpu = gpu_build(
        device_present=device_present(),
        torch_cuda=torch.version.cuda,
        toolkit=find_cuda_toolkit(),
        site_dirs=[p for p in sys.path if p],
        environ=os.environ,
        cc_list=local_cc_list(),
    )
    gpu_ops = gpu.get("gpu_operations", "")
    cuda = bool(gpu)
    # Horovod's own switch is honoured: a node's MPI may not be the one its jobs use
    mpi = shutil.which("mpicxx") is not None and not os.environ.get("HOROVOD_WITHOUT_MPI")
    features = ["gloo"] + (["mpi"] if mpi else []) + (["cuda"] if cuda else []) + ([gpu_ops.lower()] if gpu_ops else [])
    tf = tensorflow_install()
    frameworks = ["torch"] + (["tensorflow"] if tf else [])
    torch_version = torch.__version__.replace("+", "_")
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    # a torch-only build keeps the key it always had, so that its cached wheel stays valid
    tf_part = f"_tf-{tf[0].replace('+', '_')}" if tf else ""
    key = f"horovod-{HOROVOD_VERSION}_torch-{torch_version}{tf_part}_{py}_{platform.machine()}_{'-'.join(features)}"
    return {
        "key": key,
        "torch": torch.__version__,
        "cxx_standard": cxx_standard_for(torch.__version__),
        "mpi": mpi,
        "cuda": cuda,
        "cuda_home": gpu.get("cuda_home"),
        "gpu_operations": gpu_ops,
        "nccl_dir": gpu.get("nccl_dir"),
        "cc_list": gpu.get("cc_list", ""),
        "features": features,
        "frameworks": frameworks,
        "tensorflow": tf[0] if tf else None,
        "tf_include": tf[1] if tf else None,
    }


def patch_source(src: Path, cxx_standard: int, cuda: bool, tf_include: str | None = None) -> list[str]:
    """The minimal build fix; returns what was changed, for the log. `tf_include`: the include directory of the
    TensorFlow built against: without the XLA headers Horovod's XLA ops need, that file is compiled empty."""
    changes = []
    if tf_include and not Path(tf_include, XLA_OPS_HEADER).exists():
        path = src / XLA_OPS_SOURCE
        text = path.read_text()
        if text.count(XLA_OPS_GUARD) != 1:
            raise BuildError(
                f"{path} is not as expected (no single {XLA_OPS_GUARD.strip()!r}); cannot leave its XLA ops out"
            )
        path.write_text(text.replace(XLA_OPS_GUARD, "#if 0  // XLA ops left out: no headers for them in this TF\n"))
        changes.append(f"{XLA_OPS_SOURCE}: compiled empty (no {XLA_OPS_HEADER} in this TensorFlow)")
    for rel in PATCHED_CMAKE:
        path = src / rel
        text = path.read_text()
        new = text.replace("set(CMAKE_CXX_STANDARD 14)", f"set(CMAKE_CXX_STANDARD {cxx_standard})")
        if new != text:
            changes.append(f"{rel}: CMAKE_CXX_STANDARD 14 -> {cxx_standard}")
        path.write_text(new)
    if cuda:
        path = src / CUDA_KERNELS_CMAKE
        text = path.read_text()
        if "set(CMAKE_CUDA_STANDARD 11)" in text:
            path.write_text(text.replace("set(CMAKE_CUDA_STANDARD 11)", "set(CMAKE_CUDA_STANDARD 17)"))
            changes.append(f"{CUDA_KERNELS_CMAKE}: CMAKE_CUDA_STANDARD 11 -> 17")
    if not cuda:
        # FindPytorch calls torch "CUDA" whenever torch has a CUDA build and any CUDA_HOME exists, then
        # links cudart and calls add_cuda(). For a CPU build, build the extension as a CppExtension.
        path = src / "cmake/Modules/FindPytorch.cmake"
        text = path.read_text()
        needle = 'string(TOUPPER "${Pytorch_CUDA}" Pytorch_CUDA)\n'
        if needle not in text:
            raise BuildError(f"{path} is not as expected (no Pytorch_CUDA test); cannot make a CPU build")
        path.write_text(text.replace(needle, needle + "set(Pytorch_CUDA FALSE)  # CPU-only build\n", 1))
        changes.append("cmake/Modules/FindPytorch.cmake: Pytorch_CUDA FALSE for a CPU-only build")
    return changes


# what GCC 13 stopped including transitively and Horovod 0.28.1 still relies on
GCC13_INCLUDES = ("cstdint", "string", "stdexcept")


def cxx_compiler() -> str:
    """The C++ compiler the build uses: $CXX, as CMake reads it, else c++."""
    return os.environ.get("CXX") or "c++"


def gcc_major() -> int | None:
    try:
        out = subprocess.run([cxx_compiler(), "-dumpversion"], capture_output=True, text=True, timeout=30).stdout
        is_gcc = (
            "Free Software Foundation"
            in subprocess.run([cxx_compiler(), "--version"], capture_output=True, text=True, timeout=30).stdout
        )
        return int(out.strip().split(".")[0]) if is_gcc else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def compiler_flags(env: dict) -> list[str]:
    """Extra flags this compiler needs for Horovod's sources (added to env's CXXFLAGS); returns what changed."""
    major = gcc_major()
    if major is None or major < 13:
        return []
    forced = " ".join(f"-include {header}" for header in GCC13_INCLUDES)
    env["CXXFLAGS"] = f"{env.get('CXXFLAGS', '')} {forced}".strip()
    return [f"CXXFLAGS {forced} (GCC {major})"]


def fetch_sdist(workdir: Path) -> Path:
    sdist_cache = cache_root() / "sdist"
    sdist_cache.mkdir(parents=True, exist_ok=True)
    found = list(sdist_cache.glob(f"horovod-{HOROVOD_VERSION}.tar.gz"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"horovod=={HOROVOD_VERSION}",
                "-d",
                str(sdist_cache),
            ],
            check=True,
        )
        found = list(sdist_cache.glob(f"horovod-{HOROVOD_VERSION}.tar.gz"))
    if not found:
        raise BuildError(f"pip download did not produce horovod-{HOROVOD_VERSION}.tar.gz")
    with tarfile.open(found[0]) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / f"horovod-{HOROVOD_VERSION}"


def build_wheel(info: dict, out_dir: Path, log_path: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="horovod-build-") as tmp:
        src = fetch_sdist(Path(tmp))
        changes = patch_source(src, info["cxx_standard"], info["cuda"], info.get("tf_include"))
        env = dict(
            os.environ,
            HOROVOD_WITH_PYTORCH="1",
            HOROVOD_WITH_GLOO="1",
            HOROVOD_WITHOUT_MXNET="1",
            CMAKE_POLICY_VERSION_MINIMUM="3.5",
            MAKEFLAGS=f"-j{max(1, os.cpu_count() or 1)}",
        )
        for switch in ("HOROVOD_WITH_TENSORFLOW", "HOROVOD_WITHOUT_TENSORFLOW"):
            env.pop(switch, None)
        # with TensorFlow installed it is required (a failure says so), else left out
        env["HOROVOD_WITH_TENSORFLOW" if info.get("tensorflow") else "HOROVOD_WITHOUT_TENSORFLOW"] = "1"
        env["HOROVOD_WITH_MPI" if info["mpi"] else "HOROVOD_WITHOUT_MPI"] = "1"
        if info["cuda_home"]:
            env["CUDA_HOME"] = info["cuda_home"]
        if info.get("gpu_operations"):
            env["HOROVOD_GPU_OPERATIONS"] = info["gpu_operations"]
        if info.get("nccl_dir"):  # torch's own NCCL: Horovod links the library torch loads
            env["HOROVOD_NCCL_HOME"] = str(nccl_home(Path(info["nccl_dir"]), out_dir.parent / "nccl-home"))
            env["HOROVOD_NCCL_LINK"] = "SHARED"
        if info.get("cc_list"):
            env["HOROVOD_BUILD_CUDA_CC_LIST"] = info["cc_list"]
        changes += compiler_flags(env)
        out_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(log_path, "w") as log:
            log.write(f"plan: {info}\npatches: {changes}\n")
            log.flush()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--no-build-isolation",
                    "--no-deps",
                    "-v",
                    "-w",
                    str(out_dir),
                    str(src),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            while proc.poll() is None:  # a heartbeat: the build takes minutes
                time.sleep(30)
                if proc.poll() is None:
                    print(f"  ... still building ({time.monotonic() - started:.0f} s)", flush=True)
            took = time.monotonic() - started
            log.write(f"\nbuild took {took:.0f} s (exit {proc.returncode})\n")
        if proc.returncode == 0:
            print(f"  built in {took:.0f} s", flush=True)
            facts = build_facts(info, changes, took, time.time())
            (out_dir / BUILD_RECORD).write_text(json.dumps(facts, indent=1) + "\n")
        if proc.returncode != 0:
            raise BuildError(
                f"building Horovod failed (exit {proc.returncode}); full log {log_path}; its first "
                f"errors:\n{first_errors(log_path.read_text(errors='replace'))}"
            )
    wheels = list(out_dir.glob("horovod-*.whl"))
    if not wheels:
        raise BuildError(f"the build left no wheel in {out_dir}; see {log_path}")
    return wheels[0]


def build_facts(info: dict, changes: list[str], seconds: float, at: float) -> dict:
    """What a build did, as its record keeps it: Horovod's version and where its source came from, what it was built
    against and with, each change the build needed (patch_source, compiler_flags), its seconds and when it ended."""
    return {
        "horovod": HOROVOD_VERSION,
        "source": f"horovod=={HOROVOD_VERSION}, the source distribution on PyPI",
        "torch": info.get("torch"),
        "tensorflow": info.get("tensorflow"),
        "features": info.get("features", []),
        "changes": list(changes),
        "build_seconds": round(seconds, 1),
        "built": time.strftime("%Y-%m-%d", time.gmtime(at)),
    }


def logged_build(log_path: Path) -> dict | None:
    """build_facts read back from a build's log (build_wheel writes its plan, its changes and "build took N s (exit
    0)"), for a wheel built before its record was kept; None where the log is missing or says no successful build."""
    try:
        text = log_path.read_text(errors="replace")
        at = log_path.stat().st_mtime
    except OSError:
        return None
    took = re.search(r"^build took (\d+) s \(exit 0\)$", text, re.M)
    head = dict(re.findall(r"^(plan|patches): (.*)$", text[:20000], re.M))
    try:
        info = ast.literal_eval(head["plan"])
        changes = ast.literal_eval(head["patches"])
    except (KeyError, ValueError, SyntaxError):
        return None
    if not took or not isinstance(info, dict) or not isinstance(changes, list):
        return None
    return build_facts(info, changes, float(took.group(1)), at)


def recorded_build(out_dir: Path, log_path: Path) -> dict | None:
    """The record of the build that made the wheel in `out_dir`: its BUILD_RECORD, else what its log says."""
    try:
        kept = json.loads((out_dir / BUILD_RECORD).read_text())
        if isinstance(kept, dict):
            return kept
    except (OSError, ValueError):
        pass
    return logged_build(log_path)


def record_setup(
    key: str, build: dict | None, how: str, seconds: float | None, prefix: Path | None = None
) -> Path | None:
    """Write this environment's SETUP_RECORD: the build behind its Horovod (`build`, None where none is known), how
    this environment got it (`how`) and in how many seconds (None where this set-up did not install it). None, with
    a note, where the environment's folder cannot be written: the record is for the page, the install stands."""
    path = Path(prefix or sys.prefix) / SETUP_RECORD
    record = {
        "key": key,
        "how": how,
        "install_seconds": None if seconds is None else round(seconds, 1),
        "installed": time.strftime("%Y-%m-%d", time.gmtime()),
        "build": build,
    }
    try:
        path.write_text(json.dumps(record, indent=1) + "\n")
    except OSError as exc:
        print(f"  (no set-up record kept: {path}: {exc.strerror or exc})", flush=True)
        return None
    return path


def missing_runtime_deps() -> list[str]:
    import importlib.util

    return [dist for dist, module in RUNTIME_DEPS.items() if importlib.util.find_spec(module) is None]


ERROR_LINE = re.compile(r"CMake Error|error:|Error \d|fatal error|undefined reference|No such file", re.I)


def first_errors(log: str, context: int = 3, limit: int = 12) -> str:
    """The first error lines of a build log with a little context: pip's own tail only says it failed."""
    lines = log.splitlines()
    hits = [i for i, line in enumerate(lines) if ERROR_LINE.search(line)]
    if not hits:
        return "\n".join(lines[-25:])
    keep = sorted({j for i in hits[:limit] for j in range(i, min(len(lines), i + context + 1))})
    return "\n".join(lines[j] for j in keep)[:6000]


def installed_key_file() -> Path:
    """Marks which cached build this environment has installed, so a second set-up does nothing."""
    return Path(sys.prefix) / "horovod-build-key.txt"


def installed_key() -> str | None:
    try:
        import importlib.metadata

        if importlib.metadata.version("horovod") != HOROVOD_VERSION:
            return None
        return installed_key_file().read_text().strip()
    except Exception:  # not installed, or no marker: treat as not installed by us
        return None


def ensure(force: bool = False) -> Path | None:
    started = time.monotonic()
    info = plan()
    out_dir = cache_root() / info["key"]
    log_path = out_dir.parent / f"{info['key']}.log"
    wheels = list(out_dir.glob("horovod-*.whl"))
    if not force and wheels and installed_key() == info["key"]:
        print(f"Horovod {HOROVOD_VERSION} ({info['key']}) is already installed from {wheels[0]}", flush=True)
        kept = (Path(sys.prefix) / SETUP_RECORD).exists()
        if not kept:  # installed by a set-up that kept no record: what is known of it now, its install time not
            record_setup(info["key"], recorded_build(out_dir, log_path), "installed by an earlier set-up", None)
        return wheels[0]
    # Horovod's setup.py also asks for them (setup_requires) and would fetch them itself, index or not
    missing = missing_runtime_deps()
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
    if force or not wheels:
        against = f"torch {info['torch']}" + (f" and TensorFlow {info['tensorflow']}" if info["tensorflow"] else "")
        print(
            f"building Horovod {HOROVOD_VERSION} against {against} "
            f"(C++{info['cxx_standard']}, {'+'.join(info['features'])}); this takes several minutes "
            f"once, then the wheel is reused from {out_dir}",
            flush=True,
        )
        for old in wheels:
            old.unlink()
        (out_dir / BUILD_RECORD).unlink(missing_ok=True)
        wheel = build_wheel(info, out_dir, log_path)
        how = "built from source here"
    else:
        wheel = wheels[0]
        print(f"using cached Horovod wheel {wheel}", flush=True)
        how = "installed from the wheel an earlier set-up built on this machine"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)], check=True
    )
    installed_key_file().write_text(info["key"] + "\n")
    record_setup(info["key"], recorded_build(out_dir, log_path), how, time.monotonic() - started)
    return wheel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.horovod_build", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if a cached wheel exists")
    parser.add_argument("--print-key", action="store_true", help="print the cache key and exit")
    args = parser.parse_args(argv)
    try:
        if args.print_key:
            print(plan()["key"])
            return 0
        ensure(force=args.force)
    except BuildError as exc:
        print(f"horovod build: error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"horovod build: error: {' '.join(map(str, exc.cmd))} exited {exc.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
