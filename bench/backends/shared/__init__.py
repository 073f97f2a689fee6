"""Code several backends share, in one place rather than copied, each module saying who uses it: the torchrun
launcher (`torchrun`, `torchrun_agent`, `torchrun_events`), a GPU fault run's settings for torch's NCCL (`nccl`),
DistributedDataParallel's parent side (`ddp`) and group (`ddp_group`), restart from a checkpoint (`checkpoint`), and
the TensorFlow side (`tensorflow`, `keras`, `keras_batches`). A module named by parent side imports no framework at
the top; a worker side's imports its framework there."""
