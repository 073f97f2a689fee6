"""`bench predict`: the scaling model's projection of a case to a cluster that is not here (bench.projection), or,
with --validate, the model against the stored runs across test hosts that it was not fitted on."""

from __future__ import annotations

import math
from dataclasses import replace

from bench.cli import options
from bench.cli.common import chosen_backends, examples, open_store, print_json
from bench.core.console import note as say
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED, UsageError
from bench.core.registry import BACKEND_MODULES, PLAIN_LOOP, get_backend
from bench.projection.clusters import (
    DEFAULT_CLUSTER,
    GPU_EXAMPLE,
    MAX_WORKERS,
    PROFILES,
    check_device,
    parse_cluster,
    profile,
    short_of,
    split_clusters,
)
from bench.projection.eras import HOROVOD_ERAS, era_help, horovod_era
from bench.projection.fit import Case, cases_in, fit_backends, gives
from bench.projection.model import INPUT_NAMES, SCOPE, crossover, fastest, fastest_words, project, with_compute
from bench.projection.published import RULES, SYSTEMS, track_record
from bench.projection.shapes import COMMITTED, PARAMS, check_model, model_inputs, model_profile
from bench.projection.validate import validate
from workloads.external import canonical, is_address

DEFAULT_BACKENDS = options.default_backends("predict")
PROJECTABLE = tuple(name for name in BACKEND_MODULES if name != PLAIN_LOOP)  # the plain loop is the model's start
# --compute-ms at most: a step is one batch's forward and backward, and an hour of it is a slip of the unit
MAX_COMPUTE_MS = 3600 * 1000.0
COMMITTED_MODELS = sorted(path.stem for path in COMMITTED.glob("*.json"))
HOROVOD_KNOBS = ("hvd_cycle_ms", "hvd_fusion_mb")  # Horovod's options a projection takes (--hvd-cycle-ms, ...)


def knob_backends() -> list[str]:
    """The backends whose own options are HOROVOD_KNOBS (has_horovod_knobs), in the registry's order: the options
    `bench predict` takes from them, and the --backend a projection with them needs."""
    return [b for b in PROJECTABLE if has_horovod_knobs(b)]


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "predict",
        help="project step time, throughput and scaling efficiency to a cluster (a model, fitted on "
        "the stored runs of one host); --validate checks it on runs across test hosts",
        epilog=examples(
            "bench predict --workload resnet18 --cluster cpu-10g      # nodes like this one, 10 Gbit/s",
            "bench predict --workload resnet18 --cluster ib-100g --compute-ms 14.5   # a GPU's step",
            "bench predict --cluster 64x8:100gbit:5us --backend elastic,horovod --json",
            "bench predict --model vgg16 --compute-ms 120 --compute-batch 64 --cluster 64x8:nvlink=1200gbit,ib=100g",
            "bench predict --model params:1000x4096,4096x4096,4096x25088 --compute-ms 50 --compute-batch 32 "
            "--cluster eth-25g",
            "bench predict --validate --store docs/studies/projection/bench.sqlite",
        ),
        parents=[
            options.what_runs(
                "predict",
                workload_help="comma-separated workloads to project, or all (default: all, every one the store "
                "has a profiled plain-loop run of)",
                workload_default=None,
                loads=False,
            ),
            options.parent(
                "the runs to fit from",
                ["--batch-size", "--threads"],
                helps={
                    "--batch-size": "per-worker batch of the runs to fit from (default: the one the store's runs "
                    "used, when they used one, since the model starts from them)",
                    "--threads": "threads per worker of the runs to fit from (default: the one the store's runs used, "
                    "since the model starts from them)",
                },
            ),
            options.store(),
            options.json_output(),
        ],
    )
    options.add(
        p,
        "--cluster",
        metavar="PROFILE|NODESxWORKERS:RATE[:LATENCY][:oversub=R]|NODESxGPUS:LINK=RATE,...",
        invalid=[
            "nowhere",
            "4x8:fast",
            "4x8:100gbit\n:5us",
            "4x8:100gbit:5us\n:",
            "4x8:nvlink=fast,ib=100g",
            "4x8:ib=100g",
            "4x8:nvlink=1200gbit,ib=100g,nccl=new",
            "4x8:nvlink=1200gbit,ib=100g,oversub=0.5",
            "4x8:100gbit:oversub=x",
        ],
        help=f"comma-separated clusters: profiles ({', '.join(PROFILES)}), CPU nodes such as 64x8:100gbit:5us, or "
        f"GPU nodes such as {GPU_EXAMPLE} (nvlink= or pcie= within a node, each GPU's rate; ib=, roce= or eth= "
        "between nodes, each node's rate; RATE in mbit, gbit (g) or gbyte, @LATENCY in us or ms; nccl=VERSION, "
        "the era's NCCL: its tree from 2.4, its sockets' threads from 2.4.8; eth= is TCP sockets, ib= and roce= "
        "RDMA; oversub=R, the fabric's R:1, 1 by default, also :oversub=R on CPU nodes; pcie= beside nvlink= and "
        "nicshare=F, the PCIe link the NIC shares and its share of it, half over eth= and all over RDMA by default) "
        f"(default {DEFAULT_CLUSTER}; a GPU cluster needs --compute-ms or --compute-from, and a GPU's step needs a "
        "GPU cluster: CPU nodes, a profile or NODESxWORKERS:RATE, are refused for it)",
    )
    options.add(
        p,
        "--model",
        metavar="NAME|FILE.py:NAME|params:ITEM,...",
        invalid=["params:", "params:x", "params:0", "res net", "nowhere.py:NET"],
        help="project this model with no sweep of it: a torchvision model name (resnet50, vgg16, inception_v3), "
        "a workload of yours (path/to/file.py:NAME), or params:ITEM,... (each gradient tensor's elements, "
        "such as 4096x4096 or 25.6M, the layer nearest the loss first); its gradients' sizes and ready order "
        f"come from its committed profile ({', '.join(COMMITTED_MODELS)}: the ones "
        "docs/studies/published.md uses), else from a few CPU steps of it at batch 2 in a process of its own, cached "
        "(default: the store's workloads); needs --compute-ms and --compute-batch, or --compute-from",
    )
    options.add(
        p,
        "--fresh-profile",
        action="store_true",
        help="with --model naming a model whose profile is committed (bench/projection/published/shapes: "
        f"{', '.join(COMMITTED_MODELS)}, the ones docs/studies/published.md uses), profile it "
        "on this machine's CPU instead (a CPU's profile moves between machines and loads)",
    )
    owners = knob_backends()
    knobs = {o.name: o for o in get_backend(owners[0]).options}
    for name, invalid in (("hvd_cycle_ms", ["-1", "nan", "x", "1e10"]), ("hvd_fusion_mb", ["-1", "nan", "x"])):
        opt = knobs[name]
        options.add(
            p,
            opt.flag,
            type=options.finite_float,
            metavar=name.upper(),
            invalid=invalid,
            needs=["--backend", owners[0]],
            help=f"{opt.help} (default: Horovod's own; in a projection, those of --hvd-version's era: {era_help()})",
        )
    options.add(
        p,
        "--hvd-version",
        metavar="VERSION",
        invalid=["x", "0.8", "1..2"],
        needs=["--backend", owners[0]],
        help="project Horovod as this version ran: its era's default cycle and fusion threshold ("
        + "; ".join(f"{e.version} on, {e.when}" for e in HOROVOD_ERAS)
        + f"; default: the newest, {HOROVOD_ERAS[-1].version}); --hvd-cycle-ms and --hvd-fusion-mb override them",
    )
    options.add(
        p,
        "--tf-replicated",
        type=options.positive_float,
        metavar="SERVERS_PER_NODE",
        invalid=["0", "-1", "x"],
        help="with --model, instead of the backends: project TensorFlow 1.x's distributed_replicated "
        "(tf_cnn_benchmarks: gradients summed within each node, pushed to parameter servers on the nodes and "
        "pulled back after the backward pass) with this many servers per node (the count rounded, at least 1)",
    )
    options.add(
        p,
        "--compute-ms",
        type=options.at_most(options.positive_float, MAX_COMPUTE_MS, "3600000, an hour"),
        metavar="MS",
        invalid=["0", "-1", "x", "nan", "inf", "1e10"],
        help="one worker's step time on the cluster's hardware, measured there (a GPU's, for a GPU cluster), "
        "at most 3600000, an hour; the step's shape comes from the stored profile (or --model's); on another "
        "device than the store's, the per-step overhead and the slowdown are stated ranges that widen the "
        "interval",
    )
    options.add(
        p,
        "--compute-batch",
        type=options.positive_int,
        metavar="N",
        invalid=["0"],
        help="the per-worker batch of the --compute-ms step, for the throughput (default: the stored case's; "
        "needed with --model)",
    )
    options.add(
        p,
        "--compute-from",
        type=options.id_name,
        metavar="RUN_ID",
        invalid=["../x"],
        help="a stored run at 1 worker on the cluster's hardware (bench import brings it here) whose step time "
        "is the compute",
    )
    options.add(
        p,
        "--max-workers",
        type=options.positive_int,
        metavar="N",
        invalid=["0"],
        help=f"project up to this many workers (default {MAX_WORKERS}, or the cluster's size where smaller; a "
        "cluster smaller than the number asked is said in one line on stderr and in the JSON)",
    )
    options.add(
        p,
        "--validate",
        action="store_true",
        help="instead: predict every stored run across test hosts with a shaped link from the one-host runs, "
        "and print predicted against measured; exit 1 when the model misses its goal",
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    horovod = horovod_options(args)  # refused first: a bad value is the option's, whatever else is given
    backends = chosen_backends(args.backend, options.every_backend("predict"), device=None, verb="predict")
    unknown = [b for b in backends if b not in PROJECTABLE]
    if unknown:
        raise UsageError(
            f"--backend {','.join(unknown)}: the plain loop is what the model starts from; choose from "
            f"{', '.join(PROJECTABLE)}"
        )
    if args.tf_replicated is not None:
        if args.model is None:
            raise UsageError(
                "--tf-replicated: a system the suite does not run has no stored runs to fit; project it for --model "
                "with --compute-ms"
            )
        if args.backend != DEFAULT_BACKENDS:
            raise UsageError("--tf-replicated and --backend both name what to project: give one")
        backends = list(SYSTEMS)
    given = [f"--{k.replace('_', '-')}" for k in ("hvd_version", *HOROVOD_KNOBS) if getattr(args, k) is not None]
    if given and not any(has_horovod_knobs(b) for b in backends):
        raise UsageError(f"{given[0]} is Horovod's: give --backend {' or '.join(knob_backends())} too")
    if args.fresh_profile and args.model is None:
        raise UsageError("--fresh-profile profiles --model's model: give --model too")
    if args.compute_ms is not None and args.compute_from:
        raise UsageError("--compute-ms and --compute-from both give the compute: give one")
    if args.compute_batch is not None and args.compute_ms is None:
        raise UsageError("--compute-batch is the batch of a --compute-ms step: give --compute-ms too")
    clusters = split_clusters(args.cluster or DEFAULT_CLUSTER)
    for name in clusters:  # refused before the store is read
        if name not in PROFILES:
            parse_cluster(name)
    if args.model is not None:
        check_model(args.model)
        if args.workload and not options.is_all(args.workload):
            raise UsageError("--model and --workload both name what to project: give one")
        if args.batch_size is not None or args.threads is not None:
            raise UsageError(
                "--batch-size and --threads choose the stored runs to fit from, and --model fits none: "
                "give the step's batch with --compute-batch"
            )
        if args.validate:
            raise UsageError("--validate checks the model on the store's runs: give it without --model")
        if args.compute_ms is None and not args.compute_from:
            raise UsageError(
                f"--model {args.model}: give its one-worker step on the cluster's hardware: --compute-ms MS "
                "--compute-batch N (measured there) or --compute-from RUN_ID"
            )
        if args.compute_ms is not None and args.compute_batch is None:
            raise UsageError("--model with --compute-ms: give --compute-batch, the batch of that step")
    store = open_store(args.store) if args.model is None or args.compute_from else None
    records = store.records() if store is not None else []
    if args.validate:
        return show_validation(validate(records), args.json)
    if args.model is not None:
        step_s, batch, device, how = model_compute(args, records)  # refused before a model is profiled
        for name in clusters:  # a GPU's step on a cluster described as CPU nodes: refused before the profile
            check_device(name, device, given=args.cluster is not None)
        shape = model_profile(args.model, fresh=args.fresh_profile)
        cases = [Case(args.model, batch, 1, device)]
    else:
        cases = choose_cases(cases_in(records), args)
    limit = args.max_workers or MAX_WORKERS
    out, text = [], []
    for case in cases:
        if args.model is not None:
            fitted = {b: named_inputs(args, b, shape, batch, step_s, device, how, horovod) for b in backends}
            missing: dict[str, str] = {}
        else:
            fitted, missing = fit_backends(records, backends, case)
            fitted = {b: with_horovod(i, horovod) for b, i in fitted.items()}
        text += [f"# {backend}: not projected: {why}" for backend, why in missing.items()]
        if not fitted:
            raise UsageError(f"no backend could be fitted for {case.workload}: " + "; ".join(text))
        for name in clusters:
            cluster = cluster_of(name, fitted)
            if args.model is not None:
                inputs = fitted
            else:
                inputs = {b: compute_for(i, cluster, args, store) for b, i in fitted.items()}
            points = {b: project(i, cluster, cluster.worker_counts(limit)) for b, i in inputs.items()}
            short = short_of(cluster, limit) if args.max_workers is not None else None
            if short:  # said once per cluster, on stderr, whatever the output's form
                say(f"bench predict: {short}")
            out.append(
                {
                    "case": case.__dict__,
                    "cluster": cluster_json(cluster) | {"asked_workers": limit, "short": short},
                    "backends": {
                        b: {"inputs": inputs_json(inputs[b]), "points": [point_json(p) for p in pts]}
                        for b, pts in points.items()
                    },
                    # a backend is named faster at N only where its step's interval lies below every other's; None:
                    # the intervals overlap there
                    "fastest": [{"workers": n, "backend": b} for n, b in fastest(points)],
                    "fastest_changes": [{"workers": n, "before": a, "after": b} for n, a, b in crossover(points)],
                }
            )
            text += projection_text(case, cluster, inputs, points)
    record = track_record()
    if args.json:
        print_json(
            {"projection": "model projection, not a measurement", "track_record": record.as_json(), "results": out}
        )
    else:
        print("\n".join(text))
    return EXIT_OK


def has_horovod_knobs(backend: str) -> bool:
    return backend in PROJECTABLE and {o.name for o in get_backend(backend).options} >= set(HOROVOD_KNOBS)


def horovod_options(args) -> dict:
    """Horovod's cycle and fusion threshold for the projection, with how they were chosen: {"given": the options
    given (--hvd-cycle-ms, --hvd-fusion-mb, and --hvd-version's era's for the others where it is given),
    "era": the era their defaults are of}."""
    if args.hvd_cycle_ms is not None and not 0 <= args.hvd_cycle_ms <= 60_000:
        raise UsageError(f"--hvd-cycle-ms {args.hvd_cycle_ms:g}: give 0 to 60000 ms (a minute)")
    if args.hvd_fusion_mb is not None and args.hvd_fusion_mb < 0:
        raise UsageError(f"--hvd-fusion-mb {args.hvd_fusion_mb:g}: give 0 (no fusion) or more MiB")
    era = horovod_era(args.hvd_version)
    given = {k: getattr(args, k) for k in HOROVOD_KNOBS if getattr(args, k) is not None}
    if args.hvd_version is not None:
        given = {"hvd_cycle_ms": era.cycle_ms, "hvd_fusion_mb": era.fusion_mb} | given
    return {"given": given, "era": era}


def horovod_words(options: dict, horovod: dict) -> str:
    """The note that says which cycle and fusion threshold a Horovod projection takes, and why."""
    era = horovod["era"]
    cycle, fusion = options["hvd_cycle_ms"], options["hvd_fusion_mb"]
    given = [f"--{k.replace('_', '-')}" for k in HOROVOD_KNOBS if k in horovod["given"]]
    return (
        f"Horovod: a {cycle:g} ms cycle, "
        + (f"Tensor Fusion up to {fusion:g} MiB" if fusion else "no Tensor Fusion (each tensor alone)")
        + (f"; given: {', '.join(given)}" if given else "")
        + f"; the defaults of Horovod {era.version} on ({era.when}, {era.source}): {era.cycle_ms:g} ms, "
        + (f"{era.fusion_mb:g} MiB" if era.fusion_mb else "no fusion")
        + "; --hvd-version VERSION takes another era's"
    )


def named_inputs(args, backend, shape, batch, step_s, device, how, horovod):
    """--model's inputs under `backend`: Horovod's with the era's cycle and fusion (or those given); a system the suite
    does not run (--backend tf-replicated) with its rule and options."""
    if backend in SYSTEMS:
        spread, rule = args.tf_replicated, RULES[SYSTEMS[backend]]
        options = {"servers_per_node": spread}
        inputs = model_inputs(args.model, shape, backend, batch, step_s, device, how, options, rule)
        return replace(inputs, notes=(*inputs.notes, f"{rule.name}: {spread:g} server(s) per node"))
    if not has_horovod_knobs(backend):
        return model_inputs(args.model, shape, backend, batch, step_s, device, how)
    era = horovod["era"]
    chosen = {"hvd_cycle_ms": era.cycle_ms, "hvd_fusion_mb": era.fusion_mb} | horovod["given"]
    inputs = model_inputs(args.model, shape, backend, batch, step_s, device, how, chosen)
    return replace(inputs, notes=(*inputs.notes, horovod_words(chosen, horovod)))


def with_horovod(inputs, horovod):
    """A fitted case's inputs with the Horovod options given (the stored runs' own where none is)."""
    if not horovod["given"] or not has_horovod_knobs(inputs.backend):
        return inputs
    chosen = inputs.options | horovod["given"]
    return replace(inputs, options=chosen, notes=(*inputs.notes, horovod_words(chosen, horovod)))


def model_compute(args, records) -> tuple[float, int, str, str]:
    """--model's one-worker step: (seconds, batch, device, how it was given)."""
    if args.compute_ms is not None:
        return (
            args.compute_ms / 1e3,
            args.compute_batch,
            "cuda",
            f"compute: {args.compute_ms:g} ms per step at batch {args.compute_batch} as given (--compute-ms)",
        )
    rec = stored_step(records, args.compute_from)
    if args.model.startswith(PARAMS):  # a parameter list names no workload: any run's step is the user's choice
        named = rec.spec.workload
    else:
        named = canonical(args.model) if is_address(args.model) else args.model
    if rec.spec.workload != named:
        raise UsageError(
            f"--compute-from {args.compute_from}: it trained {rec.spec.workload}, not {args.model}; give a run of "
            "that model"
        )
    step = rec.metrics.step_time_s.mean
    return step, rec.spec.batch_size, rec.spec.device, f"compute: run {rec.run_id}'s step ({step * 1e3:.1f} ms)"


def stored_step(records, run_id: str):
    """The stored ok training run at one worker whose step is the compute (--compute-from)."""
    rec = next((r for r in records if r.run_id == run_id), None)
    if rec is None or not gives(rec, "step") or not rec.ok or rec.metrics is None:
        raise UsageError(
            f"--compute-from {run_id}: no ok training run of that id in the store "
            "(`bench list` shows them; `bench import` brings another machine's)"
        )
    if rec.spec.world_size != 1:
        raise UsageError(f"--compute-from {run_id}: it ran {rec.spec.world_size} workers; give a run at 1 worker")
    return rec


def choose_cases(cases: list[Case], args) -> list[Case]:
    if not cases:
        raise UsageError(
            "the store has no plain-loop run at 1 worker with a profile, which the model starts from: "
            "run `bench sweep --world-sizes 1,2` (or `nox -s bench`) first"
        )
    if args.workload and not options.is_all(args.workload):
        wanted = options.chosen(args.workload, [])
        missing = [w for w in wanted if w not in {c.workload for c in cases}]
        if missing:
            raise UsageError(
                f"no profiled plain-loop run of workload {missing[0]!r} in the store; run "
                f"`bench sweep --workload {missing[0]} --world-sizes 1,2` first"
            )
        cases = [c for c in cases if c.workload in wanted]
    for flag, attr in (("batch_size", "batch"), ("threads", "threads")):
        wanted = getattr(args, flag)
        if wanted is not None:
            cases = [c for c in cases if getattr(c, attr) == wanted]
            if not cases:
                raise UsageError(f"no profiled plain-loop run at --{flag.replace('_', '-')} {wanted} in the store")
    by_workload: dict[str, list[Case]] = {}
    for c in cases:
        by_workload.setdefault(c.workload, []).append(c)
    ambiguous = {w: cs for w, cs in by_workload.items() if len(cs) > 1}
    if ambiguous:
        w, cs = next(iter(ambiguous.items()))
        raise UsageError(
            f"the store has {w} runs at several conditions ("
            + "; ".join(f"batch {c.batch}, {c.threads} thread(s), {c.device}" for c in cs)
            + "): choose with --batch-size and --threads"
        )
    return [cs[0] for cs in by_workload.values()]


def cluster_of(name: str, fitted: dict):
    per_host = max(i.fit_world for i in fitted.values())
    device = next(iter(fitted.values())).device
    return profile(name, per_host) if name in PROFILES else parse_cluster(name, device)


def compute_for(inputs, cluster, args, store):
    """The inputs with the cluster's compute: given, read from a stored run, or (same device) the measured one."""
    if args.compute_ms is not None:
        batch = args.compute_batch or inputs.batch
        return replace(
            with_compute(
                inputs,
                args.compute_ms / 1e3,
                cluster.device,
                f"compute: {args.compute_ms:g} ms per step at batch {batch} as given "
                "(--compute-ms); the step's shape is the stored profile's",
            ),
            batch=batch,
        )
    if args.compute_from:
        rec = next((r for r in store.records() if r.run_id == args.compute_from), None)
        if rec is None or not gives(rec, "step") or not rec.ok or rec.metrics is None:
            raise UsageError(
                f"--compute-from {args.compute_from}: no ok training run of that id in the store "
                "(`bench list` shows them; `bench import` brings another machine's)"
            )
        if rec.spec.workload != inputs.workload:
            raise UsageError(
                f"--compute-from {args.compute_from}: it trained {rec.spec.workload}, not "
                f"{inputs.workload}; give a run of the same workload (or --workload {rec.spec.workload})"
            )
        stored_step([rec], rec.run_id)
        check_device(cluster.name, rec.spec.device)  # a GPU run's step on CPU nodes is refused
        return replace(
            with_compute(
                inputs,
                rec.metrics.step_time_s.mean,
                rec.spec.device,
                f"compute: run {rec.run_id}'s step ({rec.metrics.step_time_s.mean * 1e3:.1f} ms, {rec.spec.device})",
            ),
            batch=rec.spec.batch_size,
        )
    if cluster.device != inputs.device:
        raise UsageError(
            f"--cluster {cluster.name} is a {cluster.device} cluster and the store's runs are "
            f"{inputs.device}: give --compute-ms (a measured one-worker step there) or --compute-from"
        )
    return inputs


# ---------------------------------------------------------------- output
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}" if math.isfinite(seconds) else "-"


def projection_text(case, cluster, inputs: dict, points: dict) -> list[str]:
    lines = [
        "",
        f"model projection (not a measurement): {case.workload}, batch {case.batch} per worker, "
        f"{case.threads} thread(s); cluster {cluster.name}: {cluster.summary}",
        f"  source: {cluster.source}",
        f"  era: {cluster.era}",
        f"  scope: {SCOPE}",
        f"  track record: {track_record().summary()}",
    ]
    for backend, pts in points.items():
        i = inputs[backend]
        if i.assumed:
            lines.append(
                f"  {backend}: compute {ms(i.compute.mean)} ms; "
                + "; ".join(assumed_words(a) for a in i.assumed)
                + " (the interval holds both ends)"
            )
        else:
            lines.append(
                f"  {backend}: compute {ms(i.compute.mean)} ms ({len(i.compute.runs)} run(s)), overhead "
                f"{ms(i.overhead.mean)} ms/step, slowdown {i.slowdown.mean:.2f} s per s overlapped, "
                f"alpha {i.alpha.mean * 1e6:.1f} us, beta {i.beta.mean * 1e9:.2f} ns/B (fitted at "
                f"{i.fit_world} workers on one host)"
            )
        for note in i.notes:
            lines.append(f"    note: {note}")
        lines.append(
            f"    {'workers':>7} {'nodes':>5} {'step ms (95%)':>22} {'samples/s':>11} "
            f"{'efficiency (95%)':>20}  {'compute':>8} {'slowed':>7} {'hidden':>7} {'exposed':>8} "
            f"{'overhead':>8} {'coord':>6} {'straggle':>8} | {'in-node':>7} {'network':>8} {'pcie':>6} "
            f"{'oversub':>7}  algorithm"
        )
        for p in pts:
            parts = p.parts
            lines.append(
                f"    {p.workers:>7} {p.nodes:>5} {ms(p.step):>8} ({ms(p.step_low)}-{ms(p.step_high)})"
                f"{'':>1} {p.throughput:>11,.0f} {p.efficiency:>8.0%} ({p.efficiency_low:.0%}-"
                f"{p.efficiency_high:.0%})  {ms(parts.compute):>8} {ms(parts.slowdown):>7} "
                f"{ms(parts.hidden):>7} {ms(parts.exposed):>8} {ms(parts.overhead):>8} "
                f"{ms(parts.coordination):>6} {ms(parts.stragglers):>8} | {ms(parts.in_node):>7} "
                f"{ms(parts.network):>8} {ms(parts.nic_pcie):>6} {ms(parts.oversubscription):>7}  {p.algorithm}"
            )
    lines.append(
        "    (ms; the step = compute + slowed + exposed + overhead + coord (Horovod's negotiation) + straggle (the "
        "slowest of N workers); right of |, the step's collectives by stage, hidden and exposed: in-node, network, "
        "and what the NIC's PCIe share and the fabric's oversubscription add)"
    )
    if len(points) > 1:
        lines.append(
            "  fastest (named only where its step's 95% interval lies below the others'): " + fastest_words(points)
        )
    return lines


def assumed_words(a) -> str:
    """An assumed range in the unit the inputs table uses: ms for an overhead, s per s for the slowdown."""
    if a.name.startswith("overhead"):
        return f"{a.name} assumed {a.low * 1e3:g} to {a.high * 1e3:g} ms/step"
    return f"{a.name} assumed {a.low:g} to {a.high:g} s per s overlapped"


def cluster_json(cluster) -> dict:
    return {
        "name": cluster.name,
        "summary": cluster.summary,
        "era": cluster.era,
        "scope": SCOPE,
        "tree": cluster.tree,
        "device": cluster.device,
        "workers_per_node": cluster.workers_per_node,
        "max_nodes": cluster.max_nodes,
        "source": cluster.source,
        "network": cluster.network.__dict__ if cluster.network else None,
        "node_link": cluster.node_link.__dict__ if cluster.node_link else None,
        "oversubscription": cluster.oversubscription,
        "pcie_link": cluster.pcie_link.__dict__ if cluster.pcie_link else None,
        "nic_share": cluster.nic_share,
    }


def inputs_json(i) -> dict:
    values = {
        name: {"mean": getattr(i, name).mean, "se": getattr(i, name).se, "dof": getattr(i, name).dof}
        for name in INPUT_NAMES
    }
    return {
        "values": values,
        "assumed": [{"name": a.name, "low": a.low, "high": a.high, "why": a.why} for a in i.assumed],
        "runs": {k: list(v) for k, v in i.runs().items()},
        "fit_world": i.fit_world,
        "options": i.options,
        "notes": list(i.notes),
    }


def point_json(p) -> dict:
    return {
        "workers": p.workers,
        "nodes": p.nodes,
        "step_s": p.step,
        "step_low_s": p.step_low,
        "step_high_s": p.step_high,
        "throughput": p.throughput,
        "efficiency": p.efficiency,
        "efficiency_low": p.efficiency_low,
        "efficiency_high": p.efficiency_high,
        "algorithm": p.algorithm,
        "parts_s": {
            "compute": p.parts.compute,
            "slowdown": p.parts.slowdown,
            "hidden": p.parts.hidden,
            "exposed": p.parts.exposed,
            "overhead": p.parts.overhead,
            "coordination": p.parts.coordination,
            "stragglers": p.parts.stragglers,
        },
        # the step's collectives by stage, hidden and exposed together (not parts of the step's sum)
        "stages_s": {
            "in_node": p.parts.in_node,
            "network": p.parts.network,
            "nic_pcie": p.parts.nic_pcie,
            "oversubscription": p.parts.oversubscription,
        },
    }


def validation_lines(v) -> list[str]:
    lines = [
        "model projection against measured runs it was not fitted on (runs across test hosts)",
        f"{'workload':<10} {'backend':<8} {'hosts':>5} {'link':<8} {'measured ms (95%)':>24} "
        f"{'predicted ms (95%)':>24} {'error':>7} {'compute share':>13} {'link fit':>8} {'nominal link':>12}",
    ]
    for r in v.rows:
        lines.append(
            f"{r.workload:<10} {r.backend:<8} {r.hosts:>5} {r.link:<8} {ms(r.measured.mean):>9} "
            f"({ms(r.measured_low)}-{ms(r.measured_high)}) n={len(r.runs)} {ms(r.point.step):>9} "
            f"({ms(r.point.step_low)}-{ms(r.point.step_high)}) {r.error:>+7.1%} {r.compute_share:>13.0%} "
            f"{'measured' if r.link_measured else 'nominal':>8} {r.nominal_error:>+12.1%}"
            + (f"  (not judged: {r.left_out})" if r.left_out else "")
        )
    for w in v.winners:
        lines.append(
            f"winner {w.workload} {w.hosts} hosts {w.link}: {w.faster} faster than {w.slower} by "
            f"{w.ratio - 1:.1%} ({'significant' if w.significant else 'not significant'}); predicted "
            f"{w.predicted_faster}: {'agrees' if w.agrees else 'disagrees'}"
            + ("" if w.judged else " (a point not judged)")
        )
    lines += [f"skipped: {s}" for s in v.skipped]
    lines.append(v.summary())
    return lines


def show_validation(v, as_json: bool) -> int:
    if not v.rows and not v.skipped:
        raise UsageError(
            "the store has no ok training run across test hosts with a shaped link (--link) to check "
            "the model against; see docs/studies/projection.md for the runs it takes"
        )
    if as_json:
        print_json(
            {
                "rows": [
                    {
                        "workload": r.workload,
                        "backend": r.backend,
                        "hosts": r.hosts,
                        "link": r.link,
                        "measured_s": r.measured.mean,
                        "measured_low_s": r.measured_low,
                        "measured_high_s": r.measured_high,
                        "launches": len(r.runs),
                        "runs": list(r.runs),
                        "predicted": point_json(r.point),
                        "error": r.error,
                        "compute_share": r.compute_share,
                        "link_measured": r.link_measured,
                        "link_runs": list(r.link_runs),
                        "predicted_nominal_link": point_json(r.nominal),
                        "nominal_error": r.nominal_error,
                        "judged": not r.left_out,
                        "left_out": r.left_out,
                    }
                    for r in v.rows
                ],
                "winners": [w.__dict__ | {"agrees": w.agrees} for w in v.winners],
                "skipped": v.skipped,
                "median_error": v.median_error,
                "worst_error": v.worst_error,
                "nominal_median_error": v.nominal_median_error,
                "all_median_error": v.all_median_error,
                "meets_goal": v.meets_goal(),
                "summary": v.summary(),
            }
        )
    else:
        print("\n".join(validation_lines(v)))
    return EXIT_OK if v.meets_goal() else EXIT_RUN_FAILED
