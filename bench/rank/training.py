"""The one training step and the one parameter checksum that every task training a model shares (train, converge,
fault): the same micro-batching, loss scaling and optimizer call, and the same sums to compare replicas by, the
train task's PyTorch side (TorchTraining) and the fault task's (TorchElasticTraining). Loaded only inside a run's
processes; torch is imported where it is used, so that a TensorFlow backend's processes, which read first_non_finite
and ParamSums here, never load it."""

from __future__ import annotations

import math
from typing import Any

from bench.rank.hooks import ElasticTraining, ParamSums, Training
from bench.rank.network import build_model, save_model, save_params


class Numerics:
    """A run's --precision, --channels-last and cudnn.benchmark (docs/method.md, "Numerics"), applied by every PyTorch
    backend's step the same way: TF32 allowed only at tf32, autocast to bf16 or fp16, fp16's gradient scaler, 4-D
    inputs in channels_last memory format (the model is converted where it is built: bench.rank.network)."""

    def __init__(self, spec, device_type: str):
        import torch

        on_tf32 = spec.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = on_tf32
        torch.backends.cudnn.allow_tf32 = on_tf32  # torch allows it by default: fp32 means fp32 here
        torch.backends.cudnn.benchmark = spec.cudnn_benchmark
        self.device_type = device_type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.precision)
        self.channels_last = torch.channels_last if spec.channels_last else None
        self.scaler = torch.amp.GradScaler(device_type) if spec.precision == "fp16" else None

    @property
    def plain(self) -> bool:
        """Whether a step runs as torch runs it by default (fp32 or tf32 tensors, default memory format)."""
        return self.dtype is None and self.channels_last is None

    def forward(self, model, loss_fn, x, y):
        import torch

        if self.channels_last is not None and x.dim() == 4:
            x = x.contiguous(memory_format=self.channels_last)
        if self.dtype is None:
            return loss_fn(model(x), y)
        with torch.autocast(self.device_type, dtype=self.dtype):
            return loss_fn(model(x), y)

    def backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        if hasattr(optimizer, "synchronize") and hasattr(optimizer, "skip_synchronize"):
            # an optimizer that reduces gradients as they are ready (Horovod's): the scaler must read them reduced
            optimizer.synchronize()
            with optimizer.skip_synchronize():
                self.scaler.step(optimizer)
        else:
            self.scaler.step(optimizer)
        self.scaler.update()


def optimizer_step(model, optimizer, loss_fn, next_batch, passes: int = 1, mark=None, numerics: Numerics | None = None):
    """One optimizer step of `passes` micro-batches from next_batch(), each loss scaled by 1/passes so that the
    gradients match one batch of passes x the size; returns the last micro-batch's loss. mark(phase), where given
    (a warm-up step's bench.rank.profile.StepProfiler), is told when the step starts and when each of its parts
    (the first micro-batch's forward and backward, the optimizer) ends. `numerics`: the run's precision and memory
    format (None or plain: torch's defaults, the step as it was before they existed)."""
    if mark:
        mark("start")
    optimizer.zero_grad()  # set_to_none=True, torch's default; Horovod's wrapper takes no argument
    scale = 1.0 / passes
    # the run's numerics where they differ from torch's defaults, else None
    mixed = numerics if numerics is not None and not (numerics.plain and numerics.scaler is None) else None
    for _ in range(passes):
        x, y = next_batch()
        loss = mixed.forward(model, loss_fn, x, y) if mixed else loss_fn(model(x), y)
        if mark:
            mark("forward")
        scaled = loss * scale if passes > 1 else loss
        mixed.backward(scaled) if mixed else scaled.backward()
        if mark:
            mark("backward")
    mixed.step(optimizer) if mixed else optimizer.step()
    if mark:
        mark("optimizer")
    return loss


def param_sums(model) -> ParamSums:
    """The parameter sums of `model` (without its data-parallel wrapper, if it has one)."""
    import torch

    plain = getattr(model, "module", model)
    with torch.no_grad():
        params = [p.detach().double() for p in plain.parameters()]
        return ParamSums(
            count=sum(p.numel() for p in params),
            total=float(sum(p.sum() for p in params)),
            absolute=float(sum(p.abs().sum() for p in params)),
        )


def first_non_finite(checks: list[tuple[int, str, float]], checksum: float, last_step: int) -> dict | None:
    """Where this process first saw a number that is not finite, for its result file (the parent decides the run's
    status from it), or None. `checks` are (step, what, value) in step order, such as a loss the loop already
    brought to the host; the parameters' `checksum` is checked last, at `last_step`. Returns {"what", "step": the
    step whose check saw it (it became non-finite there or earlier), "finite_at": the step of the check before, which
    found it finite (None: there was none; the parameters are checked once), "value"}."""
    finite_at = None
    for step, what, value in checks:
        if not math.isfinite(value):
            return {"what": what, "step": step, "finite_at": finite_at, "value": repr(value)}
        finite_at = step
    if not math.isfinite(checksum):
        return {"what": "parameters", "step": last_step, "finite_at": None, "value": repr(checksum)}
    return None


class TorchTraining(Training):
    """A training run's framework side under the PyTorch backends, for the train task's loop: the seeded model and
    optimizer wrapped by the backend's process group, the worker's batches, one step, and what the loop reads
    afterwards. A backend of another framework gives its own (ProcessGroup.training) with the same methods."""

    def __init__(self, joined, workload):
        from workloads.data.sources import open_batches  # the workloads import torch: here, not at the top
        from workloads.data.timing import TimedBatches

        spec, info, device = joined.spec, joined.info, joined.device
        self.spec, self.device, self.sync = spec, device, joined.sync
        self.numerics = Numerics(spec, device.type)
        model, optimizer = build_model(spec, device)
        self.model, self.optimizer = joined.group.wrap(model, optimizer, spec)
        batches = open_batches(
            spec.data,
            batch=spec.batch_size,
            channels=workload.channels,
            image=spec.image_size,
            classes=spec.num_classes,
            seed=spec.seed,
            rank=info.worker_index,
            world=info.world_size,
            device=device,
            data_dir=spec.data_dir,
            loader=spec.loader,
            loader_workers=spec.loader_workers,
            workload=workload,
        )
        self.timed_input = TimedBatches(batches) if spec.loader == "dataloader" else None
        self.batches = self.timed_input or batches
        self.loss_fn = workload.make_loss()
        self.passes = spec.backward_passes  # micro-batches per optimizer step (the loss scaled to match one big batch)

    def step(self):
        """One optimizer step; returns its loss as the framework holds it (read with value(), outside windows)."""
        return optimizer_step(
            self.model, self.optimizer, self.loss_fn, self.batches.__next__, self.passes, numerics=self.numerics
        )

    def profiled(self):
        """(a bench.rank.profile.StepProfiler on the model, the step that feeds it), for the warm-up."""
        from bench.rank.profile import StepProfiler  # it imports torch, as this class's other parts do

        profiler = StepProfiler(self.model, self.sync)
        return profiler, lambda: optimizer_step(
            self.model, self.optimizer, self.loss_fn, self.batches.__next__, self.passes, profiler.mark, self.numerics
        )

    @staticmethod
    def value(loss) -> float:
        return loss.item()

    @property
    def plain_model(self):
        return getattr(self.model, "module", self.model)  # the model without its data-parallel wrapper

    def param_sums(self) -> ParamSums:
        return param_sums(self.plain_model)

    def save_params(self, path) -> None:
        save_params(self.plain_model, path)

    def save_model(self, path: str) -> str:
        return save_model(self.plain_model, path)

    def device_peak_bytes(self) -> int | None:
        import torch

        return torch.cuda.max_memory_allocated(self.device) if self.spec.device == "cuda" else None

    @staticmethod
    def threads() -> dict:
        import torch

        return {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads()}


class TorchElasticTraining(ElasticTraining):
    """A fault run's framework side under the PyTorch backends, for the fault task's loop (bench/tasks/fault/rank.py):
    the seeded model and optimizer, plain (the backend's elastic mode wraps them: ProcessGroup.elastic_state), one step
    on the batch of a given step number and rank (the same after any restart or rank change: SyntheticBatches.at),
    the parameter checksum a resumed process is checked by, and its parameters saved. A backend of another framework
    gives its own (ProcessGroup.elastic_training) with the same methods. On CPU processes, or on the GPU the group's
    init chose (bench fault --gpus: the process group has joined by then, GroupMember)."""

    def __init__(self, spec, workload):
        import torch

        self.spec, self.workload = spec, workload
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if spec.device == "cuda" else torch.device("cpu")
        )
        self.numerics = Numerics(spec, self.device.type)
        self.model, self.optimizer = build_model(spec, self.device)
        self.loss_fn = workload.make_loss()
        self._batches: dict[int, Any] = {}

    def batch(self, step: int, rank: int):
        """The batch of step `step` for rank `rank`."""
        if rank not in self._batches:
            from workloads.data.memory import SyntheticBatches  # the workloads import torch: here, not at the top

            spec = self.spec
            self._batches[rank] = SyntheticBatches(
                batch=spec.batch_size,
                channels=self.workload.channels,
                image=spec.image_size,
                classes=spec.num_classes,
                seed=spec.seed,
                rank=rank,
                device=self.device,
            )
        return self._batches[rank].at(step)

    def step(self, model, optimizer, step: int, rank: int):
        """Step number `step` (0-based) on rank `rank`, of the model and optimizer as the elastic mode trains them."""
        loss = optimizer_step(model, optimizer, self.loss_fn, lambda: self.batch(step, rank), numerics=self.numerics)
        if self.device.type == "cuda":
            import torch

            # a step is journaled as completed when the GPU has done it, and a collective that cannot finish holds
            # the step that issued it (until NCCL's watchdog ends the process), not a later one
            torch.cuda.synchronize(self.device)
        return loss

    def checksum(self) -> float:
        return param_sums(self.model).total

    def save_params(self, path) -> None:
        save_params(self.model, path)
