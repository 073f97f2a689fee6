"""A custom model of your own, as a workload: any torch.nn.Module that maps a batch of (channels, image, image)
inputs to one score per class. This one is a small residual MLP on 3x16x16 inputs; copy the file and replace
`ResidualMLP` with your model (README, "Compare on your own model"):

    bench sweep --workload examples/custom_model.py:WORKLOAD --backend elastic,horovod --world-sizes 1,2
"""

from workloads import Size, Workload


def build(num_classes: int, image: int):
    import torch
    import torch.nn as nn

    class ResidualMLP(nn.Module):
        def __init__(self, inputs: int, width: int = 256, blocks: int = 3):
            super().__init__()
            self.stem = nn.Linear(inputs, width)
            self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
                                        for _ in range(blocks))
            self.head = nn.Linear(width, num_classes)

        def forward(self, x):
            h = self.stem(torch.flatten(x, 1))
            for block in self.blocks:
                h = h + block(h)
            return self.head(h)

    return ResidualMLP(3 * image * image)


WORKLOAD = Workload(
    name="residual_mlp",
    summary="a residual MLP (3 blocks of 256, 0.99M parameters) on 3x16x16 inputs",
    channels=3,
    gpu=Size(batch=256, image=16, synthetic_classes=10, window_steps=100),
    cpu=Size(batch=64, image=16, synthetic_classes=10, window_steps=20),
    fixed_image=False,  # any side: the stem's width follows it
    build=build,
)
