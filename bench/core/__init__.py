"""The bottom layer: what every other layer shares. Run specs, records and their JSON codec, the run directory
(and the one atomic file write), the store, statistics, the environment fingerprint, errors, console output,
whether the process only plans (dryrun) and the plug-in registries. It imports nothing from bench outside itself.
"""
