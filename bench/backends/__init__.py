"""Backends: one plug-in module per backend (bench.backends.base.Backend), registered in bench.core.registry.

A backend module holds only what differs between backends: how its processes are started (launcher), how a
process joins the group and communicates (process group), and its elastic mode. It may import bench.core,
bench.rank and bench.cluster, never the harness, the tasks or anything above them.
"""
