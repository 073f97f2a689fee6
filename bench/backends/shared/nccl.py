"""What a fault run on GPUs sets so that a collective over torch.distributed's NCCL that meets a dead or hung peer
ends, shared by the backends whose GPU collectives are torch's NCCL process group (elastic, ray). Parent side: no
framework import.

torch's NCCL watchdog checks every collective against the process group's timeout (init_process_group(timeout=),
the run's collective timeout). With async error handling at "tear down", a collective that failed or outran that
timeout aborts the communicators and ends the worker process, so the launcher sees a failed worker and restarts
the group as it does on the CPU, where gloo raises in the survivor."""

from __future__ import annotations

# the name torch reads since 2.2; older torch read NCCL_ASYNC_ERROR_HANDLING (docs/method.md, "Faults on GPUs")
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
TEAR_DOWN = "1"  # abort the communicators and end the process (2 aborts only, 3 ends without aborting)


def torch_nccl_fault_env(spec) -> dict[str, str]:
    """The environment of a fault run's workers on GPUs (empty on CPUs: gloo needs none)."""
    return {ASYNC_ERROR_HANDLING: TEAR_DOWN} if spec.device == "cuda" else {}
