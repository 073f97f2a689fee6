"""The batches `--loader memory` holds on the device, so input never limits throughput: synthetic_arrays' batches
cycled (SyntheticBatches), and an in-memory uint8 data set with its conversion to the model's input (HeldImages)
cut into epochs sharded by rank in DistributedSampler's own order (shard_order, ShardedBatches). torch is imported
inside the functions only."""

from __future__ import annotations

from workloads.data.names import samples_per_rank
from workloads.data.synthetic import SYNTHETIC_BATCHES, synthetic_arrays


class SyntheticBatches:
    """A fixed set of seeded batches (synthetic_arrays), already on the device, cycled forever."""

    def __init__(self, *, batch, channels, image, classes, seed, rank, device):
        import torch

        x, y = synthetic_arrays(batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank)
        self.x = torch.from_numpy(x).to(device)
        self.y = torch.from_numpy(y).to(device)
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        self.i = (i + 1) % SYNTHETIC_BATCHES
        return self.x[i], self.y[i]

    def at(self, step: int):
        """The batch step number `step` (0-based) draws: the same after any restart."""
        i = step % SYNTHETIC_BATCHES
        return self.x[i], self.y[i]


def shard_order(samples: int, *, world: int, rank: int, seed: int, epoch: int):
    """The sample indices rank `rank` takes in epoch `epoch`: DistributedSampler's own order (drop_last),
    so the in-memory path and the DataLoader path see the same samples."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    sampler.set_epoch(epoch)
    return list(sampler)


class HeldImages:
    """An in-memory uint8 data set and its conversion to the model's input: scaled to [0, 1], normalised by
    the data set's own mean and std, resized to the model's side and repeated over its channels. The same
    arithmetic per batch on the device (memory loader) or per sample in a DataLoader (dataloader loader)."""

    def __init__(self, images, labels, *, channels, image, device="cpu", stats=None):
        import torch

        self.images = torch.from_numpy(images.copy()).to(device)
        self.labels = torch.from_numpy(labels.copy()).to(device)
        if stats is None:  # a held-out set is normalised with its training set's (mean, std)
            scaled = self.images.float() / 255.0
            stats = scaled.mean().item(), scaled.std().item()
        self.mean, self.std = stats
        self.channels, self.image = channels, image

    def __len__(self):
        return len(self.labels)

    def convert(self, raw):
        """uint8 N x H x W -> float N x C x S x S."""
        import torch.nn.functional as F

        x = (raw.float().div_(255.0) - self.mean) / self.std
        x = x.unsqueeze(1)
        if x.shape[-1] != self.image:
            x = F.interpolate(x, size=(self.image, self.image), mode="bilinear", align_corners=False)
        if self.channels != 1:
            x = x.expand(-1, self.channels, -1, -1).contiguous()
        return x

    def __getitem__(self, i):  # one sample, as a Dataset gives it to a DataLoader
        return self.convert(self.images[i : i + 1])[0], self.labels[i]

    def batches(self, batch_size: int):
        """The whole set in order, converted, in batches (held-out evaluation)."""
        for lo in range(0, len(self), batch_size):
            yield self.convert(self.images[lo : lo + batch_size]), self.labels[lo : lo + batch_size]


class ShardedBatches:
    """Epochs over an in-memory data set, sharded by rank, converted per batch on the device (--loader memory)."""

    def __init__(self, images, labels, *, batch, channels, image, seed, rank, world, device):
        self.data = HeldImages(images, labels, channels=channels, image=image, device=device)
        self.per_rank = samples_per_rank(len(self.data), world, batch)
        self.batch, self.seed, self.rank, self.world = batch, seed, rank, world
        self.epoch, self.pos, self.order = -1, 0, None
        self._new_epoch()

    @property
    def mean(self):
        return self.data.mean

    @property
    def std(self):
        return self.data.std

    def _new_epoch(self):
        import torch

        self.epoch += 1
        self.order = torch.tensor(
            shard_order(len(self.data), world=self.world, rank=self.rank, seed=self.seed, epoch=self.epoch),
            device=self.data.labels.device,
        )
        self.pos = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos + self.batch > self.per_rank:
            self._new_epoch()
        idx = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return self.data.convert(self.data.images[idx]), self.data.labels[idx]
