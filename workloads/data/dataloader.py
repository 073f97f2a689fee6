"""The DataLoader path (`--loader dataloader`, and always for imagefolder and a workload's own data): a data set read
as users' training scripts read it, through torch.utils.data.DataLoader with K loader processes and a
DistributedSampler, each batch copied to the device (DataLoaderBatches); and the synthetic batches as a data set of
samples read in order (SyntheticDataset), so that path gives the on-device path's batches. torch is imported inside
the functions only."""

from __future__ import annotations

from workloads.data.memory import SyntheticBatches
from workloads.data.names import rank_seed


class SyntheticDataset:
    """A rank's synthetic batches (SyntheticBatches' tensors, kept on the CPU) as a data set of samples, read in
    order: a DataLoader over it gives the same batches the on-device path cycles through."""

    def __init__(self, *, batch, channels, image, classes, seed, rank):
        held = SyntheticBatches(
            batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank, device="cpu"
        )
        self.x = held.x.reshape(-1, *held.x.shape[2:])
        self.y = held.y.reshape(-1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class DataLoaderBatches:
    """A data set through torch's DataLoader, as users' training scripts read it: `workers` loader processes,
    a sampler (DistributedSampler, reshuffled by set_epoch each epoch, or in order), each batch copied to the
    device; cycled over epochs forever."""

    def __init__(self, dataset, *, batch, seed, rank, world, device, workers, shuffle=True):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

        self.sampler = (
            DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
            if shuffle
            else SequentialSampler(dataset)
        )
        self.loader = DataLoader(
            dataset,
            batch_size=batch,
            sampler=self.sampler,
            num_workers=workers,
            drop_last=True,
            persistent_workers=workers > 0,
            pin_memory=getattr(device, "type", device) == "cuda",
            generator=torch.Generator().manual_seed(rank_seed(seed, rank)),
        )
        self.device, self.epoch, self.it = device, 0, None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.it is None:
                if hasattr(self.sampler, "set_epoch"):
                    self.sampler.set_epoch(self.epoch)
                self.it = iter(self.loader)
            try:
                x, y = next(self.it)
                return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            except StopIteration:
                self.epoch, self.it = self.epoch + 1, None
