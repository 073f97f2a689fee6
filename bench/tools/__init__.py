"""Set-up and diagnosis: the Horovod build against the installed torch, `bench doctor`.
"""
