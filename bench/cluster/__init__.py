"""Where the processes of a run go: hosts and placement, commands over ssh, the fan-out launcher, a host cut
off from the others, a Slurm allocation, the Kubeflow jobs `bench k8s` writes (and what their operators give
each pod). It imports bench.core only.
"""
