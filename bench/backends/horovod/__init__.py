"""horovod: horovodrun (Gloo controller by default, MPI on request) + hvd.DistributedOptimizer.

Launchers (--hvd-launcher): `gloo` = horovodrun --gloo; `mpi` = horovodrun --mpi; `mpirun` = plain
OpenMPI mpirun in the classic form (-bind-to none -map-by slot -x VAR ...). Both MPI launchers need
a Horovod built with MPI (`horovodrun --check-build`). Fusion threshold and cycle time go through
HOROVOD_FUSION_THRESHOLD / HOROVOD_CYCLE_TIME, which every launcher passes on.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.backends.base import Backend, BackendOption, CommSchedule
from bench.backends.horovod.launcher import SETUP_HINT, HorovodElastic, HorovodLauncher, horovodrun_path
from bench.core.dryrun import planning
from bench.core.environment import kept_facts, package_version, torch_installation_key
from bench.core.inputs import shown

LAUNCHERS = ("gloo", "mpi", "mpirun")
MAX_CYCLE_MS = 60_000.0  # --hvd-cycle-ms at most: a minute (every collective may wait a cycle)


# The probe reads the build flags Horovod's own `horovodrun --check-build` prints, in one child that imports
# horovod.torch only; --check-build itself imports every framework in a child each, several times slower, which
# every horovod command would otherwise pay (30 s on 2 cores, against 2 s), `bench doctor` included. CUDA: whether its
# PyTorch library was compiled with CUDA (a GPU tensor reaches its collectives), which NCCL alone does not say.
_PROBE = (
    "import json, horovod, horovod.torch as hvd; print(json.dumps({'version': horovod.__version__, "
    "'MPI': bool(hvd.mpi_built()), 'Gloo': bool(hvd.gloo_built()), 'NCCL': bool(hvd.nccl_built()), "
    "'DDL': bool(hvd.ddl_built()), 'CCL': bool(hvd.ccl_built()), 'CUDA': bool(hvd.cuda_built())}))"
)
# part of the kept answer's key: an answer kept by another probe (one without the CUDA flag) is probed again
_PROBE_KEY = hashlib.sha256(_PROBE.encode()).hexdigest()[:12]


HOROVOD_BUILD_FILE = "horovod-build.json"


def build_key() -> str | None:
    """What the probe's answer depends on, without importing anything: the installed Horovod's files (its package,
    its PyTorch library), the torch it was built against (bench.core.environment.torch_installation_key) and where
    libraries are looked up; None where either is not installed (the probe then says what is wrong)."""
    spec = importlib.util.find_spec("horovod")
    torch_key = torch_installation_key()
    if spec is None or spec.origin is None or torch_key is None:
        return None
    root = Path(spec.origin).parent
    files = [Path(spec.origin), *sorted((root / "torch").glob("mpi_lib_v2*.so"))]
    try:
        stamps = [f"{f}:{f.stat().st_mtime_ns}:{f.stat().st_size}" for f in files]
    except OSError:
        return None
    return "|".join(
        [f"probe={_PROBE_KEY}", torch_key, *stamps, f"LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')}"]
    )


def _probe_build() -> dict:
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return {
            "problem": f"Horovod is installed but does not import ({last}); build it for this torch: "
            f"python -m bench.tools.horovod_build --force",
            "flags": {},
        }
    return {"problem": None, "flags": json.loads(probe.stdout.strip().splitlines()[-1])}


@functools.cache
def check_build() -> tuple[str | None, dict]:
    """(problem or None, the build's flags: version and which of MPI, Gloo, NCCL, DDL, CCL and CUDA it has).
    Imported in a child: a broken build (say, one made against another torch) fails there, not here. The probe
    costs every horovod command about 5 s on 2 cores, so a working build's answer is kept in the cache folder,
    keyed by build_key() (bench.core.environment.kept_facts); a failing one is probed again each time."""
    if horovodrun_path() is None:
        return f"Horovod is not installed; {SETUP_HINT}", {}
    answer = kept_facts(HOROVOD_BUILD_FILE, build_key(), _probe_build, keep=lambda answer: answer["problem"] is None)
    return answer["problem"], answer["flags"]


# each framework's library in an installed Horovod, as its build leaves it (horovod/<dir>/mpi_lib*.so)
FRAMEWORK_LIBRARIES = {"PyTorch": ("torch", "mpi_lib_v2"), "TensorFlow": ("tensorflow", "mpi_lib")}


@functools.cache
def built_frameworks() -> list[str]:
    """The frameworks this Horovod was built with, from the libraries it installed (no framework imported)."""
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    return [
        name
        for name, (folder, lib) in FRAMEWORK_LIBRARIES.items()
        if any((root / folder).glob(f"{lib}.*.so")) or (root / folder / f"{lib}.so").exists()
    ]


# what `horovodrun --check-build` ticks under "Available Controllers" and "Available Tensor Operations"
CONTROLLERS = ("MPI", "Gloo")
TENSOR_OPERATIONS = ("NCCL", "DDL", "CCL", "MPI", "Gloo")
GPU_FLAGS = ("CUDA", "NCCL", "MPI")  # what a GPU run's refusal names of the build


def built_list(features: tuple[str, ...]) -> str:
    """Which of `features` this Horovod was built with, and which not: 'MPI, Gloo (not: NCCL, DDL, CCL)'."""
    have = [f for f in features if built_with(f)]
    lacking = [f for f in features if f not in have]
    return (", ".join(have) or "none") + (f" (not: {', '.join(lacking)})" if lacking else "")


def built_with(feature: str) -> bool:
    """Whether this Horovod was built with a controller or tensor operation, e.g. 'MPI', 'Gloo' or 'NCCL'."""
    return bool(check_build()[1].get(feature))


class HorovodBackend(Backend):
    name = "horovod"
    summary = "horovodrun (Gloo or MPI controller) + hvd.DistributedOptimizer"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    comm_dtypes = ("float32", "float16")  # 0.28.1 has no bfloat16 tensors on CPU
    kubeflow_kinds = ("mpijob",)  # the launcher pod runs horovodrun or mpirun over /etc/mpi/hostfile
    options: tuple[BackendOption, ...] = (
        # recorded as `launcher`, as every stored horovod run holds it; the flag names it as Horovod's, beside --hvd-*
        BackendOption(
            "launcher",
            "gloo",
            "gloo: horovodrun --gloo; mpi: horovodrun --mpi; mpirun: plain mpirun",
            str,
            LAUNCHERS,
            invalid=("ssh",),
            cli_flag="--hvd-launcher",
        ),
        BackendOption(
            "hvd_compression",
            "none",
            "gradient compression on the wire (fp16: hvd.Compression.fp16, only when asked; part of the run's "
            "numerics condition)",
            str,
            ("none", "fp16"),
            invalid=("fp8",),
            numerics=True,
        ),
        BackendOption(
            "hvd_backward_passes", 1, "backward passes per step (local accumulation)", int, invalid=("0", "-1", "x")
        ),
        BackendOption("hvd_op", "average", "gradient reduction", str, ("average", "adasum"), invalid=("sum",)),
        BackendOption(
            "hvd_fusion_mb",
            None,
            "fusion threshold in MiB (HOROVOD_FUSION_THRESHOLD)",
            float,
            invalid=("-1", "nan", "x"),
            default_words="Horovod's own",
        ),
        BackendOption(
            "hvd_cycle_ms",
            None,
            f"cycle time in ms (HOROVOD_CYCLE_TIME), at most {MAX_CYCLE_MS:g}, a "
            "minute, as every collective may wait a cycle",
            float,
            invalid=("-1", "nan", "inf", "x", "1e10"),
            default_words="Horovod's own",
        ),
        BackendOption(
            "hvd_discovery_script",
            None,
            "bench fault across hosts: the cluster's own host discovery script for horovodrun elastic "
            "(--host-discovery-script; an MPIJob's /etc/mpi/discover_hosts.sh), an executable file of this machine, "
            "one host a line; horovodrun then runs here and gives each host the hosts' slots (--slots), and "
            "--drop-host waits for the cluster to drop the host from its answer",
            str,
            invalid=("/nonexistent/discover_hosts.sh", "/etc/passwd", "/tmp"),
            default_words="bench's own script, listing the run's hosts",
            fault_only=True,
        ),
    )
    launcher = HorovodLauncher()
    group = "bench.backends.horovod.group"

    def __init__(self):
        # its elastic mode refuses a fault run (CPU processes) where the backend cannot run, saying why
        self.elastic = HorovodElastic(lambda: self.unavailable_reason("cpu"))

    def unavailable_reason(self, device):
        problem, _ = check_build()
        if problem:
            return problem
        if device == "cuda":
            # A build with MPI only takes CPU tensors (an MPI that is not CUDA-aware cannot read GPU memory), and one
            # without CUDA has no GPU tensors at all: a GPU run needs both CUDA and NCCL, as horovod_build makes them.
            lacking = [flag for flag in ("CUDA", "NCCL") if not built_with(flag)]
            if lacking:
                return (
                    f"this Horovod was built without {' and '.join(lacking)} (built with: {built_list(GPU_FLAGS)}), "
                    "which GPU runs need; rebuild it on a CUDA machine: HOROVOD_GPU_OPERATIONS=NCCL "
                    "python -m bench.tools.horovod_build --force"
                )
        return None

    def numerics_problem(self, precision, channels_last):
        if channels_last:  # its broadcast and allreduce refuse a tensor that is not contiguous in the default format
            return "Horovod's collectives take tensors in the default memory format only: drop --channels-last"
        return None

    def check_options(self, options, device):
        if options["hvd_backward_passes"] < 1:
            return "--hvd-backward-passes must be at least 1"
        for name in ("hvd_fusion_mb", "hvd_cycle_ms"):
            if options[name] is not None and options[name] < 0:
                return f"--{name.replace('_', '-')} must be 0 or more"
        if options["hvd_cycle_ms"] is not None and options["hvd_cycle_ms"] > MAX_CYCLE_MS:
            return f"--hvd-cycle-ms must be at most {MAX_CYCLE_MS:g}, a minute"
        script = options.get("hvd_discovery_script")
        if script is not None and not (os.path.isfile(script) and os.access(script, os.X_OK)):
            return (
                f"--hvd-discovery-script {shown(script)}: "
                + ("not an executable file" if os.path.exists(script) else "no such file")
                + "; name the cluster's discovery script (chmod +x it), as horovodrun runs it"
            )
        if options["launcher"] in ("mpi", "mpirun") and not planning():  # a plan's MPI is the hosts' to have
            if shutil.which("mpirun") is None:
                return f"--hvd-launcher {options['launcher']} needs mpirun (apt-get install openmpi-bin libopenmpi-dev)"
            if not built_with("MPI"):
                return (
                    f"--hvd-launcher {options['launcher']} needs a Horovod built with MPI; install "
                    "libopenmpi-dev and rebuild: python -m bench.tools.horovod_build --force"
                )
        return None

    def doctor_lines(self):
        problem, _ = check_build()
        lines = [f"Horovod {package_version('horovod') or 'not installed'}"]
        if problem:
            return lines
        lines.append(f"Horovod built with: {', '.join(built_frameworks()) or 'no framework'}")
        return lines + [
            f"controllers: {built_list(CONTROLLERS)}",
            f"tensor operations: {built_list(TENSOR_OPERATIONS)}",
            f"GPU tensors (CUDA): {'yes' if built_with('CUDA') else 'no'}",
        ]

    def backward_passes(self, options):
        return options["hvd_backward_passes"]

    def comm_schedule(self, options):
        """Horovod's background loop: each cycle fuses the gradients ready by then up to the fusion threshold. Its
        defaults since 0.21: a 1 ms cycle and a 128 MiB threshold; fp16 compression halves the bytes sent."""
        fusion_mb = options["hvd_fusion_mb"] if options["hvd_fusion_mb"] is not None else DEFAULT_FUSION_MB
        cycle_ms = options["hvd_cycle_ms"] if options["hvd_cycle_ms"] is not None else DEFAULT_CYCLE_MS
        return CommSchedule(
            "cycles",
            cap_bytes=fusion_mb * 2**20 or 1.0,
            cycle_s=cycle_ms / 1e3,
            wire_scale=0.5 if options["hvd_compression"] == "fp16" else 1.0,
        )


DEFAULT_FUSION_MB = 128.0  # HOROVOD_FUSION_THRESHOLD's default (0.21 and later)
DEFAULT_CYCLE_MS = 1.0  # HOROVOD_CYCLE_TIME's default (0.21 and later)
BACKEND = HorovodBackend()
