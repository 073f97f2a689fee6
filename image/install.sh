#!/usr/bin/env bash
# The install steps of the suite's image (image/Containerfile runs this script), and what CI runs of them in a clean
# virtual environment (tests/test_image.py): one script, so that what is tested is what the image holds.
#
#   image/install.sh [--image]
#
# Installs the checkout this script is in, with its [gpu] extra (torch 2.14.1 as pyproject.toml pins it), into the
# Python of the active virtual environment (else python3), then Horovod 0.28.1 built against that torch by
# `python -m bench.tools.horovod_build` (its wheel cached by torch version), and checks what was installed.
#
# --image: the image's own steps too: the system packages (Open MPI, sshd, the compilers, Python) with apt-get, and
#   the ssh settings of an MPIJob's pods (image/sshd_config, image/ssh_config); the CUDA-only parts must run.
#   Without it the system is only checked, and nothing outside the Python environment is changed.
#
# BENCH_IMAGE_CUDA: the CUDA-only parts (Horovod built with HOROVOD_GPU_OPERATIONS=NCCL, linked against torch's own
#   NCCL, and the check that it was): `require` (--image's), `skip` (a CPU-only Horovod, said so), or `auto` (the
#   default: run them where a CUDA toolkit is found, skip them and say so where none is).
# BENCH_HOROVOD_WHEEL=FILE: install this Horovod wheel rather than build one (CI reuses the tests' environment's
#   cached build: the build itself is what every test set-up runs).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
say() { echo "image/install.sh: $*"; }
fail() { echo "image/install.sh: error: $*" >&2; exit 2; }

image=0
for arg in "$@"; do
    case "$arg" in
        --image) image=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) fail "unknown argument ${arg@Q}: the only one is --image (see --help)" ;;
    esac
done
cuda="${BENCH_IMAGE_CUDA:-$([ "$image" = 1 ] && echo require || echo auto)}"
case "$cuda" in
    require | skip | auto) ;;
    *) fail "BENCH_IMAGE_CUDA=${cuda@Q}: require, skip or auto" ;;
esac

# ------------------------------------------------------------------ the system: Open MPI, sshd, compilers, Python
# what Horovod's build needs (a C++ compiler, cmake, make, Open MPI's compiler wrapper), what an MPIJob runs (sshd,
# mpirun) and the Python the image's `python -m bench` is
programs=(c++ make cmake mpicxx mpirun sshd python3)
packages=(build-essential cmake openmpi-bin libopenmpi-dev openssh-server python3 python3-dev python3-pip
    python3-venv python-is-python3)
if [ "$image" = 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
    rm -rf /var/lib/apt/lists/*
    install -m 0644 "$here/sshd_config" /etc/ssh/sshd_config.d/bench.conf
    install -m 0644 "$here/ssh_config" /etc/ssh/ssh_config.d/bench.conf
    mkdir -p /run/sshd  # sshd's privilege separation folder, which no service manager makes in a container
    say "system packages and the ssh settings of an MPIJob's pods installed"
else
    missing=()
    for p in "${programs[@]}"; do command -v "$p" >/dev/null || missing+=("$p"); done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "not on this system: ${missing[*]} (--image installs them: apt-get install ${packages[*]})"
    else
        say "system programs present: ${programs[*]}"
    fi
fi

# ------------------------------------------------------------------ the suite, torch and the [gpu] extra
python="python3"
if [ -n "${VIRTUAL_ENV:-}" ]; then python="$VIRTUAL_ENV/bin/python"; fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "$("$python" --version 2>&1) is older than the suite's 3.10"
say "installing the suite with its [gpu] extra into $("$python" -c 'import sys; print(sys.prefix)')"
"$python" -m pip install --quiet "$root[gpu]"

# ------------------------------------------------------------------ Horovod, with NCCL where the CUDA parts run
toolkit="$("$python" -c 'from bench.tools.horovod_build import find_cuda_toolkit as f; print(f() or "")')"
if [ "$cuda" = auto ]; then
    if [ -n "$toolkit" ]; then cuda=require; else cuda=skip; fi
    [ "$cuda" = skip ] && say "no CUDA toolkit (nvcc) here: skipping the CUDA-only parts (Horovod for the CPU, no NCCL)"
elif [ "$cuda" = skip ]; then
    say "BENCH_IMAGE_CUDA=skip: skipping the CUDA-only parts (Horovod for the CPU, no NCCL)"
fi
if [ "$cuda" = require ]; then
    [ -n "$toolkit" ] || fail "the CUDA-only parts need a CUDA toolkit (nvcc on PATH or CUDA_HOME); none found"
    export HOROVOD_GPU_OPERATIONS=NCCL
    unset BENCH_HOROVOD_CPU
else
    export BENCH_HOROVOD_CPU=1  # a CPU Horovod even where a GPU is visible
    unset HOROVOD_GPU_OPERATIONS
fi
if [ -n "${BENCH_HOROVOD_WHEEL:-}" ]; then
    [ -f "$BENCH_HOROVOD_WHEEL" ] || fail "BENCH_HOROVOD_WHEEL=${BENCH_HOROVOD_WHEEL@Q}: no such wheel"
    say "Horovod from $BENCH_HOROVOD_WHEEL (BENCH_HOROVOD_WHEEL), not built here"
    "$python" -m pip install --quiet cloudpickle psutil pyyaml packaging cffi
    "$python" -m pip install --quiet --no-deps --force-reinstall "$BENCH_HOROVOD_WHEEL"
else
    "$python" -m bench.tools.horovod_build
fi

# ------------------------------------------------------------------ what was installed
"$python" - "$cuda" <<'PY'
import sys

import horovod.torch as hvd
import pynvml  # the [gpu] extra's NVML bindings
import torch

import bench

cuda = sys.argv[1] == "require"
print(
    f"image/install.sh: bench {bench.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
    f"Horovod with gloo {bool(hvd.gloo_built())}, MPI {bool(hvd.mpi_built())}, CUDA {bool(hvd.cuda_built())}, "
    f"NCCL {hvd.nccl_built() or False}, NVML bindings {pynvml.__name__}"
)
if cuda and not (torch.version.cuda and hvd.cuda_built() and hvd.nccl_built()):
    sys.exit("image/install.sh: error: the CUDA-only parts ran, yet torch or Horovod has no CUDA or NCCL")
if not hvd.gloo_built():
    sys.exit("image/install.sh: error: Horovod was built without Gloo")
PY
"$python" -m bench --version >/dev/null
say "done"
