"""Benchmark harness: PyTorch Distributed Elastic vs Horovod vs a parameter-server baseline."""

__version__ = "0.1.0"
