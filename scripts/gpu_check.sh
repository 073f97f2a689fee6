#!/usr/bin/env bash
# The GPU paths in one pass, on a machine with one or more NVIDIA GPUs, in at most 10 minutes (BUDGET_S, 600):
#   1. the topology record: `bench doctor`, and `nvidia-smi -L` and `nvidia-smi topo -m` as the driver says them;
#   2. the plans of 8 GPUs and of 2 hosts x 8 GPUs (`bench run ... --dry-run`; they start nothing);
#   3. a killed and a hung GPU worker under elastic and horovod (`bench fault --gpus`, NCCL);
#   4. the collective sweep over NCCL (`bench allreduce`), elastic and horovod, on every GPU;
#   5. training on --gpus 1 .. G (1, G, then the powers of two between) for elastic, horovod, ps and ray, at fp32
#      and bf16 (`--precision bf16`);
#   6. the workflows on the GPUs: a sweep of elastic and ps at 1 and G GPUs with its page (`bench sweep -o`), elastic
#      against its bare loop (`bench selfcheck --gpus 1`), and time to accuracy (`bench converge --gpus 1`);
#   7. the page (`bench report`) and `bench list` of all of it.
# Every step is bounded by `timeout` and by what is left of the budget less the shares held for the parts after it
# (PHASE_SHARE: at least that part of the time for the steps is kept for each part, so that steps that run to their
# limits, such as the fault runs on 8 GPUs, cannot leave training or the workflows no time); a step that fails, times
# out, needs a flag this bench does not have, or finds too little time left is one line of OUTDIR/summary.txt, and
# the script goes on. GPU_CHECK_WORST_CASE=1 runs nothing: each step is taken to run to its limit, on a clock of the
# script's own, and the summary says what each would be given (the budget's arithmetic, checked without a GPU run). Horovod
# is used as installed: the set-up builds it with NCCL on a GPU machine (docs/install.md); without NCCL its steps
# are skipped, said so. OUTDIR holds summary.txt, store.sqlite, report.html, list.txt, topology.txt and logs/.
# GPU_CHECK_STEPS, a bash regular expression (doctor|sweep-.*), runs only the steps whose whole name it matches; the
# others are skipped, said so (for a second call on a GPU machine held for minutes).
# Exit: 0 when no step failed or timed out, 1 when one did, 2 (one line, nothing written) without a GPU.
# Usage: scripts/gpu_check.sh OUTDIR [GPUS]   (from the checkout; GPUS: at most this many, default all;
# PYTHON: the python that has torch, default python3)
set -u
usage="usage: scripts/gpu_check.sh OUTDIR [GPUS] (on a machine with an NVIDIA GPU)"
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then echo "gpu_check: $usage" >&2; exit 2; fi
out=$1
# nothing is written before this check: on a machine without a GPU the one line is all
found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${found:-0}" -lt 1 ]; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi lists none); run it on a GPU machine" >&2
  exit 2
fi
gpus=${2:-$found}
case $gpus in '' | *[!0-9]* | 0) echo "gpu_check: GPUS $gpus: give a whole number of GPUs, 1 or more" >&2; exit 2 ;; esac
[ "$gpus" -gt "$found" ] && gpus=$found
if [ -n "${GPU_CHECK_STEPS:-}" ]; then
  [[ doctor =~ ^(${GPU_CHECK_STEPS})$ ]]
  if [ $? -eq 2 ]; then
    echo "gpu_check: GPU_CHECK_STEPS '$GPU_CHECK_STEPS' is not a regular expression; give one, such as 'doctor|sweep-.*'" >&2
    exit 2
  fi
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "gpu_check: $out is not empty; give a new folder" >&2
  exit 2
fi

budget=${BUDGET_S:-600}
worst=${GPU_CHECK_WORST_CASE:-0}
clock=$(date +%s) # the worst case's clock: each step moves it by its whole limit
now() { if [ "$worst" = 1 ]; then echo "$clock"; else date +%s; fi; }
started=$(now)
report_reserve=100 # the page and the list, at the end, whatever the steps took
deadline=$((started + budget))
min_step=30 # a step given less would end before a GPU run has started (torch, NCCL and cuDNN take seconds)
# The parts in order and the share of the steps' time (the budget less the reserve) each is sure of, in percent:
# a part may use what the parts before it left, never the shares of those after it.
phases=(topology plans faults allreduce training workflows)
declare -A PHASE_SHARE=([topology]=12 [plans]=12 [faults]=18 [allreduce]=12 [training]=28 [workflows]=18)
held=0 # seconds held for the parts after the current one
phase() { # name: the steps that follow are this part's
  local p after=0 seen=0
  for p in "${phases[@]}"; do
    [ "$seen" = 1 ] && after=$((after + PHASE_SHARE[$p]))
    [ "$p" = "$1" ] && seen=1
  done
  held=$(((budget - report_reserve) * after / 100))
}
mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
work=$(mktemp -d)
store=$work/gpu.sqlite # its run folders stay out of OUTDIR; the store is copied there at the end
summary=$out/summary.txt
failed=0
bench() { "$py" -m bench "$@"; }

record() { # name seconds status
  printf '%-28s %5ss  %s\n' "$1" "$2" "$3" >>"$summary"
  echo "== $(date +%T) $1: $3"
}

step() { # name limit_s VERB ARGS...: `bench VERB ARGS...` bounded by its limit and by the budget left, recorded
  local name=$1 limit=$2 left t0 rc status
  shift 2
  if [ -n "${GPU_CHECK_STEPS:-}" ] && ! [[ $name =~ ^(${GPU_CHECK_STEPS})$ ]]; then
    record "$name" 0 "skipped: not in GPU_CHECK_STEPS"
    return
  fi
  left=$((deadline - $(now) - report_reserve - held))
  if [ "$left" -lt "$min_step" ]; then
    record "$name" 0 "skipped: out of time (${held}s held for the parts after it)"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$worst" = 1 ]; then
    record "$name" "$limit" "worst case: given ${limit}s"
    clock=$((clock + limit))
    return
  fi
  t0=$(date +%s)
  echo "bench $*" >"$out/logs/$name.log"
  # SIGINT: bench ends and reaps the run's processes as on Ctrl-C; SIGKILL 15 s later if it has not
  timeout -s INT -k 15 "$limit" "$py" -m bench "$@" >>"$out/logs/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${limit}s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
  record "$name" $(($(date +%s) - t0)) "$status"
}

skip() { # name why
  record "$1" 0 "skipped: $2"
}

has_flag() { # verb flag: whether this bench's verb takes the flag
  bench "$1" --help 2>/dev/null | grep -q -- "$2"
}

{
  echo "gpu_check $(date -u +%FT%TZ), budget ${budget}s, $gpus of $found GPU(s) used"
  [ "$worst" = 1 ] && echo "worst case (GPU_CHECK_WORST_CASE=1): nothing runs; each step is taken to run to its limit"
  shares=""
  for p in "${phases[@]}"; do shares="$shares $p ${PHASE_SHARE[$p]}%"; done
  echo "each part keeps its share of the $((budget - report_reserve))s for the steps:$shares"
  [ -n "${GPU_CHECK_STEPS:-}" ] && echo "only the steps GPU_CHECK_STEPS matches: ${GPU_CHECK_STEPS}"
  echo "bench $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')"
  nvidia-smi -L
  echo
  printf '%-28s %6s  %s\n' "step (logs/STEP.log)" "took" "status"
} >"$summary"

# 1. topology
phase topology
nvidia-smi -L >"$out/topology.txt" 2>&1
nvidia-smi topo -m >>"$out/topology.txt" 2>&1
step doctor 90 doctor

# 2. plans of GPUs this machine may not have
phase plans
if has_flag run --dry-run; then
  step plan-8-gpus 30 run --backend elastic,horovod --gpus 8 --dry-run
  step plan-2x8-gpus 30 run --backend elastic,horovod --hosts a:8,b:8 --gpus 8 --dry-run
else
  skip plan-8-gpus "no --dry-run in this bench"
  skip plan-2x8-gpus "no --dry-run in this bench"
fi

horovod_nccl=0
"$py" -c 'import horovod.torch as h; raise SystemExit(0 if h.nccl_built() else 1)' 2>/dev/null && horovod_nccl=1
[ "$worst" = 1 ] && horovod_nccl=1 # the worst case is a GPU node's, whose set-up builds Horovod with NCCL
with_horovod() { # name why-not: true where Horovod has NCCL, else the step is recorded as skipped
  [ "$horovod_nccl" = 1 ] && return 0
  skip "$1" "Horovod without NCCL (python -m bench.tools.horovod_build)"
  return 1
}

# 3. a killed and a hung GPU worker (a hang needs a peer to notice it: 2 GPUs)
phase faults
for backend in elastic horovod; do
  for fault in kill hang; do
    name=fault-$backend-$fault
    if [ "$gpus" -lt 2 ]; then
      skip "$name" "needs 2 GPUs (the survivors go on without one)"
      continue
    fi
    [ "$backend" = horovod ] && ! with_horovod "$name" && continue
    step "$name" 150 fault --backend "$backend" --gpus 2 --fault "$fault" --comm-timeout 10 \
      --recovery-timeout 45 --store "$store"
  done
done

# 4. the collective sweep over NCCL
phase allreduce
step allreduce-elastic 120 allreduce --backend elastic --gpus "$gpus" --min-bytes 4K --max-bytes 256M \
  --store "$store"
with_horovod allreduce-horovod && step allreduce-horovod 120 allreduce --backend horovod --gpus "$gpus" \
  --min-bytes 4K --max-bytes 256M --store "$store"

# 5. training: 1 and G GPUs first, then the sizes between, so that a short budget still spans the range
phase training
sizes="1"
[ "$gpus" -gt 1 ] && sizes="$sizes $gpus"
n=2
while [ "$n" -lt "$gpus" ]; do
  sizes="$sizes $n"
  n=$((n * 2))
done
precision_flag=0
has_flag run --precision && precision_flag=1
for n in $sizes; do
  for precision in fp32 bf16; do
    for backend in elastic horovod ps ray; do
      name=train-$backend-$n-gpu-$precision
      if [ "$precision" != fp32 ] && [ "$precision_flag" = 0 ]; then
        skip "$name" "no --precision in this bench"
        continue
      fi
      [ "$backend" = horovod ] && ! with_horovod "$name" && continue
      extra=()
      [ "$precision_flag" = 1 ] && extra=(--precision "$precision")
      step "$name" 120 run --backend "$backend" --workload resnet18 --gpus "$n" --windows 3 ${extra[@]+"${extra[@]}"} \
        --store "$store"
    done
  done
done

# 6. the workflows on the GPUs: a sweep and its page (no fault runs: step 3 has them), the suite against its bare
# loop, time to accuracy
# world sizes 1 and G only: the powers of two between would not fit the step's 240 s on an 8-GPU node
phase workflows
sweep_sizes=1
[ "$gpus" -gt 1 ] && sweep_sizes="1,$gpus"
step sweep-gpus 240 sweep --backend elastic,ps --workload resnet18 --max-gpus "$gpus" --world-sizes "$sweep_sizes" \
  --repeats 2 --windows 3 --no-faults --store "$store" -o "$out/sweep.html"
step selfcheck-elastic-gpu 180 selfcheck --backend elastic --gpus 1 --pairs 2 --pairs-timeout 0 --no-comm \
  --store "$store"
step converge-gpu 180 converge --backend elastic,ps --gpus 1 --epochs 4 --store "$store" -o "$out/converge.html"

# 7. the page and the list; the store beside them
if [ "$worst" = 1 ]; then
  record report 0 "worst case: not made (${report_reserve}s kept for it)"
elif [ -e "$store" ]; then
  timeout -s INT -k 10 30 "$py" -m bench list --store "$store" >"$out/list.txt" 2>&1
  timeout -s INT -k 10 30 "$py" -m bench report --store "$store" -o "$out/report.html" >"$out/logs/report.log" 2>&1 \
    || record report 0 "failed (exit $?)"
  cp "$store" "$out/store.sqlite"
else
  record report 0 "skipped: nothing stored"
fi
{
  echo
  echo "$failed step(s) failed or timed out; each step's output is in logs/<step>.log."
  echo "Plans across hosts are plans only (--dry-run): nothing ran on a second host."
  echo "took $(($(now) - started)) s"
} >>"$summary"
rm -rf "$work"
cat "$summary"
[ "$failed" -eq 0 ] # exit 0 when no step failed or timed out (skipped ones are said, not failed), else 1
