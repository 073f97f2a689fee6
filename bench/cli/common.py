"""What the verbs share: the one-line-error parser, arguments to plain values, stores, exit codes, and
running one spec (a list of specs runs through bench.harness.runner.run_specs)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys

from bench.cli import hints, options
from bench.cli.options import BACKEND_OPTION
from bench.cluster import kubeflow_pod, slurm
from bench.cluster.hosts import (
    check_hosts,
    check_interface_variables,
    parse_link,
    planned_check,
    shape_links,
    unshape_links,
)
from bench.core.cgroups import usable_cpus
from bench.core.codec import record_line
from bench.core.console import note
from bench.core.dryrun import planning
from bench.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, UsageError
from bench.core.hostlist import Host
from bench.core.inputs import terminal_text
from bench.core.records import RunStatus
from bench.core.registry import BACKEND_MODULES, get_backend, get_task
from bench.core.spec import resolve_device
from bench.core.store import Store
from bench.harness.cores import check_lock_folder, set_sharing
from bench.harness.runner import execute, run_specs
from bench.workflows.plan import COMM_KEYS, available_backends
from bench.workflows.plan import comm_options as resolve


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, but a paragraph with an indented line (a verb's examples, the list of verbs) is kept as written;
    other paragraphs are wrapped to the terminal."""

    def _fill_text(self, text, width, indent):
        blocks = text.split("\n\n")
        return "\n\n".join(
            "\n".join(indent + line for line in block.splitlines())
            if any(line.startswith(" ") for line in block.splitlines())
            else super(HelpFormatter, self)._fill_text(block, width, indent)
            for block in blocks
        )


class Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line that says where to look (and, for a mistyped verb, choice or option, or a
    launcher's flag, what was meant: bench.cli.hints), and its help keeps examples as written."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message):
        # the message may quote the command line, or a file it named: its control characters are shown escaped
        print(f"{self.prog}: error: {terminal_text(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)

    def parse_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else [str(a) for a in args]
        hints.check_foreign_flags(self, argv)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:  # said by the command that was given them, with what it takes instead
            command = hints.innermost(self, parsed)
            command.error(hints.unrecognized(self, command, extras))
        return parsed

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, hints.choice_message(action, value))


def add_record_lines(parser, set_by: str) -> None:
    """--record-lines on a verb that runs (bench run, bench fault): each record also printed as a marked line, which
    `bench import -` finds in a log; `set_by` says where bench k8s sets it."""
    options.add(
        parser,
        "--record-lines",
        action="store_true",
        help="also print each run's record on stdout as one marked line, `bench-record sha256=... {...}`, which "
        f"`bench import -` finds in a log (kubectl logs POD | bench import -); {set_by} (off)",
    )


def check_record_lines(args) -> None:
    """--record-lines and --json both print on stdout: one of them."""
    if args.record_lines and args.json:
        raise UsageError("--record-lines with --json: --json prints the record alone on stdout; give one of them")


def examples(*commands: str) -> str:
    """A verb's epilog: its examples, each a command line and, after two spaces and #, what it does
    (tests/test_cli_parser.py parses every one with the real parser)."""
    return "examples:\n" + "\n".join(f"  {command}" for command in commands)


# ---------------------------------------------------------------- before a verb runs anything
def before_runs(args) -> None:
    """What a verb that runs something settles first (bench.cli._carry_out calls it for every verb with the sharing
    options): the interface variables of the environment, checked as --iface is (here for a run on this machine;
    across hosts by bench.harness.runner.execute, once the interface is known), and what its runs do where another
    bench run holds the cores (bench.harness.cores)."""
    scheduler = getattr(args, "scheduler", None)
    across = (
        getattr(args, "hosts", None)
        or getattr(args, "hostfile", None)
        or scheduler == "slurm"
        or (scheduler is None and slurm.in_allocation())
    )
    if not across:
        check_interface_variables(os.environ)
    set_sharing(args.allow_shared, args.cores_timeout)
    check_lock_folder()  # a folder bench may not use is refused before anything is made


# ---------------------------------------------------------------- arguments to plain values
SPEC_OPTIONS = (
    "batch_size",
    "image_size",
    "threads",
    "oversubscribe",
    "inject",
    "inject_delay",
    "warmup_steps",
    "steps_per_window",
    "windows",
    "seed",
    "lr",
    "timeout",
    "check_timeout",
    "data",
    "data_dir",
    "loader",
    "loader_workers",
    "cpu_bind",
    "precision",
    "channels_last",
    "no_cudnn_benchmark",
    "save_params",
    "save_model",
)


def backend_options(args, backends=None) -> dict:
    """The backend options given, by name. With `backends` (the backends that will run), an option that
    belongs to none of them is refused: silently running without it would measure something else."""
    given = {
        k[len(BACKEND_OPTION) :]: v for k, v in vars(args).items() if k.startswith(BACKEND_OPTION) and v is not None
    }
    if backends is not None:
        owned = {opt.name for name in backends for opt in get_backend(name).options}
        for name in given.keys() - owned:
            owner = next(b for b in BACKEND_MODULES if name in {opt.name for opt in get_backend(b).options})
            flag = next(opt.flag for opt in get_backend(owner).options if opt.name == name)
            raise UsageError(
                f"{flag} is an option of backend {owner}, which this command does not run "
                f"({', '.join(backends)}); drop it or include {owner} in --backend"
            )
    return given


def spec_options(args, backends=None) -> dict:
    """The keyword arguments a spec builder takes from what the verb's options gave (absent ones left out);
    `backends`: those that will run, to refuse options of any other (backend_options)."""
    options = {k: getattr(args, k) for k in SPEC_OPTIONS if getattr(args, k, None) is not None}
    if "inject_delay" in options:
        options["step_delay"] = options.pop("inject_delay")
    options["backend_options"] = backend_options(args, backends)
    return options


def cluster_of(args, pods: bool = False) -> dict | None:
    """A run across hosts (--hosts or --hostfile, or the nodes of the Slurm allocation bench runs in): the hosts,
    checked over ssh before anything is planned (bench.cluster.hosts.check_hosts), as spec builders take them; None for
    a run on this machine. With `pods` (bench run), in a pod of a Kubeflow job: the job's pods (pods_cluster)."""
    hosts = getattr(args, "hosts", None) or getattr(args, "hostfile", None)
    place = kubeflow_place(args, hosts, pods)
    if place is not None:
        return pods_cluster(args, place)
    scheduler = slurm_allocation(args, hosts)
    if scheduler is not None:
        hosts = [Host(**h) for h in scheduler["hosts"]]
    elif hosts and getattr(args, "scheduler", None) != "none":
        scheduler = kubeflow_pod.mpijob_launcher([h.name for h in hosts])
        if scheduler is not None:
            note(
                f"bench: in the launcher pod of Kubeflow MPIJob {scheduler['job_id']}: across its workers "
                f"{scheduler['nodelist']} over the operator's ssh key"
            )
    link = getattr(args, "link", None)
    link = parse_link(link) if link is not None else None
    links = getattr(args, "links", None)
    if links is not None:
        if link:
            raise UsageError("give either --link (one link) or --links (the matrix at each), not both")
        links = [None if item.strip() == "unlimited" else parse_link(item) for item in links.split(",") if item.strip()]
        if not links:
            raise UsageError("--links names no link; give RATE[:DELAY] values or unlimited, comma-separated")
    if hosts is None:
        for flag, value in (("--iface", getattr(args, "iface", None)), ("--link", link), ("--links", links)):
            if value:
                raise UsageError(f"{flag} applies to runs across hosts; give --hosts or --hostfile too")
        return None
    if args.hosts and args.hostfile:
        raise UsageError("give either --hosts or --hostfile, not both")
    (nproc_flag, nproc), (gpus_flag, gpus) = world_size_given(args)
    if gpus is not None and nproc is not None:
        raise UsageError(f"give either {nproc_flag} (CPU processes) or {gpus_flag} (one process per GPU), not both")
    if gpus is None and nproc is None and scheduler is not None and scheduler.get("gpus_per_node"):
        gpus = scheduler["gpus_per_node"]  # a job that asked for GPUs runs on them
        note(
            f"bench: the allocation gives each node {gpus} GPU(s): {gpus_flag} {gpus} per node ({nproc_flag} for CPUs)"
        )
    if gpus is not None:  # one process per GPU: a host's slots are its GPUs
        hosts = [Host(h.name, gpus) for h in hosts]
    if planning():
        check = planned_check(hosts, args.iface, gpus)
    else:
        check = check_hosts(hosts, sys.executable, args.iface, gpus)
    shaped = [x for x in (links or [link]) if x]
    if shaped and check.iface == "lo":
        raise UsageError(
            "--link shapes the links between hosts; with one host there is none (its loopback is this whole machine's)"
        )
    for each in [] if planning() else shaped:  # each tried once now: a link that cannot be shaped is refused first
        shape_links([h.name for h in hosts], check.iface, each)
        unshape_links([h.name for h in hosts], check.iface)
    shown = ", ".join(x["rate"] if x else "unlimited" for x in links) if links else (link["rate"] if link else "")
    note(
        f"bench: across {', '.join(f'{h.name} ({h.slots} slot(s))' for h in hosts)}; interface "
        f"{check.iface} ({check.iface_chosen_by})" + (f"; links {shown}" if shown else "")
    )
    if check.gpus:
        note(
            "bench: GPUs: "
            + "; ".join(f"{h} {g['gpus']} (CUDA {g['cuda']}, NCCL {g['nccl']})" for h, g in check.gpus.items())
        )
    return {**check.cluster(hosts), "link": link, "links": links, "scheduler": scheduler, "gpus_per_host": gpus}


def kubeflow_place(args, hosts, allowed: bool) -> kubeflow_pod.PodPlace | None:
    """This pod's place in a Kubeflow job (bench.cluster.kubeflow_pod): asked for with --scheduler kubeflow, or found
    (the operator's PET_NNODES set) by a verb that runs there (`allowed`: bench run); None otherwise."""
    chosen = getattr(args, "scheduler", None)
    if chosen == "kubeflow" and not allowed:
        raise UsageError("--scheduler kubeflow: only bench run joins a Kubeflow job's pods into one run; use bench run")
    if chosen not in (None, "kubeflow") or (chosen is None and (hosts or not allowed or not kubeflow_pod.in_pod())):
        return None
    if hosts:
        raise UsageError(
            "in a Kubeflow job's pods the hosts are the job's pods; drop --hosts/--hostfile, or give --scheduler none "
            "to run on the hosts given"
        )
    place = kubeflow_pod.pod_place()
    if chosen is None:  # said by bench run once the run is checked (pods_cluster's "said")
        place = dataclasses.replace(place, found=True)
    return place


def pods_cluster(args, place: kubeflow_pod.PodPlace) -> dict:
    """The cluster of a run over a Kubeflow job's pods, as spec builders take it: the pods as hosts, each with the
    operator's processes per pod, reached through the job's rendezvous (no ssh, so nothing is checked over it), each
    assumed to have this pod's cores but not known to be separate machines."""
    for flag in ("link", "links"):
        if getattr(args, flag, None):
            raise UsageError(f"--{flag} shapes links over ssh, which a Kubeflow job's pods do not have; drop it")
    (nproc_flag, nproc), (gpus_flag, gpus) = world_size_given(args)
    if gpus is not None and nproc is not None:
        raise UsageError(f"give either {nproc_flag} (CPU processes) or {gpus_flag} (one process per GPU), not both")
    if gpus is not None and gpus != place.nproc_per_node:  # one process per GPU, and the operator's count per pod
        raise UsageError(
            f"{gpus_flag} {gpus}: each pod of this job runs {place.nproc_per_node} process(es) (PET_NPROC_PER_NODE), "
            f"one per GPU; give {gpus_flag} {place.nproc_per_node}"
        )
    slots = len(place.hosts) * place.nproc_per_node
    if nproc is not None and nproc != slots:  # every agent starts the operator's processes per pod: no fewer
        raise UsageError(
            f"{nproc_flag} {nproc}: the job's {len(place.hosts)} pods x {place.nproc_per_node} processes make {slots}; "
            f"drop {nproc_flag} or give {slots}"
        )
    cpus = usable_cpus()  # the pod's CPU limit (its cgroup's quota), not the node's cores it may be scheduled on
    return {
        "hosts": [Host(name, place.nproc_per_node).to_dict() for name in place.hosts],
        "iface": getattr(args, "iface", None),
        "machines": {name: {"id": name, "cpus": cpus} for name in place.hosts},
        "machines_known": False,
        "link": None,
        "links": None,
        "scheduler": place.scheduler,
        "gpus_per_host": gpus,  # the pod's GPUs are not counted here: the kubelet gave it the nvidia.com/gpu asked for
        "pod": place,
        "said": f"bench: in a pod of Kubeflow {place.kind} {place.job} ({len(place.hosts)} pods, nnodes {place.nnodes}"
        + "): "
        + ("leads the run and records it" if place.leads else "joins the run the leading pod records")
        + ("; --scheduler none runs in this pod only" if place.found else ""),
    }


def slurm_allocation(args, hosts) -> dict | None:
    """The Slurm allocation the run spans (bench.cluster.slurm.allocation): asked for with --scheduler slurm, or found
    (SLURM_JOB_ID set) and said so; None otherwise."""
    chosen = getattr(args, "scheduler", None)
    if chosen == "none" or (chosen is None and (hosts or not slurm.in_allocation())):
        return None
    if hosts:
        raise UsageError(
            "inside a Slurm allocation the hosts are its nodes; drop --hosts/--hostfile, or give "
            "--scheduler none to run on the hosts given"
        )
    allocation = slurm.allocation()
    note(
        f"bench: inside Slurm job {allocation['job_id']} ({allocation['nodelist']})"
        + ("" if chosen else "; --scheduler none runs on this machine only")
    )
    return allocation


def world_size_given(args) -> tuple[tuple[str, int | None], tuple[str, int | None]]:
    """(flag, value) of the world size on CPUs and on GPUs of a verb's arguments: --nproc and --gpus (one run's world
    size), or a sweep's --max-nproc and --max-gpus (its largest)."""
    if hasattr(args, "max_nproc"):
        return ("--max-nproc", args.max_nproc), ("--max-gpus", args.max_gpus)
    return ("--nproc", getattr(args, "nproc", None)), ("--gpus", getattr(args, "gpus", None))


@contextlib.contextmanager
def said_in_flags_of(args):
    """A refusal that names the world size flags (--nproc, --gpus) said in this verb's: a sweep's are --max-nproc and
    --max-gpus, its largest world size."""
    try:
        yield
    except UsageError as exc:
        if not hasattr(args, "max_nproc"):
            raise
        raise UsageError(re.sub(r"--(nproc|gpus)(?![\w-])", lambda m: f"--max-{m.group(1)}", str(exc))) from None


def world_of(args, cluster: dict | None) -> tuple[str, int]:
    """(device, world size) from the world size options (a sweep's: its largest): on this machine from --nproc /
    --gpus; across hosts the sum of their slots, or --nproc of them."""
    (nproc_flag, nproc), (gpus_flag, gpus) = world_size_given(args)
    if cluster is None:
        if nproc is not None and gpus is not None:
            raise UsageError(f"give either {nproc_flag} (CPU processes) or {gpus_flag} (one process per GPU), not both")
        if gpus is not None and (planning() or getattr(args, BACKEND_OPTION + "ray_address", None)):
            # the GPUs are a Ray cluster's, or a dry run's as given: not this machine's to count
            return "cuda", gpus
        with said_in_flags_of(args):
            return resolve_device(nproc, gpus)
    if cluster.get("gpus_per_host"):  # every host's GPUs, one process each (cluster_of made them its slots)
        return "cuda", cluster["gpus_per_host"] * len(cluster["hosts"])
    slots = sum(h["slots"] for h in cluster["hosts"])
    if nproc is not None and nproc > slots:
        raise UsageError(f"{nproc_flag} {nproc}: the hosts have {slots} slot(s); lower {nproc_flag} or give more slots")
    return "cpu", nproc or slots


def comm_options(args) -> dict:
    """The communication sweep's options (bench.workflows.plan.comm_options) from a verb's arguments."""
    return resolve({k: getattr(args, k) for k in COMM_KEYS})


def chosen_backends(
    text: str | None,
    every,
    *,
    device: str | None,
    verb: str,
    default=None,
    cluster: dict | None = None,
    world: int | None = None,
) -> list[str]:
    """--backend as the backends to run, in order: those named (`default` when none is given); with all, every one of
    `every` that can run on `device` here, and across the hosts of `cluster` its `world` processes would span, each
    one skipped said (every one, for a verb that runs nothing: predict)."""
    if options.is_all(text):
        if device is None:
            return list(every)

        def skipped(name: str, why: str) -> None:
            note(f"bench {verb}: skipping {name}: {why}")

        found = []
        for name in available_backends(device, skipped, every):
            why = one_host_problem(name, cluster, world)
            if why is None:
                found.append(name)
            else:
                skipped(name, why)
        if not found:
            raise UsageError(f"--backend all: none of {', '.join(every)} can run here; `bench doctor` says why")
        return found
    return options.chosen(text, every, default)


def one_host_problem(name: str, cluster: dict | None, world: int | None) -> str | None:
    """Why backend `name` cannot start `world` processes across the hosts of `cluster` (its launcher starts them on
    one host, and they fill the slots of more), or None."""
    backend = get_backend(name)
    if cluster is None or world is None or backend.launcher.spans_hosts:
        return None
    hosts = [Host(**h) for h in cluster["hosts"]]
    used = backend.host_plan(hosts, world, backend.resolve_options({}, world, cluster["hosts"]))
    if len(used) <= 1:
        return None
    return f"it starts its processes on one host, and {world} of them fill the slots of {len(used)} hosts"


def comma_list(text: str | None) -> list[str] | None:
    """A comma-separated list of names, or None when not given."""
    return [name for name in text.split(",") if name] if text else None


# ---------------------------------------------------------------- stores and output
def open_store(path: str | None, runs: bool = False):
    """The store at `path` (default $BENCH_STORE, else results/bench.sqlite); with `runs`, for a verb that will
    run something, refused now if it could not take their records (nothing is created yet)."""
    store = Store(path)
    if runs:
        store.check_usable()
    return store


def status_exit(statuses: list[str]) -> int:
    if RunStatus.INTERRUPTED in statuses:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(s == RunStatus.OK for s in statuses) else EXIT_RUN_FAILED


def print_json(value) -> None:
    print(json.dumps(value, indent=1))


# ---------------------------------------------------------------- running
def printed(record, as_json: bool, record_lines: bool) -> None:
    """A run's summary, or its record as JSON; and with record_lines its record as one marked line after it."""
    if as_json:
        print_json(record.to_dict())
    else:
        # a failed run's error is its workload's exception: shown with its control characters escaped
        print("\n".join(map(terminal_text, record.task.summary_lines(record))), flush=True)
    if record_lines:
        print(record_line(record.to_dict()), flush=True)


def run_one(
    spec, store_path: str | None, as_json: bool, verb: str, show_progress: bool = True, record_lines: bool = False
) -> int:
    """Describe, execute and store one spec; print its record (as_json) or its summary, and with record_lines its
    record as a marked line (bench.core.codec.record_line); exit by its status."""
    task = _task(spec)
    store = open_store(store_path)
    store.check_writable()  # a store or run directory that cannot be written is the one line said, not a second
    note(f"bench {verb}: {task.describe(spec)}")
    record = execute(spec, store, show_progress=show_progress)
    printed(record, as_json, record_lines)
    note(f"stored run {record.run_id} in {store.path}")
    return status_exit([record.status])


def run_each(
    specs: list,
    store_path: str | None,
    as_json: bool,
    verb: str,
    show_progress: bool = True,
    record_lines: bool = False,
) -> int:
    """One spec as run_one runs it; several (--backend a,b or --workload a,b of a verb that runs one) each in turn,
    through run_specs, each run's summary (and marked line) printed as it ends; --json: the list of their records.
    Exit by their statuses."""
    if len(specs) == 1:
        return run_one(specs[0], store_path, as_json, verb, show_progress, record_lines)
    records = run_specs(
        specs,
        open_store(store_path, runs=True),
        f"bench {verb}",
        show_progress=show_progress,
        on_record=None if as_json else lambda r: printed(r, False, record_lines),
    )
    if as_json:
        print_json([r.to_dict() for r in records])
    return status_exit([r.status for r in records])


def _task(spec):
    return get_task(spec.task)


def report_page():
    """bench.report.page, imported when a command makes a page: half a second of the start of every bench command,
    most of which make none."""
    from bench.report import page  # here, not at the top: numpy and the scaling model, in every command's start

    return page
