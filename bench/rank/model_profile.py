"""The process that profiles a model for the scaling model (`python -m bench.rank.model_profile MODEL`, started by
bench.projection.shapes): a few training steps of it on this machine's CPU at a small batch, timed in parts by the
run's own profiler (bench.rank.profile.StepProfiler: forward, backward, each gradient's ready time, optimizer), so
the parent learns its gradient tensors' sizes and the order they become ready in without importing torch.

MODEL is `torchvision:NAME` (a torchvision classification model, built without weights) or a workload address
(`path/to/file.py:NAME`, `PKG.MODULE:NAME`), loaded as a run loads it (workloads.external.load). The answer is one
line of JSON on the stdout this process was started with: {"answer": the profile} or {"error": one line}."""

from __future__ import annotations

import sys

from bench.rank.answer import answer_parent

STEPS = 4  # the first is a warm-up (allocations), the other three are profiled (their medians)
BATCH = 2
CLASSES = 1000
IMAGE = 224
NATIVE_IMAGE = {"inception_v3": 299}  # torchvision models that need their own input side


def build(model: str):
    """(network, loss, input shape) of MODEL, or ValueError with one line."""
    import torch

    if model.startswith("torchvision:"):
        import torchvision

        name = model.split(":", 1)[1]
        if name not in torchvision.models.list_models(module=torchvision.models):
            raise ValueError(f"--model {name}: not a torchvision classification model (torchvision.models.list_models)")
        extra = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
        net = torchvision.models.get_model(name, weights=None, num_classes=CLASSES, **extra)
        side = NATIVE_IMAGE.get(name, IMAGE)
        return net, torch.nn.CrossEntropyLoss(), (BATCH, 3, side, side), CLASSES
    from workloads import WorkloadError
    from workloads.external import load

    try:
        workload = load(model)
    except WorkloadError as exc:
        raise ValueError(str(exc)) from None
    size = workload.size("cpu")
    classes = workload.classes or size.synthetic_classes
    net = workload.build(classes, size.image)
    return net, workload.make_loss(), (BATCH, workload.channels, size.image, size.image), classes


def profile(model: str) -> dict:
    import torch

    from bench.rank.profile import StepProfiler  # torch: loaded once main() has moved the user's prints off stdout

    torch.manual_seed(0)
    net, loss_fn, shape, classes = build(model)
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(*shape)
    labels = torch.randint(0, classes, (shape[0],))
    profiler = StepProfiler(net, lambda: None)
    for step in range(STEPS):
        if step:
            profiler.mark("start")
        optimizer.zero_grad(set_to_none=True)
        out = net(inputs)
        out = out if isinstance(out, torch.Tensor) else out[0]  # models whose training output is a tuple
        if step:
            profiler.mark("forward")
        loss_fn(out, labels).backward()
        if step:
            profiler.mark("backward")
        optimizer.step()
        if step:
            profiler.mark("optimizer")
    summary = profiler.close()
    if summary is None:
        raise ValueError(f"--model {model}: no step could be profiled (a parameter got no gradient)")
    return {
        **summary,
        "model": model,
        "torch": torch.__version__,
        "batch": shape[0],
        "input": list(shape[1:]),
        "parameters": sum(p.numel() for p in net.parameters() if p.requires_grad),
    }


def main(argv: list[str]) -> int:
    return answer_parent(lambda: profile(argv[0]), (ValueError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
