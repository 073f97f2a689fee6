"""elastic's elastic mode, the parent's side: torchrun's agent in elastic mode (bench.backends.shared.torchrun). The
ranks' side, restart from a checkpoint, is the group's (bench.backends.elastic.group)."""

from __future__ import annotations

from bench.backends.base import ElasticMode
from bench.backends.shared.nccl import torch_nccl_fault_env
from bench.backends.shared.torchrun import agent_command, agent_observations, agents_on_hosts, free_port


class TorchrunElastic(ElasticMode):
    """torchrun with --max-restarts (kill) or a node range with a second agent (join), and
    restart-from-checkpoint in the workers. Across hosts (a host lost or cut off): one agent per host, with the
    node range 1:hosts."""

    across_hosts = True

    def launch(self, spec, fault, rank_command, run_id, run_dir):
        # Each rendezvous round gets a store of its own: with the agent's store shared across rounds (the
        # default), gloo reads the previous round's addresses and every restart fails to connect.
        env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        if spec.hosts:
            command, endpoint = agents_on_hosts(
                spec, rank_command, run_id, events_file=run_dir.agent_events, max_restarts=fault.max_restarts
            )
            return command, env, {"rdzv_endpoint": endpoint}
        if fault.joining:
            # the joining agent must find the rendezvous: its endpoint is chosen now, not by the agent
            endpoint, nnodes = f"127.0.0.1:{free_port()}", "1:2"
        else:
            endpoint, nnodes = "127.0.0.1:0", "1"
        command = agent_command(
            run_dir.agent_events, nnodes, spec.world_size, endpoint, run_id, fault.max_restarts, rank_command
        )
        return command, env, {"rdzv_endpoint": endpoint}

    def join(self, spec, fault, rank_command, run_id, run_dir, info):
        return agent_command(
            run_dir.agent_events, "1:2", 1, info["rdzv_endpoint"], run_id, fault.max_restarts, rank_command
        )

    def nccl_env(self, spec, fault):
        return torch_nccl_fault_env(spec)

    def observations(self, run_dir):
        return agent_observations(run_dir)
