"""elastic: torchrun (the torch.distributed.elastic agent, c10d rendezvous) + DistributedDataParallel."""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta

from bench.backends.base import Backend, BackendOption, RankInfo, hostname


def free_port() -> int:
    """A TCP port free now: a scale-up's second agent must know the rendezvous endpoint in advance."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(nproc: int, run_id: str, max_restarts: int, rank_command: list[str]) -> list[str]:
    """torchrun on this node with c10d rendezvous on a free port.

    `python -m torch.distributed.run` is torchrun's own entry point, run by this interpreter so the
    workers see the same environment. Port 0 lets the agent's c10d store pick a free port, which the
    workers then share (TORCHELASTIC_USE_AGENT_STORE): two runs at once never collide.
    """
    return [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", run_id,
            "--max-restarts", str(max_restarts), "--no-python", *rank_command]


class ElasticBackend(Backend):
    name = "elastic"
    summary = "torchrun (elastic agent, c10d rendezvous) + DistributedDataParallel"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    elastic_modes = ("kill", "join")
    options = (
        BackendOption("ddp_bucket_mb", 25.0, "DDP gradient bucket size in MiB (the counterpart of "
                      "Horovod's fusion threshold)", float),
    )

    def check_options(self, options, device):
        if options["ddp_bucket_mb"] <= 0:
            return "--ddp-bucket-mb must be positive"
        return None

    def unavailable_reason(self, device):
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

    def launch_command(self, spec, rank_command, run_id):
        return torchrun_command(spec.world_size, run_id, 0, rank_command)

    def rank_identity(self, env):
        return int(env.get("RANK", 0)), int(env.get("TORCHELASTIC_RESTART_COUNT", 0))

    def init(self, spec):
        import torch
        import torch.distributed as dist

        env = os.environ
        local_rank = int(env["LOCAL_RANK"])
        kwargs = {}
        if spec.device == "cuda":
            torch.cuda.set_device(local_rank)
            kwargs["device_id"] = torch.device("cuda", local_rank)
        # a fault run's collectives time out soon, so a stopped peer is noticed
        timeout = spec.fault["comm_timeout"] if spec.fault else max(60.0, spec.timeout)
        dist.init_process_group("nccl" if spec.device == "cuda" else "gloo",
                                timeout=timedelta(seconds=timeout), **kwargs)
        self._device_ids = [local_rank] if spec.device == "cuda" else None
        return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                        local_world_size=int(env["LOCAL_WORLD_SIZE"]), group_rank=int(env["GROUP_RANK"]),
                        role_rank=int(env["ROLE_RANK"]),
                        restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", 0)), host=hostname())

    def wrap(self, model, optimizer, spec):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=self._device_ids,
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

    # ------------------------------------------------------------ elastic mode (bench fault)
    def _agent_command(self, spec, run_dir, run_id, nnodes: str, nproc: int, endpoint: str,
                       rank_command: list[str]) -> list[str]:
        from bench.fault import AGENT_EVENTS

        command = [sys.executable, "-m", "bench.backends.torchrun_events", str(run_dir.path / AGENT_EVENTS), "--",
                   "--nnodes", nnodes, "--nproc-per-node", str(nproc),
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
                   "--max-restarts", str(spec.fault["max_restarts"])]
        if nnodes != "1":
            # with a node range the agent otherwise waits 30 s for more nodes before it starts
            command += ["--rdzv-conf", "last_call_timeout=1"]
        return command + ["--no-python", *rank_command]

    def fault_launch(self, spec, rank_command, run_id, run_dir):
        if spec.fault["scenario"] == "join":
            spec.fault["endpoint"] = f"127.0.0.1:{free_port()}"
            command = self._agent_command(spec, run_dir, run_id, "1:2", spec.world_size, spec.fault["endpoint"],
                                          rank_command)
        else:
            command = self._agent_command(spec, run_dir, run_id, "1", spec.world_size, "127.0.0.1:0", rank_command)
        # Each rendezvous round gets a store of its own: with the agent's store shared across rounds (the
        # default), gloo reads the previous round's addresses and every restart fails to connect.
        return command, {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}

    def fault_join(self, spec, rank_command, run_id, run_dir):
        return self._agent_command(spec, run_dir, run_id, "1:2", 1, spec.fault["endpoint"], rank_command)

    def run_elastic(self, ctx):
        """Restart-from-checkpoint: every process loads the latest checkpoint when there is one (whatever
        TORCHELASTIC_RESTART_COUNT says: it stays 0 after a membership change), trains, and rank 0 saves a
        checkpoint every C steps (written aside and renamed, so a kill never leaves half of one)."""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        path = ctx.run_dir.path / "checkpoint.pt"
        step = 0
        if path.exists():
            saved = torch.load(path, map_location="cpu", weights_only=True)
            ctx.model.load_state_dict(saved["model"])
            ctx.optimizer.load_state_dict(saved["optimizer"])
            step = saved["step"]
        rank, size = dist.get_rank(), dist.get_world_size()
        ctx.resumed(step, rank, size, int(os.environ["LOCAL_RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))
        model = DistributedDataParallel(ctx.model)
        while ctx.keep_going(step, size):
            try:
                ctx.train_step(model, ctx.optimizer, step, rank)
            except Exception as exc:
                ctx.journal.write("detected", rank=rank, what=f"{type(exc).__name__}: {str(exc)[:80]}")
                raise
            step += 1
            ctx.stepped(step, rank, size)
            if step % ctx.checkpoint_every == 0 and rank == 0:
                tmp = path.with_name(f".checkpoint.{os.getpid()}.tmp")
                torch.save({"step": step, "model": ctx.model.state_dict(),
                            "optimizer": ctx.optimizer.state_dict()}, tmp)
                ctx.committed(step, rank)  # journalled before it becomes visible: a kill in between loses neither
                os.replace(tmp, path)
        return step


BACKEND = ElasticBackend()
