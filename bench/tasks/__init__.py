"""Tasks: one plug-in per kind of run (bench.tasks.base.Task), registered in bench.core.registry.

A task owns its spec fields and their validation, what each process runs, an optional parent-side watcher,
how its record's status and metrics are computed, and its views. Nothing outside this package tests which
task a run is. A task that does several jobs is a folder: its parent side in `__init__`, and the parts that
belong to higher layers in modules of their own (`report`: the report view). A task may import
bench.core, bench.rank, bench.cluster, bench.backends and bench.harness.
"""
