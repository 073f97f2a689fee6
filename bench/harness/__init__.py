"""One run end to end, the same for every backend and task: the runner, the supervisor (the one way to launch
a process tree and reap it), the lifeline, where a record is kept (keep), the per-rank guard (and oom: whether the
kernel's OOM killer ended its rank), the status rules and record building, the plan of a launch that --dry-run
prints, and the workload check (a user's workload loaded and checked in a time-limited process of its own, before
anything starts).
It imports bench.core, bench.rank, bench.cluster and bench.backends; tasks are reached through the registry.
"""
