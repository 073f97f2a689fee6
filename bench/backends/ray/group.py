"""ray's process group, in a Ray Train worker: the torch process group Ray Train set up, prepare_model's
DistributedDataParallel, restart from a checkpoint through faults, and rank_main, the rank's code as Ray Train's
training function. Imported by a run's processes only (and by the driver, which hands rank_main to the trainer):
Ray Train and torch at the top."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import psutil
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist

from bench.backends.base import rank_row
from bench.backends.ray.times import times_of
from bench.backends.shared.checkpoint import CheckpointRestart
from bench.backends.shared.ddp_group import DDPGroup
from bench.core.rundir import LOG_DRAIN_S, CappedLog, RunDir, copy_output, tail
from bench.rank.entry import run_process


class RayTrainGroup(DDPGroup):
    """A Ray Train worker's side: the torch process group Ray Train initialised (gloo on CPU, NCCL on GPU), the
    rank map as Ray gave it, prepare_model's DistributedDataParallel, and the same collectives as elastic."""

    def init(self, spec):
        ctx = ray.train.get_context()
        if not dist.is_initialized():
            raise RuntimeError("Ray Train did not set up a torch process group in this worker")
        if spec.device == "cuda":
            device = ray.train.torch.get_device()
            torch.cuda.set_device(device)
            self.device_ids = [device.index]
        else:
            self.device_ids = None
        rank = ctx.get_world_rank()
        return rank_row(
            rank=rank,
            world_size=ctx.get_world_size(),
            local_rank=ctx.get_local_rank(),
            local_world_size=ctx.get_local_world_size(),
            group_rank=ctx.get_node_rank(),
            role_rank=rank,
            restart_count=int(os.environ.get("BENCH_ATTEMPT", 0)),
        )  # worker groups before

    def rendezvous_began(self, init_called):
        began = times_of(_run_dir()).get("process_group_start")
        return min(began, init_called) if began else init_called

    def wrap(self, model, optimizer, spec):
        """ray.train.torch.prepare_model with elastic's DDP settings (bucket size; the model is already on its
        device). At one worker prepare_model wraps nothing, as Ray users get it."""
        return ray.train.torch.prepare_model(
            model,
            move_to_device=False,
            parallel_strategy_kwargs={"bucket_cap_mb": spec.backend_options["ddp_bucket_mb"]},
        ), optimizer

    def shutdown(self):
        pass  # the process group is Ray Train's: it destroys it when the workers end

    def elastic_state(self, model, optimizer, run_dir, spec, on_reset):
        def identity():  # (local rank, attempt, node rank), as Ray Train and rank_main set them for this process
            env = os.environ
            return int(env.get("LOCAL_RANK", 0)), int(env.get("BENCH_ATTEMPT", 0)), int(env.get("NODE_RANK", 0))

        training_model, _ = self.wrap(model, optimizer, spec)
        return CheckpointRestart(model, optimizer, training_model, run_dir.checkpoint, identity)


def _run_dir():
    return RunDir(os.environ["BENCH_RUN_DIR"])


def rank_main(config: dict) -> None:
    """Ray Train's train_loop_per_worker: one rank of the run, in the Ray worker's own process. What bench.harness.guard
    does for the other backends' ranks is done here: the rank's output goes to its log, capped as the guard caps it
    (through a pipe, copied by a thread of this process), and whatever the ending its exit file is written (a rank
    that raised exits with code 1, as a Python process would)."""
    run_dir = RunDir(config["run_dir"])
    rank = ray.train.get_context().get_world_rank()
    attempt = run_dir.claim_attempt(rank, 0)
    os.environ.update(BENCH_RANK=str(rank), BENCH_ATTEMPT=str(attempt), BENCH_RUN_DIR=str(run_dir.path))
    log_path = run_dir.rank_file(rank, attempt, "log")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    read_end, write_end = os.pipe()
    pump = threading.Thread(target=copy_output, args=(read_end, CappedLog(log_path)), daemon=True)
    pump.start()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    returncode = 1
    try:
        run_process(run_dir, rank, attempt, psutil.Process().create_time())  # the Ray worker's process start
        returncode = 0
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        ended = time.time()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)  # the pipe's last write ends of this process: its copy ends once it has the rest
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        pump.join(LOG_DRAIN_S)
        run_dir.write(
            rank,
            attempt,
            "exit",
            {
                "rank": rank,
                "attempt": attempt,
                "pid": os.getpid(),
                "time": ended,
                "returncode": returncode,
                "exit_code": returncode,
                "signal": None,
                "terminated_by": None,
                "tail": tail(log_path) if returncode else "",
            },
        )


GROUP = RayTrainGroup
