"""An MLP on 1x28x28 inputs with 10 classes: small compute, so communication dominates early."""

from workloads.base import Size, Workload

HIDDEN = (512, 512)


def build(num_classes: int, image: int):
    import torch.nn as nn

    layers: list = [nn.Flatten()]
    width = image * image
    for hidden in HIDDEN:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def build_keras(num_classes: int, image: int):
    """The same MLP in Keras: Flatten, Dense(512, relu) twice, Dense(classes); the same parameter count."""
    from workloads.keras import keras

    layers = keras().layers
    model = keras().Sequential([keras().Input((image, image, 1)), layers.Flatten()], name="mnist_mlp")
    for i, hidden in enumerate(HIDDEN):
        model.add(layers.Dense(hidden, activation="relu", name=f"dense{i}"))
    model.add(layers.Dense(num_classes, name="logits"))
    return model


WORKLOAD = Workload(
    name="mnist_mlp",
    summary="MLP 784-512-512-10 (0.67M parameters) on 1x28x28 digits",
    channels=1,
    # The same on both devices: the model is defined by its 28x28 input.
    gpu=Size(batch=64, image=28, synthetic_classes=10, window_steps=200),
    cpu=Size(batch=64, image=28, synthetic_classes=10, window_steps=30),
    fixed_image=True,
    build=build,
    build_keras=build_keras,
)
