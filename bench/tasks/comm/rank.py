"""What one process of a communication sweep does (bench.rank.entry runs it): a worker times every message size of
the plan (bench.rank.collectives); a process that serves the workers (a parameter server) takes part in every
allreduce of the plan. Loaded only inside a run's processes."""

from __future__ import annotations

from bench.rank.collectives import ops_per_size, sweep_plan, time_messages
from bench.rank.kit import GroupMember


def run_rank(spec, run_dir, file_rank, attempt, t_process_start):
    member = GroupMember(spec, run_dir, file_rank, attempt, t_process_start)
    info = member.info
    if info.role != "worker":
        return member.result({"served": serve_sums(member)})
    buffers = member.group.buffers(spec.comm.dtype, member)
    return member.result({"comm_rows": time_messages(spec, member.group, info, buffers)})


def serve_sums(member) -> dict:
    """A server's part of the sweep: for each allreduce of the workers' plan, its share of that many rounds of
    sums (the backend's protocol: ProcessGroup.server)."""
    spec, info = member.spec, member.info
    server = member.group.server(spec, info)
    rounds = ops_per_size(spec.comm)
    pushes = sum(
        server.sum_rounds(count, rounds, spec.comm.dtype)
        for op, _, count in sweep_plan(spec.comm, info.world_size)
        if op == "allreduce"
    )
    return {"server": info.role_rank, "workers": len(server.workers), "pushes": pushes}
