"""Benchmark harness: PyTorch Distributed Elastic vs Horovod vs a parameter-server baseline."""

__version__ = "0.1.0"

# Version of the run record (and of the store's table layout). Bump it when a field changes meaning.
SCHEMA_VERSION = 1
