"""A custom model of your own, as a workload: any torch.nn.Module that maps a batch of (channels, image, image)
inputs to one score per class. This one is a small residual MLP on 3x16x16 inputs, trained with its own loss
(cross-entropy with label smoothing) on its own data sets (a seeded data set of noisy class patterns: replace
`datasets` with yours). Copy the file and replace what you need (README, "Compare on your own model"):

    bench sweep --workload examples/custom_model.py:WORKLOAD --backend elastic,horovod --world-sizes 1,2
    bench converge --workload examples/custom_model.py:WORKLOAD --data workload --target 0.9
"""

from workloads import Size, Workload


def build(num_classes: int, image: int):
    import torch
    import torch.nn as nn

    class ResidualMLP(nn.Module):
        def __init__(self, inputs: int, width: int = 256, blocks: int = 3):
            super().__init__()
            self.stem = nn.Linear(inputs, width)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()) for _ in range(blocks)
            )
            self.head = nn.Linear(width, num_classes)

        def forward(self, x):
            h = self.stem(torch.flatten(x, 1))
            for block in self.blocks:
                h = h + block(h)
            return self.head(h)

    return ResidualMLP(3 * image * image)


def loss():
    import torch.nn as nn

    return nn.CrossEntropyLoss(label_smoothing=0.1)


def datasets(classes: int = 10, side: int = 16, train: int = 2000, held_out: int = 400):
    """(train, held-out) torch Datasets of (3 x side x side input, class index): each class a fixed random
    pattern, each sample its pattern plus noise; seeded, so every process builds the same sets."""
    import torch
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(1234)
    patterns = torch.randn(classes, 3, side, side, generator=gen)

    def draw(n):
        labels = torch.randint(0, classes, (n,), generator=gen)
        return TensorDataset(patterns[labels] + 6.0 * torch.randn(n, 3, side, side, generator=gen), labels)

    return draw(train), draw(held_out)


WORKLOAD = Workload(
    name="residual_mlp",
    summary="a residual MLP (3 blocks of 256, 0.99M parameters) on 3x16x16 inputs",
    channels=3,
    gpu=Size(batch=256, image=16, synthetic_classes=10, window_steps=100),
    cpu=Size(batch=64, image=16, synthetic_classes=10, window_steps=20),
    fixed_image=False,  # any side: the stem's width follows it
    build=build,
    loss=loss,  # optional: cross-entropy when left out
    datasets=datasets,  # optional: what `--data workload` reads (train and held-out)
    classes=10,  # the class count of those data sets
)
