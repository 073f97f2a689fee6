"""What GPU users set (--precision, --channels-last, cudnn.benchmark, Horovod's fp16 compression) and where GPU workers
run (--cpu-bind numa): refused where they cannot run, applied in the one shared training step, stored in the spec,
part of a run's conditions, and read as fp32 from older records. GPU paths cannot run on this machine: their plans
(cudnn.benchmark on, NUMA binding from a sysfs tree) are checked here, their figures are never made up."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.core.records import RunRecord
from bench.core.registry import get_backend
from bench.core.spec import resolve_cpu_bind, resolve_numerics
from bench.rank.numa import gpu_worker_cpus, parse_cpulist, pci_numa_node, sysfs_bus_id
from bench.results.frame import CONDITIONS, pooled_launches, records_to_frame
from conftest import FAST, assert_one_line_error, bench_in_process, bench_json
from factories import train_record, train_spec

# 8 GPUs as nvidia-smi names them: four on each socket of a two-socket machine
BUS_IDS = [f"00000000:{bus:02X}:00.0" for bus in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]


def sysfs_tree(root: Path, gpu_nodes: list[int]) -> Path:
    """A sysfs of 2 NUMA nodes of 16 cores each (hyper-threads listed apart, as the kernel lists them) and 8 GPUs
    whose numa_node files hold `gpu_nodes`."""
    for node, cpulist in ((0, "0-7,16-23\n"), (1, "8-15,24-31\n")):
        folder = root / f"devices/system/node/node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpulist)
    for bus_id, node in zip(BUS_IDS, gpu_nodes, strict=True):
        device = root / "bus/pci/devices" / sysfs_bus_id(bus_id)
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
    return root


# ---------------------------------------------------------------- placement (no GPU needed: sysfs is a tree)
def test_the_kernels_cpulist_and_pci_addresses_are_read_as_sysfs_writes_them():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"  # nvidia-smi's 8-digit domain, upper case
    assert sysfs_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def test_each_gpu_worker_takes_its_share_of_its_gpus_numa_node(tmp_path):
    sysfs = sysfs_tree(tmp_path, [0, 0, 0, 0, 1, 1, 1, 1])
    placed = [gpu_worker_cpus(BUS_IDS, rank, sysfs) for rank in range(8)]
    assert [p.numa_node for p in placed] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [p.cpus for p in placed] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [16, 17, 18, 19],
        [20, 21, 22, 23],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
        [24, 25, 26, 27],
        [28, 29, 30, 31],
    ]
    assert all(p.unbound is None for p in placed)
    # two workers (--gpus 2 on this machine) share node 0's cores between them alone
    assert [gpu_worker_cpus(BUS_IDS[:2], r, sysfs).cpus for r in range(2)] == [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [16, 17, 18, 19, 20, 21, 22, 23],
    ]


def test_a_gpu_whose_numa_node_is_unknown_is_left_unbound_and_says_so(tmp_path):
    sysfs = sysfs_tree(tmp_path, [0, 0, 0, 0, 1, 1, 1, -1])
    unknown = gpu_worker_cpus(BUS_IDS, 7, sysfs)
    assert (unknown.numa_node, unknown.cpus) == (None, None)
    assert "NUMA node is not known" in unknown.unbound and "not bound" in unknown.unbound
    assert pci_numa_node(BUS_IDS[7], sysfs) is None
    # node 1's cores are split among the three workers known to be on it
    assert [gpu_worker_cpus(BUS_IDS, r, sysfs).cpus for r in (4, 5, 6)] == [
        [8, 9, 10, 11, 12],
        [13, 14, 15, 24, 25],
        [26, 27, 28, 29, 30, 31],
    ]
    # a GPU sysfs does not list (another machine's tree) and a GPU torch gave no address for
    assert gpu_worker_cpus(BUS_IDS, 0, tmp_path / "elsewhere").unbound
    assert "PCI address" in gpu_worker_cpus([None, *BUS_IDS[1:]], 0, sysfs).unbound


def test_gpu_workers_are_bound_by_numa_node_by_default_and_cpu_workers_never():
    assert resolve_cpu_bind("auto", "cuda", False, None) == "numa"
    assert resolve_cpu_bind("auto", "cpu", False, None) == "cores"
    assert resolve_cpu_bind("auto", "cuda", False, None, on_this_host=False) == "none"  # a cluster places them


# ---------------------------------------------------------------- numerics: what is planned and refused
def test_cudnn_benchmark_is_on_for_torch_gpu_runs_unless_refused_and_off_on_cpus():
    elastic = get_backend("elastic")
    assert resolve_numerics(elastic, "cuda", None, None, None) == dict(
        precision="fp32", channels_last=False, cudnn_benchmark=True
    )
    assert resolve_numerics(elastic, "cuda", "fp16", True, True) == dict(
        precision="fp16", channels_last=True, cudnn_benchmark=False
    )
    assert resolve_numerics(elastic, "cpu", "bf16", False, False)["cudnn_benchmark"] is False


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--precision", "fp16"], "--precision fp16 needs a GPU (give --gpus N)"),
        (["--precision", "tf32"], "--precision tf32 needs a GPU"),
        (["--backend", "tf-mwms", "--precision", "bf16"], "the tensorflow backends run fp32"),
        (["--backend", "horovod-tf", "--channels-last"], "the tensorflow backends run fp32"),
        (["--cpu-bind", "numa"], "--cpu-bind numa binds GPU workers"),
        # Horovod 0.28.1's broadcast and allreduce raise on a channels_last tensor (tried: "Tensor is required to be
        # contiguous")
        (["--backend", "horovod", "--channels-last"], "backend horovod: Horovod's collectives take tensors in"),
    ],
)
def test_what_cannot_run_here_is_refused_in_one_line(argv, says, store):
    assert_one_line_error(bench_in_process("run", "--nproc", "2", "--store", store, *argv), says)


# ---------------------------------------------------------------- numerics: stored, shown, compared
def test_records_of_schema_9_read_as_fp32_in_the_default_memory_format():
    data = train_record().to_dict()
    data["schema_version"] = 9
    for name in ("precision", "channels_last", "cudnn_benchmark"):
        del data["spec"][name]
    data["rank_map"] = [{k: v for k, v in row.items() if k not in ("cpus", "numa_node")} for row in data["rank_map"]]
    rec = RunRecord.from_dict(data)
    assert (rec.spec.precision, rec.spec.channels_last, rec.spec.cudnn_benchmark) == ("fp32", False, False)
    assert all(row.cpus is None and row.numa_node is None for row in rec.rank_map)


def test_runs_of_other_numerics_are_never_one_case():
    records = [
        train_record("a", spec_fields={}),
        train_record("b", spec_fields={"precision": "bf16"}),
        train_record("c", spec_fields={"channels_last": True}),
        train_record("d", backend="horovod", spec_fields={"backend_options": {"hvd_compression": "fp16"}}),
        train_record("e", backend="horovod", spec_fields={"backend_options": {"hvd_compression": "none"}}),
    ]
    frame = records_to_frame(records)
    assert "numerics" in CONDITIONS
    assert frame["numerics"].tolist() == [
        "fp32",
        "bf16 autocast",
        "fp32, channels-last",
        "fp32, --hvd-compression fp16",
        "fp32",
    ]
    # a, fp32 elastic, and e, horovod without compression, are under the same conditions; no other two are
    conditions = [tuple(row) for row in frame[CONDITIONS].itertuples(index=False)]
    assert conditions[0] == conditions[4] and len(set(conditions)) == 4
    cases = pooled_launches(frame, [*CONDITIONS, "backend", "world_size"])
    assert sorted(len(runs) for runs in cases.values()) == [1, 1, 1, 1, 1]


# ---------------------------------------------------------------- numerics: the shared step, for real on a CPU
def test_the_shared_step_autocasts_to_bf16_and_converts_to_channels_last():
    import torch

    from bench.rank.training import Numerics, optimizer_step

    def trained(**fields):
        spec = train_spec(**fields)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(5))
        model(torch.zeros(1, 3, 8, 8))
        if spec.channels_last:
            model = model.to(memory_format=torch.channels_last)
        numerics = Numerics(spec, "cpu")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 3])
        seen = []
        model[0].register_forward_hook(lambda m, inp, out: seen.append((inp[0], out.dtype)))
        loss = optimizer_step(model, optimizer, torch.nn.CrossEntropyLoss(), lambda: (x, y), numerics=numerics)
        return model, loss, seen[0]

    fp32, fp32_loss, (_, fp32_dtype) = trained()
    bf16, bf16_loss, (_, bf16_dtype) = trained(precision="bf16")
    assert (fp32_dtype, bf16_dtype) == (torch.float32, torch.bfloat16)
    assert math.isfinite(bf16_loss.item()) and bf16_loss.item() != fp32_loss.item()
    assert not torch.equal(fp32[0].weight, bf16[0].weight)  # the step's gradients came from bf16 arithmetic
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32  # fp32 means fp32
    last, _, (inputs, _) = trained(channels_last=True)
    assert last[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert inputs.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["elastic", "horovod"])
def test_a_two_worker_gloo_run_at_bf16_records_it_and_its_loss_is_finite(backend, store):
    proc, record = bench_json(
        "run", "--backend", backend, "--nproc", 2, "--threads", 1, "--precision", "bf16", "--store", store, *FAST
    )
    assert proc.returncode == 0, proc.stderr
    spec = record["spec"]
    assert (spec["precision"], spec["channels_last"], spec["cudnn_benchmark"]) == ("bf16", False, False)
    assert record["status"] == "ok" and math.isfinite(record["metrics"]["loss_last"])
    # the CPU workers' cores, per rank, in the rank map
    cpus = [row["cpus"] for row in record["rank_map"]]
    assert all(len(c) == 1 for c in cpus) and cpus[0] != cpus[1]
    assert all(row["numa_node"] is None for row in record["rank_map"])


def test_a_cases_title_names_its_numerics_where_they_are_not_plain_fp32():
    from bench.tasks.train.results import replicated_cases

    frame = records_to_frame([train_record("a"), train_record("b", spec_fields={"precision": "bf16"})])
    places = sorted(case.place for case in replicated_cases(frame))
    assert places == ["mnist_mlp, 2 workers of batch 64, cpu", "mnist_mlp, 2 workers of batch 64, cpu, bf16 autocast"]


def test_selfcheck_refuses_numa_binding_its_bare_loops_cannot_match(store):
    proc = bench_in_process("selfcheck", "--nproc", "2", "--cpu-bind", "numa", "--store", store)
    assert_one_line_error(proc, "--cpu-bind numa: the bare loops", "give --cpu-bind none or cores")
