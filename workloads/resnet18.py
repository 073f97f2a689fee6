"""torchvision's ResNet18 (11.7M parameters), with the class count of its data.

On GPU it runs at ImageNet size (224x224, 1000 synthetic classes, as in Horovod's synthetic
benchmark). Its CPU size is 32x32 inputs with 10 classes at batch 16: the same network and the same
gradient volume per step, at a compute cost a laptop or CI core can carry (about 0.2 s a step on one
core), so that a sweep can afford several launches of every case.
"""

from workloads.base import Size, Workload


def build(num_classes: int, image: int):
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


WORKLOAD = Workload(
    name="resnet18",
    summary="torchvision ResNet18 (11.7M parameters), 3-channel images",
    channels=3,
    gpu=Size(batch=64, image=224, synthetic_classes=1000, window_steps=50),
    cpu=Size(batch=16, image=32, synthetic_classes=10, window_steps=3),
    fixed_image=False,
    build=build,
)
