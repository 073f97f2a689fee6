"""The Keras the TensorFlow backends build their models with: tf_keras, Keras 2 as TensorFlow shipped it until 2.15,
the Keras that Horovod 0.28.1's TensorFlow side and tf.distribute's custom training loops were written against (from
TensorFlow 2.16 `tf.keras` is Keras 3 unless TF_USE_LEGACY_KERAS=1; importing tf_keras by name needs neither).

Models are channels-last (NHWC), TensorFlow's layout on the CPU; the batches the workers share are the PyTorch
backends' own (channels-first), transposed once per batch (bench.backends.shared.keras_batches)."""

from __future__ import annotations


def keras():
    """The tf_keras module (imports TensorFlow)."""
    import tf_keras

    return tf_keras


def torch_layers(model) -> list[tuple[str, object]]:
    """The PyTorch model's modules that hold weights (Linear, Conv2d, BatchNorm2d) with their names, in the order
    they were made (the order of its parameters())."""
    import torch.nn as nn

    return [(name, m) for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d, nn.BatchNorm2d))]


def paired_layers(keras_model, torch_model) -> list[tuple[object, object]]:
    """(PyTorch module, Keras layer) of the same weights. By name where the Keras layers are named after the modules
    (a "." as "_": ResNet18's "layer1.0.downsample.0" is "layer1_0_downsample_0"; a functional model lists its layers
    by depth, so a shortcut's come before its block's second convolution), else in order (a Sequential model)."""
    theirs = torch_layers(torch_model)
    ours = [layer for layer in keras_model.layers if layer.weights]
    by_name = {layer.name: layer for layer in ours}
    if all(name.replace(".", "_") in by_name for name, _ in theirs):
        return [(m, by_name[name.replace(".", "_")]) for name, m in theirs]
    if len(theirs) != len(ours):
        raise ValueError(f"{len(theirs)} PyTorch layers with weights, {len(ours)} Keras layers")
    return [(m, layer) for (_, m), layer in zip(theirs, ours)]


def load_torch_weights(keras_model, torch_model) -> int:
    """Copy a PyTorch model's weights into the same model in Keras (a workload's build and build_keras), layer by
    layer (paired_layers): a Linear's weight transposed (out x in -> in x out), a Conv2d's OIHW as HWIO, a
    BatchNorm2d's weight, bias, running mean and variance as gamma, beta, moving mean and variance. A Dense after a
    Flatten of a channels-last map with several channels would need its rows permuted: neither workload has one.
    Returns the elements copied; a layer of another kind or shape raises ValueError."""
    import torch.nn as nn

    copied = 0
    for src, dst in paired_layers(keras_model, torch_model):
        if isinstance(src, (nn.Linear, nn.Conv2d)):
            weight = src.weight.detach().numpy()
            values = [weight.T if isinstance(src, nn.Linear) else weight.transpose(2, 3, 1, 0)]
            if src.bias is not None:
                values.append(src.bias.detach().numpy())
        else:
            values = [t.detach().numpy() for t in (src.weight, src.bias, src.running_mean, src.running_var)]
        shapes = [tuple(w.shape) for w in dst.weights]
        if shapes != [v.shape for v in values]:
            raise ValueError(f"{type(src).__name__} -> {dst.name}: shapes {[v.shape for v in values]} and {shapes}")
        dst.set_weights(values)
        copied += sum(v.size for v in values)
    return copied


def torch_view(keras_model, torch_model) -> list:
    """The Keras model's trainable weights laid out as the PyTorch model's parameters() (the inverse conversion),
    numpy arrays in the same order: what a comparison of the two frameworks' updates reads."""
    out = []
    for _, layer in paired_layers(keras_model, torch_model):
        kind = type(layer).__name__
        for w in layer.trainable_weights:
            value = w.numpy()
            if kind == "Dense" and value.ndim == 2:
                value = value.T
            elif kind == "Conv2D" and value.ndim == 4:
                value = value.transpose(3, 2, 0, 1)
            out.append(value)
    return out
