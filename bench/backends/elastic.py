"""elastic: torchrun (the torch.distributed.elastic agent, c10d rendezvous) + DistributedDataParallel."""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta

from bench.backends.base import (Backend, BackendOption, CheckpointRestart, CommSchedule, ElasticMode, ProcessGroup,
                                 rank_row)
from bench.backends.torchrun import TorchrunLauncher, agent_command, agent_observations, agents_on_hosts, free_port

# DDP's bucket size, one option of every backend whose data parallelism is DDP (elastic, ray): one flag
# DDP's first bucket holds at most 1 MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES), so that the first
# allreduce starts early in the backward pass; the others hold up to --ddp-bucket-mb
DDP_FIRST_BUCKET_BYTES = 2**20


def ddp_schedule(options: dict) -> CommSchedule:
    """DDP's reducer: buckets in the order gradients become ready (it rebuilds them so after the first step), each
    allreduced once its last gradient is ready (the scaling model's rule, bench.backends.base.CommSchedule)."""
    return CommSchedule("buckets", cap_bytes=options["ddp_bucket_mb"] * 2**20, first_cap_bytes=DDP_FIRST_BUCKET_BYTES)


DDP_BUCKET = BackendOption("ddp_bucket_mb", 25.0, "DDP gradient bucket size in MiB (the counterpart of Horovod's "
                           "fusion threshold)", float, invalid=("0", "-1", "nan", "x"))


def distributed_problem(device: str) -> str | None:
    """What this torch build lacks to run torch.distributed on `device`, if anything."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e .)"
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if device == "cpu" and not dist.is_gloo_available():
        return "this torch build has no gloo"
    if device == "cuda" and not dist.is_nccl_available():
        return "this torch build has no NCCL; install a CUDA build of torch"
    return None


def torchrun_rank_row(rank: int, world_size: int, **fields):
    """The rank map row of a process torchrun started, from the variables it sets."""
    env = os.environ
    return rank_row(rank=rank, world_size=world_size,
                    local_rank=int(fields.pop("local_rank", env.get("LOCAL_RANK", rank))),
                    local_world_size=int(env.get("LOCAL_WORLD_SIZE", world_size)),
                    group_rank=int(env.get("GROUP_RANK", 0)),
                    restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", 0)), **fields)


class DDPGroup(ProcessGroup):
    def init(self, spec):
        import torch
        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        kwargs = {}
        if spec.device == "cuda":
            torch.cuda.set_device(local_rank)
            kwargs["device_id"] = torch.device("cuda", local_rank)
        # a fault run's collectives time out soon, so a stopped peer is noticed
        timeout = spec.fault["comm_timeout"] if spec.fault else max(60.0, spec.timeout)
        dist.init_process_group("nccl" if spec.device == "cuda" else "gloo",
                                timeout=timedelta(seconds=timeout), **kwargs)
        self.device_ids = [local_rank] if spec.device == "cuda" else None
        return torchrun_rank_row(dist.get_rank(), dist.get_world_size(), local_rank=local_rank,
                                 role_rank=int(os.environ["ROLE_RANK"]))

    def wrap(self, model, optimizer, spec):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=self.device_ids,
                                       bucket_cap_mb=spec.backend_options["ddp_bucket_mb"]), optimizer

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def run_op(self, op, inp, out):
        import torch.distributed as dist

        if op == "allreduce":
            dist.all_reduce(inp)
            return inp
        if op == "broadcast":
            dist.broadcast(inp, 0)
            return inp
        if op == "allgather":  # the *_single names replace *_into_tensor / *_tensor in torch 2.14
            (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
            return out
        if op == "reduce_scatter":
            (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
            return out
        return super().run_op(op, inp, out)

    def shutdown(self):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class TorchrunElastic(ElasticMode):
    """torchrun with --max-restarts (kill) or a node range with a second agent (join), and
    restart-from-checkpoint in the workers. Across hosts (a host lost or cut off): one agent per host, with the
    node range 1:hosts."""

    scenarios = ("kill", "join", "kill-host", "partition-host")

    def launch(self, spec, rank_command, run_id, run_dir):
        # Each rendezvous round gets a store of its own: with the agent's store shared across rounds (the
        # default), gloo reads the previous round's addresses and every restart fails to connect.
        env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        if spec.hosts:
            command, endpoint = agents_on_hosts(spec, rank_command, run_id, events_file=run_dir.agent_events,
                                                max_restarts=spec.fault["max_restarts"])
            return command, env, {"rdzv_endpoint": endpoint}
        if spec.fault["scenario"] == "join":
            # the joining agent must find the rendezvous: its endpoint is chosen now, not by the agent
            endpoint, nnodes = f"127.0.0.1:{free_port()}", "1:2"
        else:
            endpoint, nnodes = "127.0.0.1:0", "1"
        command = agent_command(run_dir.agent_events, nnodes, spec.world_size, endpoint, run_id,
                                spec.fault["max_restarts"], rank_command)
        return command, env, {"rdzv_endpoint": endpoint}

    def join(self, spec, rank_command, run_id, run_dir, info):
        return agent_command(run_dir.agent_events, "1:2", 1, info["rdzv_endpoint"], run_id,
                             spec.fault["max_restarts"], rank_command)

    def observations(self, run_dir):
        return agent_observations(run_dir)

    def worker_state(self, group, model, optimizer, run_dir, spec, on_reset):
        from torch.nn.parallel import DistributedDataParallel

        return CheckpointRestart(model, optimizer, DistributedDataParallel(model), run_dir.checkpoint,
                                 lambda: (int(os.environ["LOCAL_RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
                                          int(os.environ.get("GROUP_RANK", 0))))


class ElasticBackend(Backend):
    name = "elastic"
    summary = "torchrun (elastic agent, c10d rendezvous) + DistributedDataParallel"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    options = (DDP_BUCKET,)
    launcher = TorchrunLauncher()
    group_type = DDPGroup
    elastic = TorchrunElastic()

    def check_options(self, options, device):
        if options["ddp_bucket_mb"] <= 0:
            return "--ddp-bucket-mb must be positive"
        return None

    def unavailable_reason(self, device):
        return distributed_problem(device)

    def comm_schedule(self, options):
        return ddp_schedule(options)


BACKEND = ElasticBackend()
