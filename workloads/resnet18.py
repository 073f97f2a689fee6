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


def build_keras(num_classes: int, image: int):
    """torchvision's ResNet18 in Keras, layer for layer: the same convolutions (no bias), batch norms (epsilon 1e-5,
    PyTorch's momentum 0.1 is Keras's 0.9), BasicBlocks with a 1x1 downsampling shortcut, global average pooling and
    the classifier; the same parameter count. PyTorch pads symmetrically (3 for the 7x7 stem, 1 for every 3x3 and the
    max pool), Keras's "same" pads more on the bottom right at stride 2: the padding is explicit, zeros before a
    "valid" layer (for the max pool zeros stand in for PyTorch's -inf: its input is a ReLU's, never below 0)."""
    from workloads.keras import keras

    k = keras()
    layers = k.layers

    def bn(x, name):
        return layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=name)(x)

    def conv(x, filters, size, stride, name):
        pad = (size - 1) // 2
        if pad:
            x = layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
        return layers.Conv2D(filters, size, strides=stride, use_bias=False, name=name)(x)

    def block(x, filters, stride, name):
        out = layers.ReLU(name=f"{name}_relu1")(bn(conv(x, filters, 3, stride, f"{name}_conv1"), f"{name}_bn1"))
        out = bn(conv(out, filters, 3, 1, f"{name}_conv2"), f"{name}_bn2")
        if stride != 1 or x.shape[-1] != filters:
            x = bn(conv(x, filters, 1, stride, f"{name}_downsample_0"), f"{name}_downsample_1")
        return layers.ReLU(name=f"{name}_relu2")(layers.Add(name=f"{name}_add")([out, x]))

    inputs = k.Input((image, image, 3))
    x = layers.ReLU(name="relu")(bn(conv(inputs, 64, 7, 2, "conv1"), "bn1"))
    x = layers.MaxPooling2D(3, strides=2, name="maxpool")(layers.ZeroPadding2D(1, name="maxpool_pad")(x))
    for stage, (filters, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
        x = block(x, filters, stride, f"layer{stage}_0")
        x = block(x, filters, 1, f"layer{stage}_1")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    return k.Model(inputs, layers.Dense(num_classes, name="fc")(x), name="resnet18")


WORKLOAD = Workload(
    name="resnet18",
    summary="torchvision ResNet18 (11.7M parameters), 3-channel images",
    channels=3,
    gpu=Size(batch=64, image=224, synthetic_classes=1000, window_steps=50),
    cpu=Size(batch=16, image=32, synthetic_classes=10, window_steps=3),
    fixed_image=False,
    build=build,
    build_keras=build_keras,
)
