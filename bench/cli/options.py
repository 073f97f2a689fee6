"""Options that several verbs take, each declared once, handed to the verbs as argparse parent parsers.

A verb picks the groups it needs (`parents=[...]`). The defaults shown in help come from the code that
owns them: bench.core.spec.DEFAULTS, bench.rank.collectives.COMM_DEFAULTS, the backend and workload registries.

Every option that takes a value is declared with values it must refuse (`add`: invalid=...), or with the
reason every string is valid; tests/test_bad_input_table.py gives each to every verb that takes the option.
"""

from __future__ import annotations

import argparse
import math

from bench.core.errors import UsageError
from bench.core.hostlist import parse_hosts, read_hostfile
from bench.core.inputs import NAME_RULE, name_problem, shown
from bench.core.registry import BACKEND_MODULES, DEFAULT_BACKEND, get_backend
from bench.core.spec import CPU_BINDS, DEFAULTS, MAX_THREADS_PER_CORE, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS
from bench.core.store import DEFAULT_STORE
from bench.harness.cores import DEFAULT_WAIT_S
from bench.harness.workload_check import CHECK_TIMEOUT_S
from bench.rank.collectives import COMM_DEFAULTS, DTYPES, OPS, parse_bytes

BACKEND_OPTION = "backend_option:"  # dest prefix of a backend plug-in's own options


LONG_PATH = "/" + "a" * 300 + ".sqlite"  # a file name longer than file systems allow (255 bytes)


def add(container, *flags, invalid=(), valid_because: str | None = None, needs=(), **kwargs) -> argparse.Action:
    """container.add_argument(*flags, **kwargs), with the values the option must refuse kept on its action
    (`invalid`), or why every string is a valid value (`valid_because`); `needs`: the other arguments it
    applies with (--data-dir takes effect with --data mnist only)."""
    action = container.add_argument(*flags, **kwargs)
    action.invalid, action.valid_because, action.needs = tuple(invalid), valid_because, tuple(needs)
    return action


# ---------------------------------------------------------------- value types, checked at parse time
def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer of at least 1")
    return value


def count(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer of 0 or more")
    return value


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive, finite number")
    return value


def nonnegative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of 0 or more")
    return value


def at_most(parse, most: float, words: str):
    """A value type: what `parse` takes, up to `most` (`words`: that bound as help and errors say it). Every duration
    option has one (docs/cli.md says each)."""
    def bounded(text: str) -> float:
        value = parse(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"{text!r}: at most {words}")
        return value

    return bounded


# a timeout or a wait in seconds: positive (or 0 where it may be), at most MAX_TIMEOUT_S (bench.core.spec says why)
timeout_seconds = at_most(positive_float, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS)
wait_seconds = at_most(nonnegative_float, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS)
TOO_LONG = ["1e10", f"{MAX_TIMEOUT_S + 1:g}"]  # what every timeout option refuses past its bound


def world_sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: world sizes must be integers of 1 or more")
    return values


def nonempty_path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text


def nonempty_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a name, got an empty string")
    return text


def id_name(text: str) -> str:
    """A sweep's (or run's) id: it names folders and table cells (bench.core.inputs)."""
    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a name ({problem}); names are {NAME_RULE}")
    return text


def id_names(text: str) -> str:
    """Comma-separated ids, each a name (empty items are dropped, as comma_list drops them)."""
    for item in text.split(","):
        if item:
            id_name(item)
    return text


def host_list(text: str):
    """--hosts h1:2,h2:2 as bench.cluster.hosts.Host values."""
    try:
        return parse_hosts(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def hostfile(text: str):
    try:
        return read_hostfile(nonempty_path(text))
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def byte_size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---------------------------------------------------------------- the declarations
def _names(names) -> str:
    return ", ".join(names)


def declarations(run_defaults: dict | None = None) -> dict[str, dict]:
    """flag -> `add` keywords: every shared option is declared here, and only here, with the defaults of the
    code that owns them (read when a parser is built) and the values it refuses."""
    measured = {**DEFAULTS, **(run_defaults or {})}  # a verb may measure with its own defaults (a sweep)
    from workloads import WORKLOADS
    from workloads.data.names import LOADERS, SOURCES

    return {
        # what runs
        "--backend": dict(default=DEFAULT_BACKEND, help=f"one of {_names(BACKEND_MODULES)} (default %(default)s: "
                                                         "a run measures one backend, and this is the first of the "
                                                         "question's pair)",
                          invalid=["tensorflow", ""]),
        "--workload": dict(default=next(iter(WORKLOADS)),  # the registry's first: the quick one
                           help=f"one of {_names(WORKLOADS)} (default %(default)s), or your own: PKG.MODULE:NAME "
                                "or path/to/file.py:NAME (README, 'Compare on your own model')",
                           invalid=["gpt5", "", "missing.py:W", "no_such_module:W"]),
        # placement
        "--nproc": dict(type=positive_int, help="CPU worker processes (gloo); default min(2, cores); their threads "
                                                f"at most the cores, or {MAX_THREADS_PER_CORE} a core with "
                                                "--oversubscribe",
                        invalid=["0", "-1", "two", "1.5", "", "100000"], needs=["--oversubscribe"]),
        "--gpus": dict(type=positive_int, help="one worker per GPU (NCCL) (default: none, CPU processes)",
                       invalid=["0", "-1", "x"]),
        "--threads": dict(type=positive_int, help="threads per worker, set for every backend alike "
                                                  "(default: cores / largest world size)",
                           invalid=["0", "-1", "x"]),
        "--cpu-bind": dict(choices=CPU_BINDS,
                           help="cores: pin each worker (every thread of it) to its own cores; none: leave them to the "
                                "scheduler; auto (default): cores for CPU workers on one host that fit its cores, "
                                "none on GPUs, with --oversubscribe, across hosts, on an existing Ray cluster and in "
                                "fault runs", invalid=["all"]),
        "--oversubscribe": dict(action="store_true", help="allow more worker threads than cores, up to "
                                                          f"{MAX_THREADS_PER_CORE} a core (measures contention)"),
        # across hosts
        "--hosts": dict(type=host_list, metavar="H1:N,H2:N",
                        help="run across these hosts, N processes each at most (horovodrun/mpirun -H); the world "
                             "size is the sum unless --nproc chooses fewer",
                        invalid=["", ",", "h1:0", "h1:x", "bad host:1", "h1:1,h1:2", "h1\n:2"]),
        "--hostfile": dict(type=hostfile, metavar="FILE", help="the hosts, one `host slots=N` per line (as mpirun "
                                                               "and horovodrun read it)",
                           invalid=["", "/nonexistent/hostfile"]),
        "--link": dict(metavar="RATE[:DELAY]", help="shape every host's link with tc for each run: a rate limit "
                                                     "and a delay, such as 1gbit:0.1ms or 100mbit (needs --hosts)",
                       invalid=["", "fast", "1gbit:soon", "0mbit", "1gbit",  # 1gbit alone: only across hosts
                                "1gbit\n:1ms", "1gbit:1ms\n:"]),
        "--scheduler": dict(choices=("slurm", "none"),
                            help="slurm: run across the nodes of the Slurm allocation bench runs in (the default "
                                 "inside one, that is where SLURM_JOB_ID is set); none: ignore an allocation",
                            invalid=["pbs", "slurm"]),  # slurm here: not inside an allocation
        "--iface": dict(type=nonempty_name, metavar="NAME", help="network interface every backend uses across hosts (default: the one "
                                             "the hosts route to each other through)",
                        invalid=["", "lo"]),  # "lo" without --hosts: the option applies across hosts only
        # measurement
        "--batch-size": dict(type=positive_int, help="per-worker batch (default: the workload's)",
                             invalid=["0", "-1", "x"]),
        "--warmup-steps": dict(type=positive_int,
                               help=f"untimed steps first (default {measured['warmup_steps']}, at least 1)",
                               invalid=["0", "x"]),
        "--steps-per-window": dict(type=positive_int, help="steps timed per window (default: the workload's, about "
                                                           "a second of work or less)", invalid=["0", "x"]),
        "--windows": dict(type=positive_int, help=f"timed windows (default {measured['windows']}, at least 2)",
                          invalid=["0", "1", "x"]),
        "--seed": dict(type=count, help=f"seed of the model and the data (default {DEFAULTS['seed']})",
                       invalid=["-1", "x", "1.5"]),
        "--lr": dict(type=positive_float, help=f"SGD learning rate (default {DEFAULTS['lr']}, momentum "
                                               f"{DEFAULTS['momentum']})", invalid=["0", "-1", "nan", "inf", "x"]),
        "--timeout": dict(type=timeout_seconds, help=f"deadline per run in seconds (default {DEFAULTS['timeout']:g}, "
                                                     f"at most {MAX_TIMEOUT_WORDS})",
                          invalid=["0", "-1", "nan", "inf", "x", *TOO_LONG]),
        "--check-timeout": dict(type=timeout_seconds,
                                help="seconds a workload of your own may take to load, build and take a batch, in a "
                                     "process of its own before anything runs; past them it is refused, nothing "
                                     f"started (default {CHECK_TIMEOUT_S:g}; it never exceeds --timeout, and is at "
                                     f"most {MAX_TIMEOUT_WORDS}; the built-in workloads need no check)",
                                invalid=["0", "-1", "nan", "inf", "x", *TOO_LONG]),
        # data
        "--data": dict(choices=SOURCES, help=f"default {DEFAULTS['data']}; digits is scikit-learn's, mnist and "
                                             "imagefolder need --data-dir", invalid=["imagenet"]),
        "--data-dir": dict(metavar="DIR", help="folder with MNIST's IDX files, or an ImageFolder tree (one "
                                               "sub-folder of images per class); nothing is downloaded",
                           needs=["--data", "mnist"],
                           invalid=["/nonexistent/mnist", "", "/"]),
        "--loader": dict(choices=LOADERS, help="how in-memory data reach the model: memory (held on the device, "
                                               "never the limit) or dataloader (torch's DataLoader with a "
                                               "DistributedSampler, as training scripts read data) (default memory)",
                         invalid=["disk"]),
        "--loader-workers": dict(type=count, help="DataLoader processes per worker, with --loader dataloader or "
                                                  "--data imagefolder (default 0: in the worker)", invalid=["-1", "x"]),
        "--image-size": dict(type=positive_int, help="input side for image models (default: the workload's CPU or "
                                                     "GPU size)", invalid=["0", "x", "8"]),
        # testing the harness
        "--inject": dict(metavar="KIND:RANK:STEP", help="test-only fault: hang, crash (raise), kill (SIGKILL) or exit "
                                                         "(os._exit(0), without a word) rank RANK at step STEP",
                         invalid=["explode:1:1", "crash:x:1", "crash:1", "crash:99:1", "crash:-1:1"]),
        "--inject-delay": dict(metavar="DELAY",
                               help="test-only slowdown: every worker sleeps DELAY in every timed step, a share of "
                                    "its warm-up median step time (20%%) or a duration (5ms), under 10000%% or 100 s; "
                                    "a sweep never slows the plain single-process loop it measures the others against",
                               invalid=["x", "20", "-5ms", "100s", "10000%", "nan%", "infs"]),
        "--save-params": dict(action="store_true", help="save each rank's parameters in the run directory (a fault "
                                                        "run: also those each process resumed from)"),
        "--save-model": dict(metavar="PATH", help="after training, the first worker writes the model's state_dict "
                                                  "there (torch.save, atomically), under every backend (default: "
                                                  "not saved)",
                             invalid=["/nonexistent/folder/model.pt", "", "/"]),
        # communication sweep
        "--min-bytes": dict(type=byte_size, default=COMM_DEFAULTS["min_bytes"],
                            help="smallest message: 4, 8K, 64M, 1G (default %(default)s)",
                            invalid=["0", "-1", "x", "1Q", "1.5K"]),
        "--max-bytes": dict(type=byte_size, default=COMM_DEFAULTS["max_bytes"],
                            help="largest message (default %(default)s)", invalid=["0", "-1", "x", "1Q", "1.5K"]),
        "--dtype": dict(default=COMM_DEFAULTS["dtype"], help=f"one of {_names(DTYPES)} (default %(default)s)",
                        invalid=["float128", ""]),
        "--ops": dict(default=COMM_DEFAULTS["ops"], help=f"comma-separated, from {_names(OPS)} (default %(default)s)",
                      invalid=["nope", "allreduce,nope", "", ","]),
        "--warmup-iters": dict(type=count, default=COMM_DEFAULTS["warmup_iters"],
                               help="untimed ops per size (default %(default)s)", invalid=["-1", "x"]),
        "--iters": dict(type=positive_int, default=COMM_DEFAULTS["iters"],
                        help="timed ops per size (default %(default)s)", invalid=["0", "x"]),
        # sharing the machine (bench.harness.cores)
        "--wait-for-cores": dict(type=wait_seconds, default=DEFAULT_WAIT_S, metavar="SECONDS",
                                 help="while another bench run on this machine holds the cores a run needs, wait up to "
                                      "this long for them (in the order runs arrived), then refuse with exit 2 "
                                      f"(default %(default)g; 0: refuse at once; at most {MAX_TIMEOUT_WORDS})",
                                 invalid=["-1", "nan", "inf", "x", *TOO_LONG]),
        "--allow-shared": dict(action="store_true",
                               help="run at once even where another bench run holds the cores: both runs' records "
                                    "are marked (shared_with) and left out of verdicts and the gate"),
        # results
        "--store": dict(type=nonempty_path, metavar="FILE",
                        help=f"results store (SQLite file); default $BENCH_STORE, else {DEFAULT_STORE}",
                        invalid=["", "/", LONG_PATH]),
        "--json": dict(action="store_true", help="print the result as JSON on stdout (the record, the records or the "
                                                 "comparison), and nothing else there"),
        "--sweep": dict(type=id_name, metavar="ID", help="the sweep to take from the store (default: the latest one)",
                        invalid=["", "../x", "a/b", "x y"]),
        "--output": dict(short="-o", metavar="FILE", type=nonempty_path,
                         help="after the runs, write the HTML report of the store there, plus a timestamped copy "
                              "beside it (default: no report; `bench report` writes one any time)",
                         invalid=["", "/", LONG_PATH]),
        "--repeats": dict(type=positive_int, help="run every case this many times, in rounds (the regression gate's "
                                                  "unit of replication; default %(default)s)", invalid=["0", "x"]),
    }


PLACEMENT = ("--nproc", "--gpus", "--threads", "--cpu-bind", "--oversubscribe")
HOSTS = ("--hosts", "--hostfile", "--scheduler", "--iface", "--link")
MEASUREMENT = ("--batch-size", "--warmup-steps", "--steps-per-window", "--windows", "--seed", "--lr", "--timeout",
               "--check-timeout")
DATA = ("--data", "--data-dir", "--loader", "--loader-workers", "--image-size")
HARNESS = ("--inject", "--inject-delay", "--save-params")
SHARING = ("--wait-for-cores", "--allow-shared")
COMM = ("--min-bytes", "--max-bytes", "--dtype", "--ops", "--warmup-iters", "--iters")


def parent(title: str | None, flags, *, hidden=(), helps: dict[str, str] | None = None,
           run_defaults: dict | None = None, **defaults) -> argparse.ArgumentParser:
    """A parent parser declaring `flags` (in an argument group `title`, if given). `hidden` flags are still
    parsed (so a verb can refuse them with a clear message, or a test use them) but left out of --help; `helps`:
    flag -> this verb's own help (a default that differs here, and why); `defaults` replace the declared defaults
    for this parser only (a fresh parent is built for every verb)."""
    declared = declarations(run_defaults)
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group(title) if title else p
    for flag in flags:
        kwargs = dict(declared[flag], **({"help": helps[flag]} if helps and flag in helps else {}))
        short = kwargs.pop("short", None)
        if flag in hidden:
            kwargs["help"] = argparse.SUPPRESS
        add(g, *([short] if short else []), flag, **kwargs)
    p.set_defaults(**defaults)
    return p


def store(help: str | None = None) -> argparse.ArgumentParser:
    """--store; `help`: what it means for a verb whose default store is not the results store."""
    return parent(None, ["--store"], helps={"--store": help} if help else None)


def report_output() -> argparse.ArgumentParser:
    """-o/--output: the report page a verb writes after its runs."""
    return parent("output", ["--output"])


def json_output() -> argparse.ArgumentParser:
    return parent(None, ["--json"])


def placement(flags=PLACEMENT, **kwargs) -> argparse.ArgumentParser:
    return parent("placement", flags, **kwargs)


def hosts() -> argparse.ArgumentParser:
    return parent("across hosts (ssh without a password to each; the same checkout path on every host)", HOSTS)


def measurement(run_defaults: dict | None = None) -> argparse.ArgumentParser:
    return parent("measurement", MEASUREMENT, run_defaults=run_defaults)


def data() -> argparse.ArgumentParser:
    return parent("data", DATA)


TEST_ONLY = ("--inject", "--inject-delay")  # accepted, but not shown: the tests' means of making a run fail or slow


def harness() -> argparse.ArgumentParser:
    return parent("testing the harness", HARNESS, hidden=TEST_ONLY)


def sharing() -> argparse.ArgumentParser:
    """Every verb that runs something on this machine: what its runs do where another bench run holds the cores."""
    return parent("sharing the machine (one benchmark at a time per set of cores)", SHARING)


def comm(**defaults) -> argparse.ArgumentParser:
    return parent("communication sweep (nccl-tests conventions)", COMM, **defaults)


def backend_options(backends=None, fault: bool = False) -> argparse.ArgumentParser:
    """Each backend's own knobs, from its plug-in (of `backends`, default all); a run records every value, given
    or default. An option of fault runs only (BackendOption.fault_only) is shown in the help of `fault` (the verb
    that builds this with `fault`) and accepted, unshown, elsewhere."""
    p = argparse.ArgumentParser(add_help=False)
    added = set()  # an option two backends share (the DDP bucket of elastic and ray) is one flag, under its first
    for name in backends or BACKEND_MODULES:
        backend = get_backend(name)
        mine = [opt for opt in backend.options if opt.flag not in added]
        if not mine:
            continue
        g = p.add_argument_group(f"{name} backend options")
        for opt in mine:
            added.add(opt.flag)
            owners = [b for b in (backends or BACKEND_MODULES) if opt.name in {o.name for o in get_backend(b).options}]
            add(g, opt.flag, dest=BACKEND_OPTION + opt.name, choices=opt.choices,
                metavar=None if opt.choices else opt.name.upper(),
                type=finite_float if opt.type is float else opt.type,
                help=argparse.SUPPRESS if opt.fault_only and not fault else
                (f"{opt.help} (default{':' if opt.default_words else ''} {opt.shown_default})" +
                 (f"; backends {', '.join(owners)}" if len(owners) > 1 else "")).replace("%", "%%"),
                invalid=opt.invalid, needs=["--backend", name])
    return p


def training(run_defaults: dict | None = None) -> list[argparse.ArgumentParser]:
    """Everything a training run takes: `bench run` and `bench sweep` (run_defaults: the sweep's own
    warm-up and windows, shown in its help)."""
    return [placement(), hosts(), measurement(run_defaults), data(), harness(), backend_options(), sharing(), store(),
            json_output()]
