"""`bench`: run, sweep, allreduce, list, report, compare, regress, baseline, doctor. Bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys

from bench.errors import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, BenchError,
                          Interrupted, UsageError)


class Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line that says where to look."""

    def error(self, message):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: world sizes must be integers of 1 or more")
    return values


def add_store(p):
    p.add_argument("--store", help="results store (SQLite file); default results/bench.sqlite "
                                   "or $BENCH_STORE")


def add_run_options(p):
    g = p.add_argument_group("placement")
    g.add_argument("--nproc", type=int, help="CPU worker processes (gloo); default min(2, cores)")
    g.add_argument("--gpus", type=int, help="one worker per GPU (NCCL)")
    g.add_argument("--threads", type=int, help="threads per worker, set for every backend alike "
                                               "(default: cores / largest world size)")
    g.add_argument("--cpu-bind", choices=["none", "cores"], help="pin each worker to its own cores")
    g.add_argument("--oversubscribe", action="store_true",
                   help="allow more worker threads than cores (measures contention)")
    g = p.add_argument_group("measurement")
    g.add_argument("--batch-size", type=int, help="per-worker batch (default: the workload's)")
    g.add_argument("--warmup-steps", type=int, help="untimed steps first (default 5, at least 1)")
    g.add_argument("--steps-per-window", type=int, help="steps timed per window (default: the workload's, about a second of work)")
    g.add_argument("--windows", type=int, help="timed windows (default 5, at least 2)")
    g.add_argument("--seed", type=int, help="seed of the model and the data (default 0)")
    g.add_argument("--lr", type=float, help="SGD learning rate (default 0.01, momentum 0.9)")
    g.add_argument("--timeout", type=float, help="deadline per run in seconds (default 900)")
    g = p.add_argument_group("data")
    g.add_argument("--data", choices=["synthetic", "digits", "mnist"],
                   help="synthetic (default), digits (scikit-learn's), mnist (needs --data-dir)")
    g.add_argument("--data-dir", help="folder with MNIST's IDX files; nothing is downloaded")
    g.add_argument("--image-size", type=int, help="input side for image models (default: the workload's "
                                                  "CPU or GPU size)")
    g = p.add_argument_group("testing the harness")
    g.add_argument("--inject", metavar="KIND:RANK:STEP",
                   help="test-only fault: hang, crash or kill rank RANK at step STEP")
    g.add_argument("--inject-delay", metavar="DELAY",
                   help="test-only slowdown: every worker sleeps DELAY in every timed step, a share of its "
                        "warm-up median step time (20%%) or a duration (5ms); a sweep never slows the "
                        "plain single-process loop it measures the others against")
    g.add_argument("--save-params", action="store_true",
                   help="save each rank's final parameters in the run directory")
    add_backend_options(p)
    add_store(p)
    p.add_argument("--json", action="store_true", help="print the full record(s) as JSON on stdout, "
                                                       "and nothing else there")


def add_backend_options(p):
    """Each backend's own knobs, from its plug-in; a run records every value, given or default."""
    from bench.backends import BACKEND_MODULES, get_backend

    for name in BACKEND_MODULES:
        backend = get_backend(name)
        if not backend.options:
            continue
        g = p.add_argument_group(f"{name} backend options")
        for opt in backend.options:
            g.add_argument(opt.flag, dest=f"backend_option:{opt.name}", type=opt.type, choices=opt.choices,
                           help=f"{opt.help} (default {opt.default})")


def backend_options(args) -> dict:
    prefix = "backend_option:"
    return {k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix) and v is not None}


SPEC_OPTIONS = ("batch_size", "image_size", "threads", "oversubscribe", "inject", "inject_delay", "warmup_steps",
                "steps_per_window", "windows", "seed", "lr", "timeout", "data", "data_dir",
                "cpu_bind", "save_params")


def spec_options(args) -> dict:
    options = {k: getattr(args, k) for k in SPEC_OPTIONS if getattr(args, k) is not None}
    if "inject_delay" in options:
        options["step_delay"] = options.pop("inject_delay")
    options["backend_options"] = backend_options(args)
    return options


def status_exit(statuses: list[str]) -> int:
    if "interrupted" in statuses:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(s == "ok" for s in statuses) else EXIT_RUN_FAILED


def open_store(args):
    from bench.store import Store

    return Store(args.store)


# ---------------------------------------------------------------- verbs
def cmd_run(args) -> int:
    from bench.render import describe_spec, summary_lines
    from bench.spec import build_spec, resolve_device

    device, world = resolve_device(args.nproc, args.gpus)
    spec = build_spec(backend=args.backend, workload=args.workload, world_size=world, device=device,
                      **spec_options(args))
    print(f"bench run: {describe_spec(spec)}", file=sys.stderr, flush=True)
    return run_one(spec, args, summary_lines, show_progress=True)


def run_one(spec, args, describe, show_progress: bool) -> int:
    """Execute one spec, store it, print its record (--json) or describe(record), exit by its status."""
    from bench.runner import execute

    store = open_store(args)
    record = execute(spec, store, show_progress=show_progress)
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        print("\n".join(describe(record)))
    print(f"stored run {record['run_id']} in {store.path}", file=sys.stderr)
    return status_exit([record["status"]])


def sweep_world_sizes(limit: int) -> list[int]:
    sizes, n = [], 1
    while n <= limit:
        sizes.append(n)
        n *= 2
    if sizes[-1] != limit:
        sizes.append(limit)
    return sizes


def available_backends(device: str) -> list[str]:
    """Every compared backend that can run here; says which cannot, and why."""
    from bench.backends import COMPARED, get_backend

    backends = []
    for name in COMPARED:
        problem = get_backend(name).unavailable_reason(device)
        if problem:
            print(f"bench: skipping {name}: {problem}", file=sys.stderr)
        else:
            backends.append(name)
    return backends


def plan_sweep(args, backends: list[str], workloads: list[str], device: str, sizes: list[int],
               sweep_id: str, with_baseline: bool = True, with_comm: bool = True, repeats: int = 1) -> list:
    """Training runs (plus the plain-loop baseline) and communication sweeps, all tagged with sweep_id."""
    from bench.backends import BASELINE, get_backend
    from bench.spec import build_spec, default_threads

    options = spec_options(args)
    # One thread count for the whole sweep, so world sizes differ only in their number of workers.
    options.setdefault("threads", default_threads(device, max(sizes)))
    plan = []
    for workload in workloads:
        if with_baseline and BASELINE not in backends:
            # the yardstick the others are measured against: never slowed by --inject-delay
            plain = {**options, "step_delay": None}
            plan.append(build_spec(backend=BASELINE, workload=workload, world_size=1, device=device, **plain))
        for backend in backends:
            for size in sizes:
                plan.append(build_spec(backend=backend, workload=workload, world_size=size,
                                       device=device, **options))
    if with_comm:
        comm_backends = [b for b in backends if get_backend(b).comm_ops]
        plan += comm_plan(args, comm_backends, device, [n for n in sizes if n > 1])
    for spec in plan:
        spec.sweep_id = sweep_id
    # Repeats in rounds (every case once, then again): a slow spell of the machine spreads over all
    # cases instead of landing on the repeats of one.
    rounds = []
    for r in range(repeats):
        rounds += [dataclasses.replace(spec, repeat=r) for spec in plan]
    return rounds


def execute_plan(plan: list, store, sweep_id: str, title: str) -> list[dict]:
    """Run a sweep's plan in order, storing every run; a progress line per run."""
    from bench.render import one_line
    from bench.runner import execute

    records = []
    print(f"{title} {sweep_id}: {len(plan)} runs -> {store.path}", file=sys.stderr, flush=True)
    for i, spec in enumerate(plan, 1):
        what = spec.workload if spec.task == "train" else "communication sweep"
        head = f"[{i}/{len(plan)}] {spec.backend} {what} world {spec.world_size}"
        print(f"{head} ...", file=sys.stderr, flush=True)
        record = execute(spec, store, show_progress=False)
        records.append(record)
        print(f"{head}: {one_line(record)}", file=sys.stderr, flush=True)
        if record["status"] == "interrupted":
            print(f"{title}: interrupted; {len(plan) - i} run(s) not started", file=sys.stderr)
            break
    failed = [r for r in records if r["status"] != "ok"]
    print(f"{title} {sweep_id}: {len(records) - len(failed)} ok, {len(failed)} not ok; "
          f"`bench list --store {store.path}` shows them", file=sys.stderr)
    return records


def cmd_sweep(args) -> int:
    _, records, store = sweep(args)
    if args.json:
        print(json.dumps(records, indent=1))
    if args.report:
        from bench.report import write_report_with_copy

        latest, stamped = write_report_with_copy(store, args.report)
        print(f"report written to {latest} (and {stamped})", file=sys.stderr)
    return status_exit([r["status"] for r in records])


def sweep(args, title: str = "bench sweep") -> tuple[str, list[dict], object]:
    """Plan and run a sweep from `bench sweep`'s arguments: (sweep id, records, store)."""
    from bench.runner import new_run_id
    from bench.spec import resolve_device

    device, limit = resolve_device(args.nproc, args.gpus)
    backends = args.backend.split(",") if args.backend else available_backends(device)
    if args.workload:
        workloads = args.workload.split(",")
    else:
        from workloads import WORKLOADS

        workloads = list(WORKLOADS)
    sizes = args.world_sizes or sweep_world_sizes(limit)
    sweep_id = new_run_id()
    if args.repeats < 1:
        raise UsageError("--repeats must be 1 or more")
    plan = plan_sweep(args, backends, workloads, device, sizes, sweep_id, with_baseline=not args.no_baseline,
                      with_comm=not args.no_comm, repeats=args.repeats)
    store = open_store(args)
    print(f"{title}: {', '.join(backends)} x {', '.join(workloads)} x world sizes "
          f"{', '.join(map(str, sizes))}", file=sys.stderr)
    return sweep_id, execute_plan(plan, store, sweep_id, title), store


def comm_plan(args, backends: list[str], device: str, sizes: list[int]) -> list:
    from bench.comm import parse_bytes
    from bench.spec import build_comm_spec

    try:
        min_bytes, max_bytes = parse_bytes(args.min_bytes), parse_bytes(args.max_bytes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ops = [op for op in args.ops.split(",") if op]
    return [build_comm_spec(backend=b, world_size=n, device=device, ops=ops, dtype=args.dtype,
                            min_bytes=min_bytes, max_bytes=max_bytes, warmup_iters=args.warmup_iters,
                            iters=args.iters, threads=args.threads, oversubscribe=args.oversubscribe,
                            timeout=args.timeout, backend_options=backend_options(args))
            for b in backends for n in sizes]


def cmd_allreduce(args) -> int:
    from bench.backends import COMPARED
    from bench.comm import format_table
    from bench.render import describe_comm
    from bench.runner import execute
    from bench.spec import resolve_device

    device, world = resolve_device(args.nproc, args.gpus)
    backends = list(COMPARED) if args.backend == "all" else args.backend.split(",")
    plan = comm_plan(args, backends, device, [world])
    store = open_store(args)
    records = []
    for spec in plan:
        print(f"bench allreduce: {describe_comm(spec)}", file=sys.stderr, flush=True)
        record = execute(spec, store)
        records.append(record)
        if not args.json:
            print(f"# backend {spec.backend}, {spec.world_size} ranks ({spec.device}), status {record['status']}")
            if record["status"] == "ok":
                print(format_table(record["allreduce"], record["metrics"]["comm"].get("ceiling")))
                fit = record["metrics"]["comm"]["fit"]
                if fit:
                    print(f"# alpha-beta fit ({record['metrics']['comm']['model']}): "
                          f"a = {fit['alpha_s'] * 1e6:.1f} us, 1/b = {fit['bandwidth_gbps']:.2f} GB/s, "
                          f"weighted R^2 = {fit['r2_weighted']:.3f}")
            else:
                print(f"# error: {record['error']['message']}")
            print()
        if record["status"] == "interrupted":
            break
    if args.json:
        print(json.dumps(records if len(records) > 1 else records[0], indent=1))
    return status_exit([r["status"] for r in records])


def add_comm_options(p, max_default="64M"):
    g = p.add_argument_group("communication sweep (nccl-tests conventions)")
    g.add_argument("--min-bytes", default="4", help="smallest message: 4, 8K, 64M, 1G (default 4)")
    g.add_argument("--max-bytes", default=max_default, help=f"largest message (default {max_default})")
    g.add_argument("--dtype", default="float32", help="float32 (default), float16 or bfloat16")
    g.add_argument("--ops", default="allreduce",
                   help="comma-separated: allreduce (default), allgather, broadcast, reduce_scatter")
    g.add_argument("--warmup-iters", type=int, default=5, help="untimed ops per size (default 5)")
    g.add_argument("--iters", type=int, default=20, help="timed ops per size (default 20)")


def cmd_list(args) -> int:
    from bench.render import runs_table

    frame = open_store(args).load()
    if args.last:
        frame = frame.tail(args.last)
    if frame.empty:
        print(f"no runs stored in {open_store(args).path}")
        return EXIT_OK
    print(runs_table(frame))
    return EXIT_OK


def cmd_report(args) -> int:
    from bench.report import write_report

    store = open_store(args)
    path = write_report(store, args.output, args.where)
    print(f"report written to {path}")
    return EXIT_OK


def cmd_fault(args) -> int:
    from bench.fault import build_fault_spec
    from bench.render import fault_lines
    from bench.spec import resolve_device

    if args.gpus is not None:
        raise UsageError("bench fault runs CPU processes over gloo; drop --gpus and give --nproc N")
    _, world = resolve_device(args.nproc, None)
    options = {k: getattr(args, k) for k in ("threads", "oversubscribe", "batch_size", "image_size", "seed", "lr",
                                             "timeout", "save_params") if getattr(args, k) is not None}
    spec = build_fault_spec(backend=args.backend, workload=args.workload, world_size=world,
                            scenario="join" if args.join else "kill", rank=args.kill_rank, at_step=args.at_step,
                            signal_name=args.signal.upper(), max_restarts=args.max_restarts,
                            checkpoint_every=args.checkpoint_every, total_steps=args.steps,
                            comm_timeout=args.comm_timeout, recovery_timeout=args.recovery_timeout,
                            backend_options=backend_options(args), **options)
    f = spec.fault
    what = (f"SIG{f['signal']} to rank {f['rank']}" if f["scenario"] == "kill" else "a worker joins")
    print(f"bench fault: {spec.backend} {spec.workload}, {spec.world_size} workers, {what} at step {f['at_step']} "
          f"of {f['total_steps']}, checkpoint/commit every {f['checkpoint_every']}, up to {f['max_restarts']} "
          "restarts", file=sys.stderr, flush=True)
    return run_one(spec, args, fault_lines, show_progress=False)


def regress_sweep(args, title: str, repeats: int):
    """The fixed regression matrix (bench.gate.REGRESS_SWEEP), run as `bench sweep` would run it."""
    from bench.gate import REGRESS_SWEEP

    argv = ["sweep", *REGRESS_SWEEP, "--repeats", str(repeats)]
    if args.store:
        argv += ["--store", args.store]
    if getattr(args, "inject_delay", None):
        argv += ["--inject-delay", args.inject_delay]
    if args.timeout:
        argv += ["--timeout", str(args.timeout)]
    return sweep(build_parser().parse_args(argv), title)


def compare_and_print(baseline: dict, current: list[dict], as_json: bool, out=None) -> tuple[int, list[dict]]:
    """Compare, print the table (or, as_json, the JSON) on `out`, and a one-line summary on stderr that
    names every failing metric; (exit code, rows)."""
    from bench.gate import FAILING_VERDICTS, compare_figures, figures, format_comparison, machine_of, same_kind

    base_figs, _ = figures(baseline["records"])
    cur_figs, cur_not_ok = figures(current)
    if not cur_figs and not cur_not_ok:
        raise UsageError("the current runs hold no figure the gate compares (training or communication "
                         "runs of a sweep); run `bench regress` or `bench sweep` first")
    machine = machine_of(current)
    same = same_kind(baseline["machine"], machine)
    rows = compare_figures(base_figs, cur_figs, cur_not_ok, same_machine=same)
    out = out or sys.stdout
    if as_json:
        print(json.dumps({"baseline_machine": baseline["machine"], "current_machine": machine,
                          "same_kind_of_machine": same, "rows": rows}, indent=1), file=out)
    else:
        print(format_comparison(rows), file=out, flush=True)
    if not same:
        print(f"bench compare: the baseline came from {baseline['machine'].get('cpu_model')} x "
              f"{baseline['machine'].get('cpu_count')}, these runs from {machine.get('cpu_model')} x "
              f"{machine.get('cpu_count')}: absolute throughput is not gated; refresh the baseline on "
              "this kind of machine (`bench baseline`)", file=sys.stderr)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in dict.fromkeys(r["verdict"] for r in rows)}
    bad = [r for r in rows if r["verdict"] in FAILING_VERDICTS]
    print("bench compare: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          ("" if not bad else "; failing: " + failing_list(rows)), file=sys.stderr)
    return (EXIT_RUN_FAILED if bad else EXIT_OK), rows


def failing_list(rows: list[dict]) -> str:
    from bench.gate import FAILING_VERDICTS

    return "; ".join(f"{r['metric']} {r['verdict']}" + (f" {r['change']:+.1%}" if r["change"] is not None else "")
                     for r in rows if r["verdict"] in FAILING_VERDICTS)


def cmd_compare(args) -> int:
    from bench.gate import latest_sweep, read_runs_file

    if args.aa:
        return compare_aa(args)
    if not args.baseline:
        raise UsageError("give --baseline FILE (from `bench baseline`), or --aa to calibrate on stored sweeps")
    if args.store and args.current:
        raise UsageError("give either --store (the latest sweep stored there) or --current FILE, not both")
    baseline = read_runs_file(args.baseline, "baseline")
    if args.current:
        current = read_runs_file(args.current, "current")["records"]
    else:
        store = open_store(args)
        sweep_id, current = latest_sweep(store.records(), args.sweep)
        if not current:
            raise UsageError(f"no sweep {'named ' + args.sweep + ' ' if args.sweep else ''}in {store.path}; "
                             "run `bench sweep` (or `bench regress`) first, or give --current FILE")
        print(f"bench compare: baseline {args.baseline} (sweep {baseline.get('sweep_id')}) vs sweep "
              f"{sweep_id} in {store.path}", file=sys.stderr)
    code, _ = compare_and_print(baseline, current, args.json)
    return code


def compare_aa(args) -> int:
    from bench.gate import aa_rates, format_aa

    if args.baseline or args.current:
        raise UsageError("--aa compares the sweeps of --store with each other; drop --baseline/--current")
    store = open_store(args)
    sweeps: dict[str, list[dict]] = {}
    for rec in store.records():
        if rec["spec"].get("sweep_id"):
            sweeps.setdefault(rec["spec"]["sweep_id"], []).append(rec)
    if len(sweeps) < 2:
        raise UsageError(f"--aa needs two sweeps or more of the same matrix in {store.path} "
                         f"(found {len(sweeps)}); run `bench sweep` again with the same arguments")
    rows, pairs = aa_rates(sweeps)
    if args.json:
        print(json.dumps({"pairs": pairs, "sweeps": list(sweeps), "rows": rows}, indent=1))
    else:
        print(format_aa(rows, pairs))
    return EXIT_OK


def confirm_failures(records: list[dict], rows: list[dict], store, title: str) -> list[dict]:
    """Run every case behind a failing metric again, as many times as it ran, and add those runs to the
    comparison: a real slowdown reproduces, a chance one (a burst of other work on a shared machine)
    rarely survives twice the runs."""
    from bench.gate import FAILING_VERDICTS
    from bench.render import one_line
    from bench.runner import execute
    from bench.spec import RunSpec

    failing = [r for r in rows if r["verdict"] in FAILING_VERDICTS]
    by_id = {r["run_id"]: r for r in records}
    cases: dict[tuple, list[RunSpec]] = {}
    for run_id in dict.fromkeys(i for r in failing for i in r["run_ids"]):
        spec = RunSpec.from_dict(by_id[run_id]["spec"])
        cases.setdefault((spec.task, spec.backend, spec.workload, spec.world_size), []).append(spec)
    plan = [dataclasses.replace(spec, repeat=spec.repeat + len(specs)) for specs in cases.values() for spec in specs]
    print(f"{title}: confirming {len(failing)} failing metric(s): {len(cases)} case(s) run again, "
          f"{len(plan)} run(s)", file=sys.stderr, flush=True)
    again = []
    for i, spec in enumerate(plan, 1):
        what = spec.workload if spec.task == "train" else "communication sweep"
        record = execute(spec, store, show_progress=False)
        print(f"[again {i}/{len(plan)}] {spec.backend} {what} world {spec.world_size}: {one_line(record)}",
              file=sys.stderr, flush=True)
        again.append(record)
        if record["status"] == "interrupted":
            raise Interrupted()
    return records + again


def cmd_baseline(args) -> int:
    from bench.gate import BASELINE_REPEATS, REGRESS_SWEEP, latest_sweep, write_baseline

    if args.hot_paths_only:
        return save_hot_paths(args.dir)
    if args.from_store:
        from bench.store import Store

        sweep_id, records = latest_sweep(Store(args.from_store).records(), args.sweep)
        if not records:
            raise UsageError(f"no sweep in {args.from_store}; run `bench sweep` or drop --from-store")
        matrix = None
    else:
        sweep_id, records, _ = regress_sweep(args, "bench baseline", args.repeats or BASELINE_REPEATS)
        matrix = ["bench", "sweep", *REGRESS_SWEEP, "--repeats", str(args.repeats or BASELINE_REPEATS)]
    not_ok = [r for r in records if r["status"] != "ok"]
    if not_ok:
        print(f"bench baseline: {len(not_ok)} run(s) not ok ({', '.join(r['spec']['backend'] + ' ' + r['status'] for r in not_ok)}); "
              "a baseline must be clean: fix them and run again", file=sys.stderr)
        return EXIT_RUN_FAILED
    path = write_baseline(os.path.join(args.dir, "cpu-gloo.json"), records, sweep_id, matrix)
    print(f"bench baseline: {len(records)} runs of sweep {sweep_id} written to {path}", file=sys.stderr)
    return EXIT_OK if args.no_hot_paths else save_hot_paths(args.dir)


def save_hot_paths(folder: str) -> int:
    from bench.gate import run_hot_paths

    hot = os.path.join(folder, "hot-paths.json")
    code = run_hot_paths(save_to=hot)
    print(f"bench baseline: harness hot paths {'written to ' + hot if code == 0 else 'failed'}", file=sys.stderr)
    return EXIT_OK if code == 0 else EXIT_RUN_FAILED


def cmd_regress(args) -> int:
    from bench.gate import REGRESS_REPEATS, read_runs_file, run_hot_paths

    runs_file, hot_file = os.path.join(args.dir, "cpu-gloo.json"), os.path.join(args.dir, "hot-paths.json")
    baseline = read_runs_file(runs_file, "baseline")  # before minutes of runs, not after
    if not args.no_hot_paths and not os.path.isfile(hot_file):
        raise UsageError(f"{hot_file} does not exist; make it with `bench baseline` (or pass --no-hot-paths)")
    _, records, store = regress_sweep(args, "bench regress", args.repeats or REGRESS_REPEATS)
    if any(r["status"] == "interrupted" for r in records):
        return EXIT_INTERRUPTED
    # with --json, stdout carries only the final comparison
    code, rows = compare_and_print(baseline, records, as_json=False, out=sys.stderr if args.json else None)
    if code and args.confirm:
        records = confirm_failures(records, rows, store, "bench regress")
        print("bench regress: after running them again:", file=sys.stderr)
        code, rows = compare_and_print(baseline, records, as_json=False, out=sys.stderr if args.json else None)
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    failures = [failing_list(rows)] if code else []
    if not args.no_hot_paths:
        hot_code = run_hot_paths(compare_with=hot_file)
        print(f"bench regress: harness hot paths {'within' if hot_code == 0 else 'OUTSIDE'} their "
              f"thresholds against {hot_file}", file=sys.stderr)
        if hot_code:
            failures.append("harness hot paths slower than hot-paths.json allows (table above)")
    print(f"bench regress: FAILED: {'; '.join(failures)}" if failures else "bench regress: passed", file=sys.stderr)
    return EXIT_RUN_FAILED if failures else EXIT_OK


def cmd_doctor(args) -> int:
    from bench.doctor import doctor_lines

    print("\n".join(doctor_lines()))
    return EXIT_OK


def build_parser() -> Parser:
    parser = Parser(prog="bench", description="Measure PyTorch Distributed Elastic vs Horovod vs a "
                                              "parameter server, under identical conditions.")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser, metavar="VERB")

    p = verbs.add_parser("run", help="one run of one backend and workload")
    p.add_argument("--backend", default="elastic", help="elastic (default), horovod, ps or single")
    p.add_argument("--workload", default="mnist_mlp", help="mnist_mlp (default) or resnet18")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = verbs.add_parser("sweep", help="backends x workloads x world sizes, every run stored")
    p.add_argument("--backend", help="comma-separated backends (default: every compared backend)")
    p.add_argument("--workload", help="comma-separated workloads (default: all)")
    p.add_argument("--world-sizes", type=positive_list,
                   help="comma-separated world sizes (default: 1, 2, 4 ... up to --nproc or --gpus)")
    p.add_argument("--repeats", type=int, default=1,
                   help="run every case this many times, in rounds (the regression gate's unit of replication)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the plain single-process run that scaling is also measured against")
    p.add_argument("--report", metavar="FILE",
                   help="after the sweep, write the HTML report there, plus a timestamped copy beside it")
    p.add_argument("--no-comm", action="store_true",
                   help="skip the short communication sweep run for each backend and world size above 1")
    add_comm_options(p, max_default="1M")
    add_run_options(p)
    p.set_defaults(func=cmd_sweep)

    p = verbs.add_parser("allreduce", help="communication sweep over message sizes, as nccl-tests prints it")
    p.add_argument("--backend", default="all", help="elastic, horovod, ps, a comma-separated list, or all "
                                                    "(default)")
    p.add_argument("--nproc", type=int, help="CPU processes (gloo); default min(2, cores)")
    p.add_argument("--gpus", type=int, help="one rank per GPU")
    p.add_argument("--threads", type=int, help="threads per rank (default: cores / ranks)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more threads than cores")
    p.add_argument("--timeout", type=float, help="deadline per backend in seconds (default 900)")
    add_comm_options(p)
    add_backend_options(p)
    add_store(p)
    p.add_argument("--json", action="store_true", help="print the record(s) as JSON on stdout, nothing else")
    p.set_defaults(func=cmd_allreduce)

    p = verbs.add_parser("list", help="stored runs as a table")
    add_store(p)
    p.add_argument("--last", type=int, help="only the last N runs")
    p.set_defaults(func=cmd_list)

    p = verbs.add_parser("report", help="write a single-file HTML report")
    add_store(p)
    p.add_argument("-o", "--output", default=os.path.join("reports", "report.html"),
                   help="HTML file to write (default reports/report.html)")
    p.add_argument("--where", action="append", metavar="KEY=V1,V2",
                   help="keep runs whose KEY (a `bench list` column: backend, workload, world_size, "
                        "device, status, sweep_id, ...) is one of the values; repeatable")
    p.set_defaults(func=cmd_report)

    p = verbs.add_parser("compare", help="compare runs with a baseline, metric by metric; exit 1 on a "
                                         "significant regression")
    p.add_argument("--baseline", metavar="FILE", help="baseline file (from `bench baseline`)")
    p.add_argument("--current", metavar="FILE", help="runs to judge, as a baseline-format file")
    add_store(p)
    p.add_argument("--sweep", metavar="ID", help="with --store: this sweep (default: the latest one)")
    p.add_argument("--aa", action="store_true",
                   help="A/A calibration: compare every pair of sweeps in --store (same code, same machine) "
                        "and print how often the gate would have failed")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.set_defaults(func=cmd_compare)

    def add_regress_options(p):
        p.add_argument("--dir", default=os.path.join("results", "baselines"),
                       help="baseline folder (default results/baselines)")
        p.add_argument("--no-hot-paths", action="store_true", help="skip the harness's own benchmarks")
        p.add_argument("--timeout", type=float, help="deadline per run in seconds (default 900)")
        p.add_argument("--repeats", type=int, help="runs of every case (regress 3, baseline 5)")
        add_store(p)

    p = verbs.add_parser("regress", help="run the fixed CPU/gloo regression matrix and compare it with "
                                         "the committed baseline")
    add_regress_options(p)
    p.add_argument("--inject-delay", metavar="DELAY",
                   help="test-only: slow every compared backend's steps (20%% or 5ms) to see the gate fail")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="fail on the first comparison; by default the runs behind a failing metric are run "
                        "once more and the gate fails only if the failure repeats")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.set_defaults(func=cmd_regress)

    p = verbs.add_parser("baseline", help="refresh the regression baseline from a run of the fixed matrix")
    add_regress_options(p)
    p.add_argument("--from-store", metavar="PATH", help="take an existing sweep from this store instead of "
                                                        "running the matrix")
    p.add_argument("--sweep", metavar="ID", help="with --from-store: this sweep (default: the latest)")
    p.add_argument("--hot-paths-only", action="store_true", help="refresh only hot-paths.json")
    p.set_defaults(func=cmd_baseline)

    p = verbs.add_parser("fault", help="inject a fault (or a joining worker) into an elastic run and measure "
                                       "detection, recovery and work lost")
    p.add_argument("--backend", default="elastic", help="elastic (default) or horovod")
    p.add_argument("--workload", default="mnist_mlp", help="mnist_mlp (default) or resnet18")
    p.add_argument("--nproc", type=int, help="worker processes at the start (default min(2, cores))")
    p.add_argument("--gpus", type=int, help=argparse.SUPPRESS)
    g = p.add_argument_group("the fault")
    g.add_argument("--kill-rank", type=int, default=1, help="rank that receives the signal (1)")
    g.add_argument("--at-step", type=int, help="the signal comes when that rank has completed this many steps "
                                               "(4.5 x the workload's window: 225 for mnist_mlp, 45 for resnet18)")
    g.add_argument("--signal", default="KILL", type=str.upper, choices=["KILL", "TERM", "STOP"],
                   help="KILL (a crash), TERM (a polite stop), STOP (a hung worker) (KILL)")
    g.add_argument("--join", action="store_true", help="scale-up instead: at --at-step one more worker "
                                                       "joins (a second torchrun agent; a new Horovod host)")
    g.add_argument("--max-restarts", type=int, default=3,
                   help="torchrun --max-restarts; Horovod --reset-limit (3)")
    g.add_argument("--checkpoint-every", type=int,
                   help="steps between checkpoints (elastic) or state commits (Horovod) (2 x the workload's "
                        "window: 100 for mnist_mlp, 20 for resnet18)")
    g.add_argument("--steps", type=int, help="steps to train in all (default at-step + 3 x checkpoint-every)")
    g.add_argument("--comm-timeout", type=float, default=10.0,
                   help="collective timeout in seconds, how soon a stopped peer is noticed (10)")
    g.add_argument("--recovery-timeout", type=float, default=90.0,
                   help="seconds after the fault with no training step before the run is called hung (90)")
    g = p.add_argument_group("placement and run")
    g.add_argument("--threads", type=int, help="threads per worker (default cores / workers)")
    g.add_argument("--oversubscribe", action="store_true", help="allow more threads than cores")
    g.add_argument("--batch-size", type=int, help="per-worker batch (the workload's)")
    g.add_argument("--image-size", type=int, help="input side for image models")
    g.add_argument("--seed", type=int, help="seed of model and data (0)")
    g.add_argument("--lr", type=float, help="SGD learning rate (0.01)")
    g.add_argument("--timeout", type=float, help="deadline for the whole run in seconds (900)")
    g.add_argument("--save-params", action="store_true",
                   help="keep the parameters each process resumed from, and the final ones, in the run directory")
    add_backend_options(p)
    add_store(p)
    p.add_argument("--json", action="store_true", help="print the record as JSON on stdout, nothing else there")
    p.set_defaults(func=cmd_fault)

    p = verbs.add_parser("doctor", help="what this machine offers, and which backends can run")
    p.set_defaults(func=cmd_doctor)
    return parser


def _raise_interrupted(signum, frame):
    raise Interrupted()


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C and SIGTERM end runs cleanly, even where a shell started us with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchError as exc:
        print(f"bench {args.verb}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted):
        print(f"bench {args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, and the traceback on request
        if os.environ.get("BENCH_DEBUG"):
            raise
        print(f"bench {args.verb}: internal error: {type(exc).__name__}: {exc} "
              "(set BENCH_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3
