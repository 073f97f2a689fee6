"""`bench`: run, sweep, list, report, doctor. Bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
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


SPEC_OPTIONS = ("batch_size", "image_size", "threads", "oversubscribe", "inject", "warmup_steps",
                "steps_per_window", "windows", "seed", "lr", "timeout", "data", "data_dir",
                "cpu_bind", "save_params")


def spec_options(args) -> dict:
    options = {k: getattr(args, k) for k in SPEC_OPTIONS if getattr(args, k) is not None}
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
    from bench.runner import execute
    from bench.spec import build_spec, resolve_device

    device, world = resolve_device(args.nproc, args.gpus)
    spec = build_spec(backend=args.backend, workload=args.workload, world_size=world, device=device,
                      **spec_options(args))
    store = open_store(args)
    print(f"bench run: {describe_spec(spec)}", file=sys.stderr, flush=True)
    record = execute(spec, store)
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        print("\n".join(summary_lines(record)))
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


def cmd_sweep(args) -> int:
    from bench.backends import BASELINE, COMPARED
    from bench.render import one_line
    from bench.runner import execute, new_run_id
    from bench.spec import build_spec, default_threads, resolve_device

    if args.backend:
        backends = args.backend.split(",")
    else:  # every compared backend that can run here; say which cannot, and why
        from bench.backends import get_backend

        backends = []
        for name in COMPARED:
            problem = get_backend(name).unavailable_reason("cuda" if args.gpus else "cpu")
            if problem:
                print(f"bench sweep: skipping {name}: {problem}", file=sys.stderr)
            else:
                backends.append(name)
    workloads = args.workload.split(",") if args.workload else None
    if workloads is None:
        from workloads import WORKLOADS

        workloads = list(WORKLOADS)
    device, limit = resolve_device(args.nproc, args.gpus)
    sizes = args.world_sizes or sweep_world_sizes(limit)
    options = spec_options(args)
    # One thread count for the whole sweep, so world sizes differ only in their number of workers.
    options.setdefault("threads", default_threads(device, max(sizes)))
    sweep_id = new_run_id()
    plan = []
    for workload in workloads:
        if not args.no_baseline and BASELINE not in backends:
            plan.append(build_spec(backend=BASELINE, workload=workload, world_size=1, device=device,
                                   **options))
        for backend in backends:
            for size in sizes:
                plan.append(build_spec(backend=backend, workload=workload, world_size=size,
                                       device=device, **options))
    if not args.no_comm:
        from bench.backends import get_backend

        comm_backends = [b for b in backends if get_backend(b).comm_ops]
        plan += comm_plan(args, comm_backends, device, [n for n in sizes if n > 1], sweep_id)
    store = open_store(args)
    records = []
    print(f"bench sweep {sweep_id}: {len(plan)} runs ({', '.join(backends)} x {', '.join(workloads)} "
          f"x world sizes {', '.join(map(str, sizes))}) -> {store.path}", file=sys.stderr, flush=True)
    for i, spec in enumerate(plan, 1):
        spec.sweep_id = sweep_id
        what = spec.workload if spec.task == "train" else "communication sweep"
        head = f"[{i}/{len(plan)}] {spec.backend} {what} world {spec.world_size}"
        print(f"{head} ...", file=sys.stderr, flush=True)
        record = execute(spec, store, show_progress=False)
        records.append(record)
        print(f"{head}: {one_line(record)}", file=sys.stderr, flush=True)
        if record["status"] == "interrupted":
            print(f"bench sweep: interrupted; {len(plan) - i} run(s) not started", file=sys.stderr)
            break
    if args.json:
        print(json.dumps(records, indent=1))
    failed = [r for r in records if r["status"] != "ok"]
    print(f"bench sweep {sweep_id}: {len(records) - len(failed)} ok, {len(failed)} not ok; "
          f"`bench list --store {store.path}` shows them", file=sys.stderr)
    if args.report:
        from bench.report import write_report_with_copy

        latest, stamped = write_report_with_copy(store, args.report)
        print(f"report written to {latest} (and {stamped})", file=sys.stderr)
    return status_exit([r["status"] for r in records])


def comm_plan(args, backends: list[str], device: str, sizes: list[int], sweep_id=None) -> list:
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
                            timeout=args.timeout, backend_options=backend_options(args), sweep_id=sweep_id)
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
