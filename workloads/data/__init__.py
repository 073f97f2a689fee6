"""The data sources, identical for every backend: each rank gets the same batches under any launcher. `--data`
names the source: `synthetic` (seeded random tensors held on the device, so data loading never limits throughput),
`digits` (scikit-learn's 8x8 handwritten digits, 1797 real images shipped with the package, scaled to the
workload's input), `mnist` (MNIST's own IDX files from a directory the user gives; nothing is ever downloaded),
`imagefolder` (a torchvision ImageFolder tree, one folder per class, read with the usual training transforms) and
`workload` (the user's workload's own train and held-out torch Datasets). Real data sets are held in memory as
uint8 and sharded by torch's own DistributedSampler (shuffled by seed + epoch, cut to a multiple of the world size,
rank r takes every world-th sample from r); `--loader memory` cuts batches on the device, `--loader dataloader`
feeds the same samples in the same order through torch.utils.data.DataLoader (imagefolder and workload always go
that way), so a run shows what the input pipeline costs and nothing else. One module per job: `names` (the names,
DataError, the seed and sharding rules), `mnist` (the IDX format), `digits`, `synthetic` (the numpy generator the
TensorFlow backends share), `memory` (the on-device batches), `dataloader` (the DataLoader path), `imagefolder`,
`own` (the workload's own data sets), `sources` (what each source name leads to: the parent's check and a worker's
batch stream), `timing` (input wait) and `holdout` (the held-out split of bench converge). Nothing here imports a
framework at module level: the parent and the TensorFlow processes load parts of it.
"""
