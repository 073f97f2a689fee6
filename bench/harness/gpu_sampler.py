"""GPU utilisation and memory through a run's measured span (docs/method.md, "GPU nodes"), sampled beside the run's
processes, so that nothing of it runs in, or waits on, a training step.

On this host a thread of the parent samples (`GpuSampler`): NVML through `nvidia-ml-py` (`import pynvml`) where it is
importable, else `nvidia-smi --query-gpu=... -lms`. A run across hosts samples every host of the run that has GPUs:
this one so, each other one by `python -m bench.harness.gpu_sampler [INTERVAL_S]` started there over ssh
(`HostSampler`), the same sampler, which prints its samples as they come (one line each: `format_sample`) until its
stdin or stdout closes or it gets SIGTERM or SIGHUP. What a run stores is a summary per GPU over the span from the last
rank's first step (or, for a run with no steps, its joining the group) to the first rank's end: the warm-up and the
timed windows; across hosts, one per host (`hosts`), each host's samples stamped by its own clock, as its ranks' times
are. A run or host that could not be sampled says why ("not sampled": a CPU run, no GPU, no tool, a sampler that
could not start or stopped early).
"""

from __future__ import annotations

import collections
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.cluster.hosts import ssh_command
from bench.core.environment import PROJECT_ROOT
from bench.core.gpu_node import NO_GPU, SAMPLE_FIELDS, parse_sample_line, usage_summary
from bench.core.records import RankResult
from bench.core.spec import RunSpec

SAMPLE_INTERVAL_S = 0.5  # often enough for windows of seconds, rare enough to cost the node nothing measurable
STOP_WAIT_S = 5.0  # beyond one interval: a host's sampler ending when asked (its stdin closed) before ssh is ended
Sample = tuple[float, int, float | None, float | None]  # (time, GPU index, utilisation %, memory used MiB)


def end_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 5 s: a sampler's child (nvidia-smi, an ssh client) ended and waited for."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def not_sampled(why: str) -> dict[str, Any]:
    return {"sampled": False, "reason": why}


class GpuSampler:
    """Samples every GPU of this host from `start` to `stop`; `samples` and `via` afterwards, or `reason` where it
    could not sample. With `on_sample`, each sample is handed to it as it is taken (from the sampler's thread) instead
    of kept."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S, on_sample: Callable[[Sample], object] | None = None):
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.taken = 0
        self.via: str | None = None
        self.reason: str | None = None
        self._on_sample = on_sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None

    def _take(self, sample: Sample) -> None:
        self.taken += 1
        if self._on_sample is None:
            self.samples.append(sample)
        else:
            self._on_sample(sample)

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
            str(max(1, int(self.interval_s * 1000))),
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

    def running(self) -> bool:
        """Whether it is still sampling: false once stopped, or once its tool stopped answering (`reason` says)."""
        return self._thread is not None and self._thread.is_alive()

    def _nvml(self, pynvml: Any, handles: list[Any]) -> None:
        try:
            while not self._stop.is_set():
                now = time.time()
                for index, handle in enumerate(handles):
                    util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
                    self._take((now, index, float(util), used))
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
                self._take(sample)
        returncode = self._proc.wait()
        if not self._stop.is_set():  # it ended by itself: a driver gone, a GPU lost
            first = "" if self.taken else " before its first sample"
            self.reason = self.reason or f"nvidia-smi exited {returncode}{first}"

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            end_process(self._proc)
            if self._proc.returncode not in (0, -15) and not self.taken:
                self.reason = f"nvidia-smi exited {self._proc.returncode} before its first sample"
        if self._thread is not None:
            self._thread.join(timeout=5)


# ---------------------------------------------------------------- a host's samples as a stream of lines
# A sample: "TIME INDEX UTIL MEM" (seconds since the epoch by the host's clock, the GPU's index, utilisation %, memory
# used MiB; "-" for a value the GPU does not report). A line starting "# via " names the tool; "# stopped: WHY" ends a
# sampler that could not start or stopped by itself.
VIA_LINE = "# via "
STOPPED_LINE = "# stopped: "


def format_sample(sample: Sample) -> str:
    when, index, util, memory = sample
    return " ".join([f"{when:.3f}", str(index), *("-" if v is None else f"{v:g}" for v in (util, memory))])


def parse_stream_sample(line: str) -> Sample | None:
    """A sample line of format_sample, or None for a line that is not one."""
    parts = line.split()
    if len(parts) != 4:
        return None
    try:
        when, index = float(parts[0]), int(parts[1])
        util, memory = (None if p == "-" else float(p) for p in parts[2:])
    except ValueError:
        return None
    return (when, index, util, memory) if math.isfinite(when) else None


def host_main(argv: list[str]) -> int:
    """`python -m bench.harness.gpu_sampler [INTERVAL_S]`: sample this host's GPUs and print each sample as it comes,
    flushed; end on SIGTERM or SIGHUP, when stdin closes (an ssh client that ended: give it a pipe or a terminal,
    not /dev/null) or when stdout does (a broken pipe). Exits 0 when ended so, 1 when its sampler could not start or
    stopped by itself (the last line says why), 2 on bad arguments."""
    try:
        if len(argv) > 1:
            raise ValueError
        interval = float(argv[0]) if argv else SAMPLE_INTERVAL_S
        if not (math.isfinite(interval) and 0.01 <= interval <= 3600):
            raise ValueError
    except ValueError:
        print(
            "usage: python -m bench.harness.gpu_sampler [INTERVAL_S] (seconds between samples, 0.01 to 3600)",
            file=sys.stderr,
        )
        return 2
    ended = threading.Event()
    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            if ended.is_set() and line[0] != "#":
                return
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError):
                # nobody reads any more: stdout to /dev/null, so that the interpreter's flush at exit finds no pipe
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                ended.set()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: ended.set())

    def watch_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        ended.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    sampler = GpuSampler(interval, on_sample=lambda s: emit(format_sample(s))).start()
    if sampler.via is None:
        emit(STOPPED_LINE + (sampler.reason or "no sampler could start"))
        return 1
    emit(VIA_LINE + sampler.via)
    while not ended.wait(min(interval, 0.2)):
        if not sampler.running():
            break
    by_itself = not ended.is_set()
    sampler.stop()
    if by_itself:
        emit(STOPPED_LINE + (sampler.reason or f"{sampler.via} stopped"))
        return 1
    return 0


class HostSampler:
    """The host-side sampler run on `host` by `python` over ssh (bench.cluster.hosts.ssh_command: in this checkout,
    importable, with `env`: the run's tag, so that the run's teardown on that host reaps it in any case), its lines
    read as they come. `samples`, `via`; `reason` where it could not start or stopped before it was asked to, at
    `ended_at`."""

    def __init__(self, host: str, python: str, env: dict[str, str], interval_s: float = SAMPLE_INTERVAL_S):
        self.host = host
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.via: str | None = None
        self.reason: str | None = None
        self.ended_at: float | None = None
        self._argv = ssh_command(
            host,
            [python, "-m", "bench.harness.gpu_sampler", f"{interval_s:g}"],
            {"PYTHONPATH": str(PROJECT_ROOT), **env},
            str(PROJECT_ROOT),
        )
        self._stopping = False
        self._stderr: collections.deque[str] = collections.deque(maxlen=3)
        self._proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> HostSampler:
        try:
            # its own session: a Ctrl-C to the terminal is bench's to handle, not ssh's
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            self.reason, self.ended_at = f"ssh could not start: {exc}", time.time()
            return self
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(VIA_LINE):
                self.via = line[len(VIA_LINE) :].strip()
            elif line.startswith(STOPPED_LINE):
                self.reason = line[len(STOPPED_LINE) :].strip()
            else:
                sample = parse_stream_sample(line)
                if sample is not None:
                    self.samples.append(sample)
        returncode = self._proc.wait()
        self.ended_at = time.time()
        if not self._stopping and self.reason is None:
            for thread in self._threads[1:]:
                thread.join(timeout=1)  # its last words
            said = f": {self._stderr[-1]}" if self._stderr else ""
            self.reason = f"its sampler ended (ssh exited {returncode}){said}"

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            if line.strip():
                self._stderr.append(line.strip()[:200])

    def ended_early(self) -> bool:
        return self.ended_at is not None and not self._stopping

    def stop(self) -> None:
        """Close its stdin, on which the host's sampler ends within one interval (as on ssh's end: stdin closed,
        stdout broken); end the ssh client should it not have ended by then."""
        if self._proc is None:
            return
        if self.ended_at is None:
            self._stopping = True
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=self.interval_s + STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            end_process(self._proc)
        for thread in self._threads:
            thread.join(timeout=5)


@dataclass
class HostsSampling:
    """A run across hosts' samplers, by the run's hosts as named (`hosts`): this host's thread where this host is one
    of them (`here`), one HostSampler over ssh on each other host with GPUs, and why each host left out is
    (`skipped`). `unreached`: why the hosts bench does not reach over ssh (a Kubeflow job's other pods) are not
    sampled, for the hosts the ranks name that are not in `hosts`."""

    hosts: list[str]
    here: str | None = None
    local: GpuSampler | None = None
    remote: dict[str, HostSampler] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    unreached: str | None = None

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()
        stopping = [threading.Thread(target=s.stop) for s in self.remote.values()]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()


def start_sampling(
    spec: RunSpec, nodes: list[dict[str, Any]] | None, hosts: list[str], python: str, env: dict[str, str]
) -> GpuSampler | HostsSampling:
    """Start sampling a run that sampling_problem found something to sample in: on one host, this host's sampler;
    across hosts, each host's (HostsSampling). `hosts`: the hosts bench reaches over ssh (none for a Kubeflow pod
    run), `nodes` their GPU node facts in that order (this pod's only, for a Kubeflow pod run)."""
    if not spec.hosts:
        return GpuSampler().start()
    nodes = nodes or []
    here = this_host(nodes, True)
    if not hosts:  # a Kubeflow job's pods: this one only
        name = (here or {}).get("host") or socket.gethostname()
        sampling = HostsSampling(
            [name], unreached="bench reaches no other pod of a Kubeflow job: only the leading pod's GPUs are sampled"
        )
        sampling.here, sampling.local = name, GpuSampler().start()
        return sampling
    sampling = HostsSampling(list(hosts))
    facts = {n.get("host"): n for n in nodes}
    for name in hosts:
        node = facts.get(name) or {}
        status = node.get("status")
        if status != "GPUs":
            why = "no GPU to sample" if status == NO_GPU else "its GPUs are not known"
            sampling.skipped[name] = f"{why} ({node.get('reason') or status or 'not looked at'})"
        elif here is not None and node is here and sampling.local is None:
            sampling.here, sampling.local = name, GpuSampler().start()
        else:
            sampling.remote[name] = HostSampler(name, python, env).start()
    return sampling


def sampling_problem(spec: RunSpec, nodes: list[dict[str, Any]] | None, hosts: list[str] | None = None) -> str | None:
    """Why a run is not sampled (a CPU run, no GPU on this host, or across hosts on any host), or None: sample it.
    `nodes`: the run's GPU node facts, a host each (bench.core.gpu_node.node_facts); `hosts`: the hosts bench reaches
    over ssh (none for a Kubeflow pod run, which samples this pod only)."""
    if spec.device != "cuda":
        return "a CPU run"
    if spec.hosts and hosts:
        with_gpus = [n for n in nodes or [] if n.get("status") == "GPUs"]
        if with_gpus:
            return None
        said = "; ".join(f"{n.get('host')}: {n.get('reason') or n.get('status')}" for n in nodes or [])
        return f"no GPU to sample on any of the run's hosts ({said or 'not looked at'})"
    here = this_host(nodes or [], bool(spec.hosts))
    if here is None:
        return "this host is not one of the run's hosts"
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
    sampler: GpuSampler | HostsSampling | None, problem: str | None, results: list[RankResult], host: str
) -> dict[str, Any]:
    """What a run stores of its GPUs' use: the summary per GPU over its measured span, or why it has none; across
    hosts (a HostsSampling), one per host (usage_across_hosts)."""
    if problem is not None or sampler is None:
        return not_sampled(problem or "not sampled")
    span = measured_span(results)
    if isinstance(sampler, HostsSampling):
        if span is None:
            return not_sampled("no rank ended with its times, so the measured span is not known")
        return usage_across_hosts(sampler, results, span)
    if sampler.via is None:
        return not_sampled(sampler.reason or "no sampler could start")
    if span is None:
        return not_sampled("no rank ended with its times, so the measured span is not known")
    gpus = usage_summary(sampler.samples, *span)
    if not gpus:
        return not_sampled(sampler.reason or f"no sample ({sampler.via}) fell within the measured span")
    return {
        "sampled": True,
        "via": sampler.via,
        "host": host,
        "interval_s": sampler.interval_s,
        "span_s": span[1] - span[0],
        "gpus": gpus,
    }


def host_usage(
    name: str, sampler: GpuSampler | HostSampler, span: tuple[float, float], ended_early: bool
) -> dict[str, Any]:
    """One host's entry: its GPUs over the span, as a run on one host stores them, and, where its sampler stopped
    before the span's end, when and why; or why it has none."""
    if sampler.via is None:
        return {"host": name, **not_sampled(sampler.reason or "its sampler did not start")}
    gpus = usage_summary(sampler.samples, *span)
    stopped_early = ended_early and isinstance(sampler, HostSampler) and (sampler.ended_at or 0) < span[1]
    if not gpus:
        why = sampler.reason if stopped_early or not sampler.samples else None
        return {"host": name, **not_sampled(why or f"no sample ({sampler.via}) fell within the measured span")}
    entry = {"host": name, "sampled": True, "via": sampler.via, "interval_s": sampler.interval_s, "gpus": gpus}
    if stopped_early:
        assert isinstance(sampler, HostSampler) and sampler.ended_at is not None
        entry["stopped"] = f"{span[1] - sampler.ended_at:.1f} s before the span's end: {sampler.reason}"
    return entry


def usage_across_hosts(sampling: HostsSampling, results: list[RankResult], span: tuple[float, float]) -> dict[str, Any]:
    """A run across hosts' use of its GPUs over the measured span, host by host (`hosts`: each host of the run as
    named, with its GPUs' summary, `via` and `interval_s` as a run on one host stores them, or why it was not sampled),
    and a note naming those not sampled. Sampled where any host was; else `reason` gathers each host's why."""
    entries = []
    for name in sampling.hosts:
        if name in sampling.skipped:
            entries.append({"host": name, **not_sampled(sampling.skipped[name])})
        elif name == sampling.here and sampling.local is not None:
            entries.append(host_usage(name, sampling.local, span, ended_early=False))
        elif name in sampling.remote:
            remote = sampling.remote[name]
            entries.append(host_usage(name, remote, span, ended_early=remote.ended_early()))
    if sampling.unreached:
        named = set(sampling.hosts)
        for other in sorted({r.rank_info.host for r in results if r.rank_info.host} - named):
            entries.append({"host": other, **not_sampled(sampling.unreached)})
    sampled = [e["host"] for e in entries if e["sampled"]]
    missed = [e for e in entries if not e["sampled"]]
    out: dict[str, Any] = {"sampled": bool(sampled), "span_s": span[1] - span[0], "hosts": entries}
    if not sampled:
        out["reason"] = "no host's GPUs were sampled: " + "; ".join(f"{e['host']}: {e['reason']}" for e in missed)
    elif missed:
        out["note"] = f"not sampled: {', '.join(e['host'] for e in missed)}"
    return out


if __name__ == "__main__":
    sys.exit(host_main(sys.argv[1:]))
