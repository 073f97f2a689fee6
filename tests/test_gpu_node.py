"""What a GPU node is made of, and its GPUs' use through a run (bench.core.gpu_node, bench.harness.gpu_sampler,
bench.report.gpu_nodes): the tools' text parsed as their documentation lays it out, a host without GPU recorded as
such (this machine, for real), a missing or failing tool recorded with its reason, and what the page shows.

The nvidia-smi fixtures are written by hand from the documented formats (`nvidia-smi topo -m`'s matrix and legend,
`--query-gpu ... --format=csv,noheader,nounits`); their figures are layout, not measurements. Where a test needs
nvidia-smi to run, a script on PATH answers in its format: the collector's own subprocesses run for real."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from bench.cluster.hosts import gpu_nodes
from bench.core.environment import fingerprint
from bench.core.gpu_node import (
    hardware_facts,
    interconnect,
    node_facts,
    parse_cuda_version,
    parse_ib_rate,
    parse_query_gpu,
    parse_sample_line,
    parse_topology,
    read_network_devices,
    unseen_gpus_words,
    usage_summary,
)
from bench.core.records import SCHEMA_VERSION, RunRecord
from bench.harness.gpu_sampler import GpuSampler, measured_span, sampling_problem, usage
from bench.report.gpu_nodes import gpu_node_blocks, gpu_scope
from bench.report.page import environment_section, scope_line
from bench.results.frame import records_to_frame
from conftest import ROOT, assert_one_line_error, bench
from factories import ENVIRONMENT, blocks_text, rank_result, train_output, train_record

# `nvidia-smi topo -m` on a node of 8 GPUs, each pair over 18 bonded NVLinks, with two InfiniBand NICs
NVLINK_8 = "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
for _i in range(8):
    _cells = ["X" if j == _i else "NV18" for j in range(8)] + ["PXB" if _i < 4 else "SYS", "SYS" if _i < 4 else "PXB"]
    NVLINK_8 += f"GPU{_i}\t" + "\t".join(f" {c} " if c == "X" else c for c in _cells)
    NVLINK_8 += "\t0-55,112-167\t0\t\tN/A\n" if _i < 4 else "\t56-111,168-223\t1\t\tN/A\n"
NVLINK_8 += "NIC0\t" + "\t".join(["PXB"] * 4 + ["SYS"] * 4) + "\t X \tSYS\n"
NVLINK_8 += "NIC1\t" + "\t".join(["SYS"] * 4 + ["PXB"] * 4) + "\tSYS\t X \n"
NVLINK_8 += """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""

# a PCIe node: 4 GPUs, two on each CPU socket, no NVLink, no NIC
PCIE_4 = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tPIX\tSYS\tSYS\t0-15\t0\t\tN/A
GPU1\tPIX\t X \tSYS\tSYS\t0-15\t0\t\tN/A
GPU2\tSYS\tSYS\t X \tNODE\t16-31\t1\t\tN/A
GPU3\tSYS\tSYS\tNODE\t X \t16-31\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

QUERY_8 = "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559, 550.54.15, 00000000:{0x18 + i:02X}:00.0\n" for i in range(8))
BANNER = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_the_matrix_of_an_8_gpu_nvlink_node():
    topology = parse_topology(NVLINK_8)
    assert topology["gpus"] == [f"GPU{i}" for i in range(8)]
    assert len(topology["pairs"]) == 28 and {p["link"] for p in topology["pairs"]} == {"NV18"}
    assert topology["pairs"][0] == {"a": "GPU0", "b": "GPU1", "link": "NV18"}
    assert topology["nics"] == [{"nic": "NIC0", "name": "mlx5_0"}, {"nic": "NIC1", "name": "mlx5_1"}]
    assert interconnect(topology) == "NVLink (NV18, all 28 pairs)"


def test_the_matrix_of_a_pcie_node():
    topology = parse_topology(PCIE_4)
    links = {(p["a"], p["b"]): p["link"] for p in topology["pairs"]}
    assert links == {
        ("GPU0", "GPU1"): "PIX",
        ("GPU0", "GPU2"): "SYS",
        ("GPU0", "GPU3"): "SYS",
        ("GPU1", "GPU2"): "SYS",
        ("GPU1", "GPU3"): "SYS",
        ("GPU2", "GPU3"): "NODE",
    }
    assert topology["nics"] == []
    assert interconnect(topology) == "PCIe (NODE 1, PIX 1, SYS 4)"


def test_the_matrix_of_a_one_gpu_node_and_of_an_older_driver():
    one = parse_topology("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-63\t0\t\tN/A\n")
    assert one == {"gpus": ["GPU0"], "pairs": [], "nics": []} and interconnect(one) == "one GPU"
    # older drivers named the NICs' columns by device and wrote SOC for a path across sockets
    old = parse_topology(
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\nGPU0\t X \tSOC\tPHB\t0-11\nGPU1\tSOC\t X \tSOC\t12-23\n"
        "mlx5_0\tPHB\tSOC\t X \t\n"
    )
    assert old["pairs"] == [{"a": "GPU0", "b": "GPU1", "link": "SOC"}]
    assert old["nics"] == [{"nic": "mlx5_0", "name": "mlx5_0"}]


def test_a_matrix_that_is_not_one_is_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="no matrix header"):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(ValueError, match="no matrix row for GPU1"):
        parse_topology("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n")
    with pytest.raises(ValueError, match="not an entry of the legend"):
        parse_topology("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tQQ\t0-7\nGPU1\tQQ\t X \t0-7\n")


def test_query_gpu_csv_and_the_banner():
    rows = parse_query_gpu(QUERY_8 + "\n")
    assert len(rows) == 8
    assert rows[3] == {
        "index": "3",
        "name": "NVIDIA H100 80GB HBM3",
        "memory.total": "81559",
        "driver_version": "550.54.15",
        "pci.bus_id": "00000000:1B:00.0",
    }
    assert parse_query_gpu("0, Tesla T4, [N/A], 535.104.05, 00000000:00:1E.0")[0]["memory.total"] is None
    with pytest.raises(ValueError, match="expected 5 values"):
        parse_query_gpu("0, Tesla T4")
    assert parse_cuda_version(BANNER) == "12.4"
    assert parse_cuda_version("no banner") is None


def sysfs_port(root: Path, device: str, port: str, rate: str, link_layer: str, state: str) -> None:
    folder = root / device / "ports" / port
    folder.mkdir(parents=True)
    for name, text in (("rate", rate), ("link_layer", link_layer), ("state", state)):
        (folder / name).write_text(text + "\n")


def test_an_infiniband_hca_and_a_roce_device(tmp_path):
    sysfs_port(tmp_path, "mlx5_0", "1", "100 Gb/sec (4X EDR)", "InfiniBand", "4: ACTIVE")
    sysfs_port(tmp_path, "mlx5_1", "1", "25 Gb/sec (1X EDR)", "Ethernet", "1: DOWN")
    assert read_network_devices(tmp_path) == [
        {
            "device": "mlx5_0",
            "port": "1",
            "rate": "100 Gb/sec (4X EDR)",
            "rate_gbps": 100.0,
            "link_layer": "InfiniBand",
            "kind": "InfiniBand",
            "state": "4: ACTIVE",
        },
        {
            "device": "mlx5_1",
            "port": "1",
            "rate": "25 Gb/sec (1X EDR)",
            "rate_gbps": 25.0,
            "link_layer": "Ethernet",
            "kind": "RoCE",
            "state": "1: DOWN",
        },
    ]
    assert parse_ib_rate("200 Gb/sec (4X HDR)") == 200.0 and parse_ib_rate("unknown") is None
    assert read_network_devices(tmp_path / "absent") == []


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi: not a host without GPU")
def test_this_machine_without_gpu_records_no_gpu_and_why_nvidia_smi_is_not_there():
    hardware_facts.cache_clear()
    node = fingerprint({"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1"})[
        "gpu_nodes"
    ][0]
    assert node["status"] == "no GPU" and node["gpus"] == []
    assert node["tool"] == {"available": False, "reason": "nvidia-smi not found on PATH"}
    assert node["nccl_variables"] == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert gpu_scope([train_record(environment={**ENVIRONMENT, "gpu_nodes": [node]})]) is None


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """A `nvidia-smi` on PATH that answers as the 8-GPU node's would (or exits with `fail`, as one whose driver is
    gone does); the facts cached by an earlier test are cleared."""

    def install(fail: int = 0) -> Path:
        folder = tmp_path / "bin"
        folder.mkdir()
        for name, text in (("query", QUERY_8), ("banner", BANNER), ("topo", NVLINK_8)):
            (folder / name).write_text(text)
        script = folder / "nvidia-smi"
        script.write_text(
            "#!/bin/sh\n"
            + (
                f"echo 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2; exit {fail}\n"
                if fail
                else ""
            )
            + f'case "$1" in --query-gpu=*) cat {folder}/query ;; topo) cat {folder}/topo ;;'
            + f" *) cat {folder}/banner ;; esac\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        hardware_facts.cache_clear()
        return script

    yield install
    hardware_facts.cache_clear()


def test_a_gpu_node_described_by_its_nvidia_smi(fake_nvidia_smi):
    fake_nvidia_smi()
    node = node_facts({"NCCL_IB_HCA": "mlx5_0"}, host="gpu1")
    assert node["status"] == "GPUs" and len(node["gpus"]) == 8
    assert node["gpus"][7] == {
        "index": 7,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559,
        "pci_bus_id": "00000000:1F:00.0",
    }
    assert (node["driver"], node["cuda"]) == ("550.54.15", "12.4")
    assert node["nccl"] is None  # torch here has no CUDA: its NCCL version is not known, not made up
    assert node["topology"]["available"] and len(node["topology"]["pairs"]) == 28
    assert node["nccl_variables"] == {"NCCL_IB_HCA": "mlx5_0"}


def test_a_failing_nvidia_smi_is_recorded_with_its_reason(fake_nvidia_smi):
    fake_nvidia_smi(fail=9)
    node = node_facts({}, host="gpu1")
    assert node["status"] == "no GPU"  # this machine's driver shows no GPU either
    assert node["tool"]["available"] is False
    assert "exited 9: NVIDIA-SMI has failed" in node["tool"]["reason"]


def test_sample_lines_and_their_summary_over_the_measured_span():
    t0 = time.mktime(time.strptime("2026/12/02 21:15:44", "%Y/%m/%d %H:%M:%S"))
    lines = [
        "2026/12/02 21:15:44.000, 0, 10, 1000",
        "2026/12/02 21:15:45.000, 0, 90, 30000",
        "2026/12/02 21:15:45.000, 1, [N/A], 500",
        "2026/12/02 21:15:46.000, 0, 70, 31000",
        "2026/12/02 21:15:50.000, 0, 100, 80000",  # after the span
        "garbage",
    ]
    samples = [s for s in map(parse_sample_line, lines) if s is not None]
    assert len(samples) == 5 and samples[0] == (t0, 0, 10.0, 1000.0) and samples[2][2] is None
    assert usage_summary(samples, t0 + 0.5, t0 + 2.5) == [
        {"index": 0, "samples": 2, "util_mean_pct": 80.0, "util_max_pct": 90.0, "memory_max_mib": 31000.0},
        {"index": 1, "samples": 1, "util_mean_pct": None, "util_max_pct": None, "memory_max_mib": 500.0},
    ]


def test_the_sampler_reads_nvidia_smi_in_its_own_process_and_summarises_the_span(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    # two samples stamped now, in nvidia-smi's layout, then it keeps running as `-lms` does until stopped
    script.write_text(
        "#!/bin/sh\n"
        'now=$(date +"%Y/%m/%d %H:%M:%S.%N" | cut -c1-23)\n'
        'echo "$now, 0, 40, 2048"\necho "$now, 0, 60, 4096"\nexec sleep 60\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    begun = time.time() - 1
    sampler = GpuSampler(interval_s=0.1).start()
    assert sampler.via == "nvidia-smi"  # nvidia-ml-py is not installed here
    for _ in range(100):
        if len(sampler.samples) == 2:
            break
        time.sleep(0.05)
    sampler.stop()
    assert sampler._proc is not None and sampler._proc.poll() is not None  # reaped
    results = [rank_result(0, 1, train_output([1.0]))]
    results[0].times.first_step_end, results[0].times.end = begun, time.time() + 1
    spec = train_record(spec_fields={"device": "cuda"}).spec
    stored = usage(sampler, sampling_problem(spec, [{"status": "GPUs"}]), results, "gpu1")
    assert stored["sampled"] and stored["via"] == "nvidia-smi" and stored["host"] == "gpu1"
    assert stored["gpus"] == [
        {"index": 0, "samples": 2, "util_mean_pct": 50.0, "util_max_pct": 60.0, "memory_max_mib": 4096.0}
    ]


def test_what_is_not_sampled_says_why():
    cpu, cuda = train_record().spec, train_record(spec_fields={"device": "cuda"}).spec
    assert sampling_problem(cpu, [{"status": "GPUs"}]) == "a CPU run"
    assert sampling_problem(cuda, [{"status": "no GPU"}]) == "no GPU to sample on this host (no GPU)"
    assert usage(None, "a CPU run", [], "h") == {"sampled": False, "reason": "a CPU run"}
    results = [rank_result(0, 1, train_output([1.0]))]
    assert measured_span(results) == (results[0].times.first_step_end, results[0].times.end)
    idle = GpuSampler()
    idle.via = "nvidia-smi"
    assert usage(idle, None, results, "h") == {
        "sampled": False,
        "reason": "no sample (nvidia-smi) fell within the measured span",
    }


def test_a_host_that_does_not_answer_is_recorded_as_not_available():
    nodes = gpu_nodes(["no-such-host.invalid"], "python3", {"NCCL_DEBUG": "WARN", "PATH": "/bin"})
    assert nodes[0]["host"] == "no-such-host.invalid" and nodes[0]["status"] == "not available"
    assert nodes[0]["reason"].startswith("no answer: ")
    assert nodes[0]["nccl_variables"] == {"NCCL_DEBUG": "WARN"}


def test_a_v9_record_reads_as_not_looked_at_and_not_sampled():
    data = train_record().to_dict()
    data.pop("gpu_usage")
    data["schema_version"] = 9
    rec = RunRecord.from_dict(data)
    assert rec.schema_version == SCHEMA_VERSION == 10
    assert rec.environment["gpu_nodes"] is None
    assert rec.gpu_usage == {"sampled": False, "reason": "recorded before bench sampled"}
    assert RunRecord.from_dict(rec.to_dict()).gpu_usage == rec.gpu_usage
    data = rec.to_dict()
    data.pop("gpu_usage")
    with pytest.raises(Exception, match="missing field gpu_usage"):
        RunRecord.from_dict(data)


def nvlink_node() -> dict:
    return {
        "host": "gpu1",
        "status": "GPUs",
        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in range(8)],
        "driver": "550.54.15",
        "cuda": "12.4",
        "nccl": "2.21.5",
        "topology": {"available": True, **parse_topology(NVLINK_8)},
        "network": [
            {"device": "mlx5_0", "port": "1", "kind": "InfiniBand", "rate_gbps": 100.0, "state": "4: ACTIVE"},
            {"device": "mlx5_1", "port": "1", "kind": "RoCE", "rate_gbps": 25.0, "state": "4: ACTIVE"},
        ],
        "nccl_variables": {"NCCL_IB_HCA": "mlx5_0"},
    }


def test_the_page_shows_each_gpu_node_its_use_and_its_scope():
    used = {
        "sampled": True,
        "via": "NVML",
        "host": "gpu1",
        "interval_s": 0.5,
        "span_s": 12.0,
        "gpus": [{"index": 0, "samples": 24, "util_mean_pct": 81.2, "util_max_pct": 99.0, "memory_max_mib": 30100.0}],
    }
    gpu_run = train_record("g1", spec_fields={"device": "cuda"}, gpu_usage=used)
    gpu_run.environment = {**ENVIRONMENT, "gpu_nodes": [nvlink_node()]}
    unsampled = train_record("g2", spec_fields={"device": "cuda"}, gpu_usage={"sampled": False, "reason": "no tool"})
    unsampled.environment = {**ENVIRONMENT, "gpu_nodes": [nvlink_node()]}
    text = blocks_text(environment_section([gpu_run, unsampled]).blocks)
    for said in (
        "GPU nodes",
        "8 x NVIDIA H100 80GB HBM3 (81559 MiB)",
        "NVLink (NV18, all 28 pairs)",
        "mlx5_0 port 1: InfiniBand, 100 Gb/s, 4: ACTIVE; mlx5_1 port 1: RoCE, 25 Gb/s, 4: ACTIVE",
        "NCCL_IB_HCA=mlx5_0",
        "2.21.5",
        "NVLink, 18 bonded link(s)",
        "gpu1 GPU 0",
        "81",
        "30100",
        "NVML every 0.5 s over 12.0 s",
        "not sampled: no tool",
    ):
        assert said in text, said
    scope = scope_line(records_to_frame([gpu_run]))
    assert (
        "GPU data: gpu1: 8 x NVIDIA H100 80GB HBM3 (81559 MiB), NVLink (NV18, all 28 pairs), "
        "1 InfiniBand port(s) at 100 Gb/s, 1 RoCE port(s) at 25 Gb/s. Not covered:"
    ) in scope


def test_runs_recorded_before_bench_looked_add_nothing_to_the_page():
    old = train_record(spec_fields={"device": "cuda"})
    old.environment = {**ENVIRONMENT, "gpu_nodes": None}
    assert gpu_node_blocks([old]) == [] and gpu_scope([old]) is None
    assert "GPU data" not in scope_line(records_to_frame([old]))


# ---------------------------------------------------------------- GPUs that nvidia-smi lists and torch does not see
def test_gpus_torch_cannot_see_name_the_driver_and_the_one_torchs_cuda_needs(tmp_path):
    """This machine's torch sees no GPU, as on a node whose driver is older than its CUDA needs: with an nvidia-smi
    that lists 8 GPUs on driver 550 (CUDA 12.4 at most), --gpus is refused in one line naming both versions."""
    import torch

    from bench.core.gpu_node import MIN_DRIVER_OF_CUDA

    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("query", QUERY_8), ("banner", BANNER)):
        (folder / name).write_text(text)
    script = folder / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in --query-gpu=*) cat {folder}/query ;; topo) exit 3 ;; *) cat {folder}/banner ;; esac\n'
    )
    script.chmod(0o755)
    proc = bench(
        "run", "--gpus", 2, "--store", tmp_path / "s.sqlite", env={"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    )
    line = assert_one_line_error(
        proc, "--gpus 2: this machine has no CUDA device torch can use (nvidia-smi lists 8 GPU(s), driver 550.54.15"
    )
    assert line.endswith("; use --nproc 2 to run 2 CPU processes over gloo")
    if torch.version.cuda is None:
        assert f"torch {torch.__version__} is built without CUDA" in line
    else:
        needed = MIN_DRIVER_OF_CUDA[int(torch.version.cuda.split(".")[0])]
        if needed > 550:
            assert "(it supports CUDA 12.4 at most)" in line
            assert f"built for CUDA {torch.version.cuda}, which needs driver {needed} or later" in line
    assert not (tmp_path / "s.sqlite").exists()


def test_what_the_versions_say_of_gpus_torch_cannot_see():
    assert unseen_gpus_words(8, "575.57.08", "12.9", "2.14.1+cu130", "13.0") == (
        "nvidia-smi lists 8 GPU(s), driver 575.57.08 (it supports CUDA 12.9 at most), but torch 2.14.1+cu130 is built "
        "for CUDA 13.0, which needs driver 580 or later: upgrade the driver, or install a torch built for the CUDA the "
        "driver supports"
    )
    assert unseen_gpus_words(8, "580.65.06", "13.0", "2.14.1+cu130", "13.0").startswith(
        "nvidia-smi lists 8 GPU(s), driver 580.65.06, enough for torch 2.14.1+cu130's CUDA 13.0, yet torch sees none: "
    )
    assert unseen_gpus_words(1, "535.54.03", "12.2", "2.14.1+cu126", "12.6").startswith(
        "nvidia-smi lists 1 GPU(s), driver 535.54.03, enough for"
    )
    assert unseen_gpus_words(1, None, None, "2.14.1+cu130", "13.0").startswith(
        "nvidia-smi lists 1 GPU(s), driver of unknown version, yet torch 2.14.1+cu130 (CUDA 13.0) sees none: "
    )
    assert unseen_gpus_words(2, None, None, "2.14.1+cpu", None) == (
        "nvidia-smi lists 2 GPU(s), driver of unknown version, but torch 2.14.1+cpu is built without CUDA: install a "
        "CUDA build of torch"
    )


# ---------------------------------------------------------------- nox -s bench on a GPU machine
def nox_function(name: str):
    """A function of noxfile.py, run as nox runs it (it imports what it needs itself), without nox."""
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    space: dict = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "noxfile.py", "exec"), space)
    return space[name], ast.unparse(next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "bench"))


def test_nox_bench_installs_the_gpu_extra_where_nvidia_smi_lists_a_gpu(tmp_path, monkeypatch):
    listed, session = nox_function("nvidia_gpu_listed")
    assert "install(session, '[ray,gpu]' if nvidia_gpu_listed() else '[ray]')" in session
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    monkeypatch.setenv("PATH", str(folder))
    assert listed() is False  # no nvidia-smi
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'\nexit 9\n")
    smi.chmod(0o755)
    assert listed() is False
    smi.write_text('#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\nexit 0\n')
    assert listed() is True
