"""Test clusters on this machine for runs across hosts: network-namespace hosts with sshd, a Slurm cluster on
them, a Ray cluster; one written protocol (bench.testbed.protocol) and their ordered teardown. Product
code never imports it.
"""
