"""Test clusters on this machine, for runs across hosts without a cluster: network-namespace hosts with sshd
(hosts), a Slurm cluster (slurm) and a Ray cluster (ray) on them. What each provides, and the helpers they share,
is written down in protocol; teardown takes them all down, a cluster before the hosts it runs on. Only teardown
imports every cluster; slurm and ray import hosts, and all import protocol. The folder may import bench.core,
bench.cluster, bench.backends and bench.harness; product code never imports it.
"""
