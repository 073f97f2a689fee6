"""What runs inside one process of a run: the entry point (`python -m bench.rank.entry RUN_DIR`), the step-loop
kit tasks build their rank programs from, collectives in nccl-tests' conventions, the model helpers, the
injected faults, and the one training step and parameter checksum. It imports bench.core only; a run's
backend and task are reached through the registries.
"""
