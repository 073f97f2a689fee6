"""GPU use sampled on every host of a run (bench.harness.gpu_sampler): the host-side sampler entry, the sampler
started on another host over ssh, and the usage a run across hosts stores and the page shows.

No GPU is here: every `nvidia-smi` below is a script on PATH that answers in `nvidia-smi --query-gpu=... -lms`'s
layout. These tests check the plumbing (processes, pipes, ssh, parsing, summaries, teardown), not a GPU: what a real
driver's nvidia-smi or NVML reports on a GPU node is not run here."""

import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.core.records import RankRow
from bench.harness.gpu_sampler import (
    GpuSampler,
    HostSampler,
    HostsSampling,
    measured_span,
    parse_stream_sample,
    sampling_problem,
    start_sampling,
    usage,
)
from bench.harness.supervisor import TAG_VARIABLE
from bench.report.page import environment_section
from conftest import ROOT, assert_one_line_error, held_test_hosts, processes_of_run
from factories import blocks_text, rank_result, train_output, train_record, train_spec
from needs import needs

# two GPUs sampled every time it is asked (a `-lms` loop), in nvidia-smi's layout, stamped now
LOOPING_SMI = (
    "#!/bin/sh\n"
    "while :; do\n"
    '  now=$(date +"%Y/%m/%d %H:%M:%S.%N" | cut -c1-23)\n'
    '  echo "$now, 0, 40, 2048"\n'
    '  echo "$now, 1, 60, 4096"\n'
    "  sleep 0.1\n"
    "done\n"
)


def fake_smi(folder: Path, text: str = LOOPING_SMI) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(text)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


def gone(tag: str, within_s: float = 10.0) -> list:
    """The processes still carrying `tag` once they had `within_s` to end (none: all ended)."""
    deadline = time.monotonic() + within_s
    while (left := processes_of_run(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def host_entry(tmp_path: Path, tag: str, *args: str) -> subprocess.Popen[str]:
    """`python -m bench.harness.gpu_sampler ARGS` with the fake nvidia-smi first on PATH, its stdin a pipe kept open."""
    env = {
        **os.environ,
        "PATH": f"{fake_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        TAG_VARIABLE: tag,
    }
    env.pop("PYTHONWARNINGS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "bench.harness.gpu_sampler", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def first_lines(proc: subprocess.Popen[str], samples: int = 4) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    while sum(parse_stream_sample(line) is not None for line in lines) < samples:
        line = proc.stdout.readline()
        assert line, f"the sampler ended after {lines}: {proc.stderr.read() if proc.stderr else ''}"
        lines.append(line)
    return lines


# ---------------------------------------------------------------- the host-side entry
@pytest.mark.parametrize("ending", ["stdout closed", "stdin closed", "SIGTERM", "SIGHUP"])
def test_the_host_side_sampler_prints_each_sample_and_ends_with_what_started_it(tmp_path, ending):
    """Each sample a line as nvidia-smi gives it (time, GPU, utilisation, memory); it ends, and its nvidia-smi with
    it, when whoever reads it goes (its stdout closed, its stdin closed: an ssh client that ended) or is signalled."""
    tag = f"sampler-{uuid.uuid4().hex[:8]}"
    begun = time.time() - 1
    proc = host_entry(tmp_path, tag, "0.1")
    lines = first_lines(proc)
    assert "# via nvidia-smi\n" in lines  # nvidia-ml-py is not installed here
    samples = [s for s in map(parse_stream_sample, lines) if s is not None]
    assert {(index, util, memory) for _, index, util, memory in samples} == {(0, 40.0, 2048.0), (1, 60.0, 4096.0)}
    assert all(begun <= when <= time.time() + 1 for when, *_ in samples)  # stamped by this host's clock, now
    assert processes_of_run(tag)  # it, and the nvidia-smi it reads, carry its tag
    assert proc.stdin is not None and proc.stdout is not None
    if ending == "stdout closed":
        proc.stdout.close()
    elif ending == "stdin closed":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGTERM if ending == "SIGTERM" else signal.SIGHUP)
    assert proc.wait(timeout=10) == 0
    assert gone(tag) == []
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_a_host_side_sampler_that_cannot_sample_says_why(tmp_path):
    """An nvidia-smi that fails (a driver gone): the last line says why, exit 1; bad arguments: one line, exit 2."""
    fake_smi(tmp_path / "bin", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.harness.gpu_sampler", "0.1"],
        stdin=subprocess.PIPE,  # kept open: it ends by itself
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    said = proc.stdout.read().splitlines()
    assert proc.wait(timeout=30) == 1
    assert said[-1] == "# stopped: nvidia-smi exited 9 before its first sample"
    bad = subprocess.run(
        [sys.executable, "-m", "bench.harness.gpu_sampler", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert_one_line_error(bad, "usage: python -m bench.harness.gpu_sampler [INTERVAL_S]")


# ---------------------------------------------------------------- what a run across hosts stores and the page shows


def results_on(hosts: list[str]) -> list:
    results = [rank_result(r, len(hosts), train_output([1.0])) for r in range(len(hosts))]
    for result, host in zip(results, hosts):
        result.rank_info = RankRow(**{**result.rank_info.to_dict(), "host": host})
    return results


def test_a_run_across_hosts_stores_each_hosts_gpus_and_why_a_host_was_not_sampled():
    """Two hosts' samples (this host's thread, another's over ssh), a host without GPU and one whose sampler stopped
    before the span's end: each host's GPUs over the one measured span, or why not, and the page shows them."""
    results = results_on(["gpu1", "gpu2", "gpu3", "gpu4"])
    start, end = measured_span(results)
    middle = (start + end) / 2
    local = GpuSampler(interval_s=0.5)
    local.via, local.samples = "NVML", [(middle, 0, 90.0, 30000.0), (middle, 1, 70.0, 20000.0), (end + 5, 0, 1.0, 1.0)]
    remote = HostSampler("gpu2", "python3", {TAG_VARIABLE: "r1"})
    remote.via, remote.samples = "nvidia-smi", [(middle, 0, 50.0, 1000.0), (middle + 0.1, 0, 30.0, 3000.0)]
    lost = HostSampler("gpu4", "python3", {TAG_VARIABLE: "r1"})
    lost.via, lost.samples = "nvidia-smi", [(start + 0.01, 0, 80.0, 500.0)]
    lost.ended_at, lost.reason = middle, "its sampler ended (ssh exited 255): Connection reset"
    sampling = HostsSampling(["gpu1", "gpu2", "gpu3", "gpu4"], here="gpu1", local=local)
    sampling.remote = {"gpu2": remote, "gpu4": lost}
    sampling.skipped["gpu3"] = "no GPU to sample (no GPU)"
    stored = usage(sampling, None, results, "gpu1")
    assert stored["sampled"] and stored["span_s"] == end - start
    assert stored["hosts"] == [
        {
            "host": "gpu1",
            "sampled": True,
            "via": "NVML",
            "interval_s": 0.5,
            "gpus": [
                {"index": 0, "samples": 1, "util_mean_pct": 90.0, "util_max_pct": 90.0, "memory_max_mib": 30000.0},
                {"index": 1, "samples": 1, "util_mean_pct": 70.0, "util_max_pct": 70.0, "memory_max_mib": 20000.0},
            ],
        },
        {
            "host": "gpu2",
            "sampled": True,
            "via": "nvidia-smi",
            "interval_s": 0.5,
            "gpus": [{"index": 0, "samples": 2, "util_mean_pct": 40.0, "util_max_pct": 50.0, "memory_max_mib": 3000.0}],
        },
        {"host": "gpu3", "sampled": False, "reason": "no GPU to sample (no GPU)"},
        {
            "host": "gpu4",
            "sampled": True,
            "via": "nvidia-smi",
            "interval_s": 0.5,
            "gpus": [{"index": 0, "samples": 1, "util_mean_pct": 80.0, "util_max_pct": 80.0, "memory_max_mib": 500.0}],
            "stopped": f"{end - middle:.1f} s before the span's end: its sampler ended (ssh exited 255): "
            "Connection reset",
        },
    ]
    assert stored["note"] == "not sampled: gpu3"
    never = HostsSampling(["gpu2"], remote={"gpu2": HostSampler("gpu2", "python3", {})})
    never.remote["gpu2"].reason = "its sampler ended (ssh exited 255): Permission denied (publickey)"
    assert usage(never, None, results, "gpu1") == {
        "sampled": False,
        "span_s": end - start,
        "hosts": [{"host": "gpu2", "sampled": False, "reason": never.remote["gpu2"].reason}],
        "reason": "no host's GPUs were sampled: gpu2: its sampler ended (ssh exited 255): Permission denied "
        "(publickey)",
    }

    run = train_record("across", spec_fields={"device": "cuda"}, gpu_usage=stored)
    # a run across hosts recorded before every host was sampled: the launching host's GPUs at the top
    old = train_record(
        "older",
        spec_fields={"device": "cuda"},
        gpu_usage={
            "sampled": True,
            "via": "NVML",
            "host": "gpu1",
            "interval_s": 0.5,
            "span_s": 12.0,
            "gpus": [{"index": 0, "samples": 24, "util_mean_pct": 61.0, "util_max_pct": 77.0, "memory_max_mib": 9.0}],
            "note": "sampled on the launching host (gpu1) only; not sampled: gpu2",
            "hosts": [{"host": "gpu1", "sampled": True}, {"host": "gpu2", "sampled": False, "reason": "not this host"}],
        },
    )
    for rec in (run, old):
        rec.environment = {**rec.environment, "gpu_nodes": [{"host": h, "status": "GPUs"} for h in ("gpu1", "gpu2")]}
    text = blocks_text(environment_section([run, old]).blocks)
    for said in (
        "gpu1 GPU 1",
        "gpu2 GPU 0",
        "gpu4 GPU 0",
        "nvidia-smi every 0.5 s over",
        f"its sampler stopped {end - middle:.1f} s before the span's end: its sampler ended (ssh exited 255)",
        "not sampled: no GPU to sample (no GPU)",
        "77",
        "not sampled: not this host",
    ):
        assert said in text, said


def test_a_run_across_hosts_samples_this_host_here_the_others_over_ssh_and_says_why_not(tmp_path, monkeypatch):
    """As the runner starts them from the run's GPU node facts: this host (named as this machine) by a thread here,
    a host with GPUs by a sampler over ssh (one that cannot be reached: why, in ssh's words), a host without GPU or
    whose GPUs are not known not at all."""
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    hosts = ["localhost", "no-such-host.invalid", "cpu1", "dark1"]
    spec = train_spec(device="cuda", hosts=[{"name": h, "slots": 1} for h in hosts])
    nodes = [
        {"host": "localhost", "status": "GPUs"},
        {"host": "no-such-host.invalid", "status": "GPUs"},
        {"host": "cpu1", "status": "no GPU"},
        {"host": "dark1", "status": "not available", "reason": "no answer: Connection timed out"},
    ]
    assert sampling_problem(spec, nodes, hosts) is None
    begun = time.time()
    sampling = start_sampling(spec, nodes, hosts, sys.executable, {TAG_VARIABLE: "r1"})
    try:
        assert isinstance(sampling, HostsSampling) and sampling.here == "localhost"
        assert sampling.local is not None and sampling.local.via == "nvidia-smi"
        assert list(sampling.remote) == ["no-such-host.invalid"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            sampling.remote["no-such-host.invalid"].ended_at and len(sampling.local.samples) >= 2
        ):
            time.sleep(0.1)
    finally:
        sampling.stop()
    results = results_on(hosts[:1])
    results[0].times.first_step_end, results[0].times.end = begun - 1, time.time() + 1
    stored = usage(sampling, None, results, "launcher")
    assert stored["sampled"] and stored["note"] == "not sampled: no-such-host.invalid, cpu1, dark1"
    here, unreached, cpu, dark = stored["hosts"]
    assert here["host"] == "localhost" and [g["index"] for g in here["gpus"]] == [0, 1]
    assert unreached["host"] == "no-such-host.invalid" and not unreached["sampled"]
    assert unreached["reason"].startswith("its sampler ended (ssh exited 255): ")  # then ssh's own words
    assert "no-such-host.invalid" in unreached["reason"]
    assert cpu == {"host": "cpu1", "sampled": False, "reason": "no GPU to sample (no GPU)"}
    assert dark == {
        "host": "dark1",
        "sampled": False,
        "reason": "its GPUs are not known (no answer: Connection timed out)",
    }
    no_gpu = [{"host": h, "status": "no GPU"} for h in hosts]
    assert sampling_problem(spec, no_gpu, hosts) == (
        "no GPU to sample on any of the run's hosts (localhost: no GPU; no-such-host.invalid: no GPU; cpu1: no GPU; "
        "dark1: no GPU)"
    )


# ---------------------------------------------------------------- over ssh, on two test hosts (root)
@pytest.fixture(scope="module")
def two_hosts():
    """Two test hosts for this module, taken down afterwards, also when a test fails; one user of the test hosts
    at a time (the lock test_testhosts.py takes too)."""
    with held_test_hosts(2) as hosts:
        yield hosts


@pytest.mark.slow
@needs("hosts")
def test_a_sampler_on_each_host_over_ssh_streams_its_samples_and_leaves_nothing(two_hosts, tmp_path):
    """start_sampling, as a GPU run across the two hosts starts it (both with GPUs by their facts, neither this
    host), starts a sampler on each over ssh; their samples arrive, each host's own; one stopped as the launcher's
    end stops it, the other's ssh client killed (the launching bench gone): nothing of either is left on the hosts,
    and the usage over a span within the samples is each host's."""
    tag = f"sampled-{uuid.uuid4().hex[:8]}"
    folder = fake_smi(tmp_path / "bin")
    names = [h.address for h in two_hosts]
    spec = train_spec(device="cuda", hosts=[{"name": n, "slots": 1} for n in names])
    nodes = [{"host": n, "status": "GPUs"} for n in names]
    env = {TAG_VARIABLE: tag, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    begun = time.time()
    sampling = start_sampling(spec, nodes, names, sys.executable, env)
    assert isinstance(sampling, HostsSampling) and sampling.local is None and sorted(sampling.remote) == names
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(len(s.samples) >= 4 for s in sampling.remote.values()):
            time.sleep(0.1)
        for host in names:
            remote = sampling.remote[host]
            assert remote.via == "nvidia-smi" and len(remote.samples) >= 4, (host, remote.reason)
            assert {s[1] for s in remote.samples} == {0, 1}
        assert len(processes_of_run(tag)) >= 4  # on each host its sampler and the nvidia-smi it reads
        first, second = (sampling.remote[h] for h in names)
        assert second._proc is not None
        second._proc.kill()  # its ssh client: the remote sampler ends on its stdin's end and the broken pipe
        second._proc.wait()
        first.stop()
        assert gone(tag) == []
        results = results_on(names)
        for result in results:
            result.times.first_step_end, result.times.end = begun, time.time()
        stored = usage(sampling, None, results, "launcher")
        assert [h["host"] for h in stored["hosts"]] == names and stored["sampled"]
        assert all(h["sampled"] and [g["index"] for g in h["gpus"]] == [0, 1] for h in stored["hosts"]), stored
        assert "stopped" not in stored["hosts"][0]  # stopped when asked
        assert second.ended_early() and second.reason.startswith("its sampler ended (ssh exited -9)")
    finally:
        sampling.stop()
        assert gone(tag) == []
