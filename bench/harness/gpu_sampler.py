"""GPU utilisation and memory through a run's measured span (docs/method.md, "GPU nodes"), sampled by a thread of
the parent while the run's processes run, so that nothing of it runs in, or waits on, a training step.

NVML through `nvidia-ml-py` (`import pynvml`) where it is importable, else `nvidia-smi --query-gpu=... -lms`. What a
run stores is a summary per GPU over the span from the last rank's first step (or, for a run with no steps, its
joining the group) to the first rank's end: the warm-up and the timed windows. A run that could not be sampled says
why ("not sampled": a CPU run, no GPU, no tool).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from typing import Any

from bench.core.gpu_node import SAMPLE_FIELDS, parse_sample_line, usage_summary
from bench.core.records import RankResult
from bench.core.spec import RunSpec

SAMPLE_INTERVAL_S = 0.5  # often enough for windows of seconds, rare enough to cost the node nothing measurable
Sample = tuple[float, int, float | None, float | None]  # (time, GPU index, utilisation %, memory used MiB)


def not_sampled(why: str) -> dict[str, Any]:
    return {"sampled": False, "reason": why}


class GpuSampler:
    """Samples every GPU of this host from `start` to `stop`; `samples` and `via` afterwards, or `reason` where it
    could not sample."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S):
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.via: str | None = None
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> GpuSampler:
        try:
            import pynvml  # optional: the `gpu` extra (nvidia-ml-py)

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # not installed, or no driver for it: nvidia-smi, below
            nvml_why = f"NVML: {type(exc).__name__}: {exc}"
        else:
            self.via = "NVML"
            self._thread = threading.Thread(target=self._nvml, args=(pynvml, handles), daemon=True)
            self._thread.start()
            return self
        argv = [
            "nvidia-smi",
            f"--query-gpu={','.join(SAMPLE_FIELDS)}",
            "--format=csv,noheader,nounits",
            "-lms",
            str(int(self.interval_s * 1000)),
        ]
        try:
            self._proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True
            )
        except OSError as exc:
            self.reason = f"neither NVML ({nvml_why}) nor nvidia-smi ({exc.strerror or exc}) could sample"
            return self
        self.via = "nvidia-smi"
        self._thread = threading.Thread(target=self._smi, daemon=True)
        self._thread.start()
        return self

    def _nvml(self, pynvml: Any, handles: list[Any]) -> None:
        try:
            while not self._stop.is_set():
                now = time.time()
                for index, handle in enumerate(handles):
                    util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
                    self.samples.append((now, index, float(util), used))
                self._stop.wait(self.interval_s)
        except Exception as exc:  # a GPU that stops answering ends the sampling, not the run
            self.reason = f"NVML stopped answering: {exc}"
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass

    def _smi(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_sample_line(line)
            if sample is not None:
                self.samples.append(sample)

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.returncode not in (0, -15) and not self.samples:
                self.reason = f"nvidia-smi exited {self._proc.returncode} before its first sample"
        if self._thread is not None:
            self._thread.join(timeout=5)


def sampling_problem(spec: RunSpec, nodes: list[dict[str, Any]] | None) -> str | None:
    """Why a run is not sampled (a CPU run, no GPU on this host, this host not one of the run's), or None: sample
    it. `nodes`: the run's GPU node facts, a host each (bench.core.gpu_node.node_facts)."""
    if spec.device != "cuda":
        return "a CPU run"
    here = this_host(nodes or [], bool(spec.hosts))
    if here is None:
        return "the launching host, the only one sampled, is not one of the run's hosts"
    if here.get("status") != "GPUs":
        return f"no GPU to sample on this host ({here.get('reason') or here.get('status')})"
    return None


def this_host(nodes: list[dict[str, Any]], across_hosts: bool) -> dict[str, Any] | None:
    """The facts of the host this process runs on: a run on one host has only its own; across hosts, the host
    named as this machine is named (its hostname, or the loopback)."""
    if not across_hosts:
        return nodes[0] if nodes else None
    names = {socket.gethostname(), socket.getfqdn(), "localhost", "127.0.0.1"}
    return next((n for n in nodes if n.get("host") in names), None)


def measured_span(results: list[RankResult]) -> tuple[float, float] | None:
    """From the last rank's first step (or its joining the group, for a run with no steps) to the first rank's end,
    in seconds since the epoch; None where no rank ended with a result."""
    if not results:
        return None
    starts = [r.times.first_step_end or r.times.init_end for r in results]
    start, end = max(starts), min(r.times.end for r in results)
    return (start, end) if end > start else None


def usage(
    sampler: GpuSampler | None, problem: str | None, results: list[RankResult], host: str, across_hosts: bool
) -> dict[str, Any]:
    """What a run stores of its GPUs' use: the summary per GPU over its measured span, or why it has none."""
    if problem is not None or sampler is None:
        return not_sampled(problem or "not sampled")
    if sampler.via is None:
        return not_sampled(sampler.reason or "no sampler could start")
    span = measured_span(results)
    if span is None:
        return not_sampled("no rank ended with its times, so the measured span is not known")
    gpus = usage_summary(sampler.samples, *span)
    if not gpus:
        return not_sampled(sampler.reason or f"no sample ({sampler.via}) fell within the measured span")
    out: dict[str, Any] = {
        "sampled": True,
        "via": sampler.via,
        "host": host,
        "interval_s": sampler.interval_s,
        "span_s": span[1] - span[0],
        "gpus": gpus,
    }
    if across_hosts:
        out.update(across_hosts_sampled(host, results))
    return out


def across_hosts_sampled(host: str, results: list[RankResult]) -> dict[str, Any]:
    """What a run across hosts sampled, host by host: bench samples the GPUs of the host it runs on (`host`, the
    launching one), and no other; the run's hosts are those its ranks reported (rank_info.host). A note says which
    hosts' GPUs were not sampled, and `hosts` lists each with whether it was and, where not, why."""
    ran_on = sorted({r.rank_info.host for r in results if r.rank_info.host})
    others = [h for h in ran_on if h != host]
    hosts = [
        {"host": name, "sampled": True}
        if name == host
        else {
            "host": name,
            "sampled": False,
            "reason": f"bench samples the GPUs of the host it runs on ({host}) only; {name}'s were not sampled",
        }
        for name in ran_on
    ]
    note = f"sampled on the launching host ({host}) only" + (f"; not sampled: {', '.join(others)}" if others else "")
    return {"note": note, "hosts": hosts}
