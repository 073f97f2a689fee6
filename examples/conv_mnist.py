"""A small convolutional network for 1x28x28 digits, written against the workload protocol (README, "Compare on
your own model"). Run it under any backend:

    bench run --workload examples/conv_mnist.py:WORKLOAD --backend horovod --nproc 2
"""

from workloads import Size, Workload


def build(num_classes: int, image: int):
    """Two 3x3 convolutions with max-pooling, then a linear classifier: about 0.1M parameters."""
    import torch.nn as nn

    side = image // 4  # two 2x2 poolings
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * side * side, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


WORKLOAD = Workload(
    name="conv_mnist",
    summary="2 conv layers + MLP head (0.11M parameters) on 1x28x28 digits",
    channels=1,
    gpu=Size(batch=128, image=28, synthetic_classes=10, window_steps=100),
    cpu=Size(batch=64, image=28, synthetic_classes=10, window_steps=10),
    fixed_image=True,  # the head's width follows the 28x28 input
    build=build,
)
