#!/usr/bin/env bash
# The GPU paths in one pass, on a machine with at least one CUDA device and no package index needed:
#   1. Horovod 0.28.1 built with CUDA and NCCL against the installed torch (in the background);
#   2. elastic and ps train both workloads on --gpus 1 (NCCL for elastic; ps stages through the host);
#   3. the collective sweep over NCCL (elastic) up to 256 MiB;
#   4. once the build is done: horovod, then elastic again (the CPU as free as for horovod), train both
#      workloads and run the sweep;
#   5. the report of all of it.
# WHEELS=DIR: where pip finds what Horovod's build needs and the machine lacks (cffi, pycparser), with
# no package index. AFTER_BUILD='horovod' runs only Horovod after the build. BEFORE_BUILD=0 skips step 2 and 3 (to rerun the Horovod part alone). Horovod is built without MPI:
# NCCL carries its GPU collectives and Gloo its controller, as in the elastic runs.
# Usage: scripts/gpu_check.sh OUTDIR [GPUS]   (from the checkout; uses the python that has torch)
# Needs: a CUDA build of torch with NCCL, nvcc, cmake, and Horovod's sdist in the build cache
# ($BENCH_CACHE_DIR/horovod/sdist/horovod-0.28.1.tar.gz) or a package index to fetch it from.
set -u
out=${1:?usage: scripts/gpu_check.sh OUTDIR [GPUS]}
gpus=${2:-1}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
store=$(mktemp -d)/gpu.sqlite  # its run folders stay out of OUTDIR; the store is copied at the end
bench() { "$py" -m bench "$@"; }
step() { echo "== $(date +%T) $*"; }

nvidia-smi -L || { echo "gpu_check: no NVIDIA GPU here" >&2; exit 2; }
"$py" -m bench doctor >"$out/doctor.txt" 2>&1

# NCCL from torch's own wheel (nvidia-nccl-*): Horovod links the same library torch uses
nccl_dir=$("$py" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
if [ -n "$nccl_dir" ] && [ -z "${HOROVOD_NCCL_HOME:-}" ]; then
  mkdir -p /tmp/nccl-home/lib
  ln -sfn "$nccl_dir/include" /tmp/nccl-home/include
  ln -sf "$nccl_dir"/lib/libnccl.so.* /tmp/nccl-home/lib/
  ln -sf "$(ls "$nccl_dir"/lib/libnccl.so.* | head -1)" /tmp/nccl-home/lib/libnccl.so
  export HOROVOD_NCCL_HOME=/tmp/nccl-home HOROVOD_NCCL_LINK=SHARED
fi
if [ -n "${WHEELS:-}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS"; fi
# kernels for this GPU's compute capability only (the default list is every one nvcc knows)
cc=$("$py" -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}{n}")')
step "building Horovod with NCCL (sm_$cc) in the background"
(HOROVOD_WITHOUT_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_BUILD_CUDA_CC_LIST=$cc timeout "${BUILD_TIMEOUT:-480}" \
   "$py" -m bench.tools.horovod_build >"$out/horovod-build.txt" 2>&1; echo "exit $?" >>"$out/horovod-build.txt") &
build=$!

run_train() {  # backend workload
  step "train $1 $2 --gpus $gpus"
  timeout 150 "$py" -m bench run --backend "$1" --workload "$2" --gpus "$gpus" --windows 5 --store "$store" \
    || echo "gpu_check: $1 $2 exited $?"
}
sweep() {  # backends
  step "allreduce sweep, $1"
  timeout 180 "$py" -m bench allreduce --backend "$1" --gpus "$gpus" --min-bytes 4K --max-bytes 256M \
    --store "$store" || echo "gpu_check: allreduce $1 exited $?"
}
if [ "${BEFORE_BUILD:-1}" != 0 ]; then
  for backend in elastic ps; do
    for workload in mnist_mlp resnet18; do run_train "$backend" "$workload"; done
  done
  sweep elastic
fi

step "waiting for the Horovod build"
wait "$build"
cat "$out/horovod-build.txt"
cp "${BENCH_CACHE_DIR:-$HOME/.cache/elastic-vs-horovod-bench}"/horovod/*.log "$out/horovod-build.log" 2>/dev/null
if "$py" -c 'import horovod.torch as h; assert h.nccl_built()' 2>/dev/null; then
  after=${AFTER_BUILD:-horovod elastic}
  for backend in $after; do
    for workload in mnist_mlp resnet18; do run_train "$backend" "$workload"; done
  done
  sweep "$(echo $after | tr ' ' ,)"
else
  echo "gpu_check: no Horovod with NCCL; its runs are skipped (see $out/horovod-build.txt)"
fi
step "report"
bench list --store "$store" >"$out/list.txt" 2>&1; cat "$out/list.txt"
bench report --store "$store" -o "$out/report.html" || echo "gpu_check: report exited $?"
cp "$store" "$out/gpu.sqlite"
step "done"
