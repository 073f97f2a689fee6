"""Where the processes of a run go: hosts and placement, commands over ssh, the fan-out launcher, a host cut
off from the others, a Slurm allocation. It imports bench.core only.
"""
