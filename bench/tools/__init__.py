"""Set-up and diagnosis: the Horovod build against the installed torch, `bench doctor`. They may import every
layer below the command line.
"""
