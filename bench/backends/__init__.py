"""Backends: one plug-in folder per backend (bench/backends/<name>/), registered in bench.core.registry.

A backend's folder holds only what differs between backends, split by the process that runs it
(bench.backends.base says what each part must give): `__init__.py`, the Backend the parent needs (name, options,
limits, availability), and `launcher.py`, how its processes are started and its elastic mode launched, import no
framework; `group.py`, how a process joins the group and communicates, is imported by a run's processes only, its
framework at the top. Code several backends share is in bench/backends/shared/. A backend may import bench.core,
bench.rank and bench.cluster, never the harness, the tasks or anything above them.
"""
