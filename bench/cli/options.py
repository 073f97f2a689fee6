"""Options that several verbs take, each declared once (with its group), handed to the verbs as argparse parent
parsers.

A verb picks the groups it needs (`parents=[...]`: placement(), hosts(), ...), or some flags of them (`parent`). One
flag has one meaning on every verb: the same value type, unit and choices; where a verb's default differs, its help
says why (tests/test_cli_parser.py walks every verb's parser for it). The defaults shown in help come from the code
that owns them: bench.core.spec.DEFAULTS, bench.rank.collectives.COMM_DEFAULTS, the backend and workload registries.

Every option that takes a value is declared with values it must refuse (`add`: invalid=...), or with the
reason every string is valid; tests/test_bad_input_table.py gives each to every verb that takes the option.
"""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from bench.core.errors import UsageError
from bench.core.hostlist import parse_hosts, read_hostfile
from bench.core.inputs import NAME_RULE, name_problem, shown
from bench.core.registry import (
    BACKEND_MODULES,
    DEFAULT_BACKEND,
    PRIMARY,
    PROJECTED,
    all_backends,
    elastic_backends,
    get_backend,
    get_task,
)
from bench.core.spec import CPU_BINDS, DEFAULTS, MAX_THREADS_PER_CORE, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS, PRECISIONS
from bench.core.store import DEFAULT_STORE
from bench.harness.cores import DEFAULT_WAIT_S
from bench.harness.workload_check import CHECK_TIMEOUT_S
from bench.rank.collectives import COMM_DEFAULTS, DTYPES, OPS, parse_bytes
from bench.rank.inject import INJECT_KINDS
from bench.tasks.fault.scenarios import ON_ONE_MACHINE, SWEPT
from bench.workflows.bare_loops import BARE_LOOPS

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


def percent(text: str) -> float:
    """A percentage strictly between 0 and 100 (a resolution: 0 would need infinitely many launches)."""
    value = finite_float(text.removesuffix("%"))
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentage above 0 and below 100")
    return value


def at_most(parse, most: float, words: str):
    """A value type: what `parse` takes, up to `most` (`words`: that bound as help and errors say it). Every duration
    option has one (its help says it)."""

    def bounded(text: str) -> float:
        value = parse(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"{text!r}: at most {words}")
        return value

    return bounded


# Every time limit is a `--*-timeout` in seconds: positive (or 0 where it may be: refuse at once), at most
# MAX_TIMEOUT_S (bench.core.spec says why).
timeout_seconds = at_most(positive_float, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS)
wait_seconds = at_most(nonnegative_float, MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS)
SECONDS_TYPES = (timeout_seconds, wait_seconds)  # tests/test_cli_parser.py: every --*-timeout takes one of these
TOO_LONG = ["1e10", f"{MAX_TIMEOUT_S + 1:g}"]  # what every timeout option refuses past its bound
# what every option of type timeout_seconds refuses: not positive, not finite, not a number, past the bound
BAD_TIMEOUTS = ["0", "-1", "nan", "inf", "x", *TOO_LONG]


# How many times a sweep or the gate launches each case (--repeats, --fault-repeats): far more than statistics ask
# for (a launch takes seconds to minutes), and few enough that planning them all, which comes before anything runs,
# ends (25 s for 1,000 rounds of a default sweep, dry run, on 2 cores; 10**9 of them never did).
MAX_REPEATS = 1000
repeat_count = at_most(positive_int, MAX_REPEATS, f"{MAX_REPEATS:,} launches of each case")
TOO_MANY_REPEATS = ["1000000000", str(MAX_REPEATS + 1)]


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


def closest(word: str, choices) -> str:
    """'; did you mean X?' for the choice closest to a mistyped `word`, or '' when none is close."""
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {match[0]}?" if match else ""


# ---------------------------------------------------------------- backends and workloads: a list, or all
ALL = "all"  # every backend (BACKENDS: the same on every verb) or workload the verb can run here


def _items(text: str, what: str, choices) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} names no {what}; give one of {', '.join(choices)}, a comma-separated list of them, or {ALL}"
        )
    if ALL in items and len(items) > 1:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {ALL} stands alone (it already means every {what})")
    return items


def backend_names(text: str) -> str:
    """--backend on every verb: one backend, a comma-separated list, or `all`; each a backend bench knows (whether the
    verb takes it, and whether it can run here, is the verb's to say)."""
    for name in _items(text, "backend", BACKEND_MODULES):
        if name != ALL and name not in BACKEND_MODULES:
            raise argparse.ArgumentTypeError(
                f"unknown backend {name!r}{closest(name, BACKEND_MODULES)} (choose from "
                f"{', '.join(BACKEND_MODULES)}, or {ALL})"
            )
    return text


def workload_names(text: str) -> str:
    """--workload on every verb: one workload, a comma-separated list, or `all` (the built-in ones); each a built-in
    workload or an address to your own (PKG.MODULE:NAME, path/to/file.py:NAME), which the verb loads and checks."""
    from workloads import WORKLOADS, is_address

    for name in _items(text, "workload", WORKLOADS):
        if name != ALL and name not in WORKLOADS and not is_address(name):
            raise argparse.ArgumentTypeError(
                f"unknown workload {name!r}{closest(name, WORKLOADS)} (choose from "
                f"{', '.join(WORKLOADS)}, or give your own as PKG.MODULE:NAME or "
                "path/to/file.py:NAME; to project a model with no run of it, a torchvision one say, bench predict "
                "takes --model)"
            )
    return text


def is_all(text: str | None) -> bool:
    return text is not None and [item.strip() for item in text.split(",") if item.strip()] == [ALL]


def chosen(text: str | None, every, default=None) -> list[str]:
    """The names a --backend or --workload value gives (`every` for all; `default` when not given), in order, once
    each."""
    if text is None:
        return list(default if default is not None else every)
    if is_all(text):
        return list(every)
    return list(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


# ---------------------------------------------------------------- faults: one vocabulary
# The words for a fault, the same on every verb that makes one; each verb takes the ones it can make (FAULTS_TAKEN).
# The fault scenarios' words are their entries' (bench.tasks.fault.scenarios), --fault's: a worker lost, the words
# only the test-only --inject has (a rank's own ending), then a worker gained.
FAULT_WORDS = {
    **{s.word: s.what for s in ON_ONE_MACHINE if not s.joins},
    "crash": "a rank raising an exception",
    "exit": "a rank leaving at once with exit code 0, without a word",
    **{s.word: s.what for s in ON_ONE_MACHINE if s.joins},
}
FAULTS_TAKEN = {
    "bench run --inject": INJECT_KINDS,  # test-only, from inside the rank
    "bench fault --fault": tuple(s.word for s in ON_ONE_MACHINE),
    "bench sweep --faults": SWEPT,
}


def fault_problem(word: str, taken, flag: str) -> str | None:
    """Why `word` is no fault `flag` makes (one of `taken`), saying where the vocabulary's other words are taken; None
    when it is one."""
    if word in taken:
        return None
    where = [f"{verb} {word}" for verb, words in FAULTS_TAKEN.items() if word in words and not verb.endswith(flag)]
    if where:
        return (
            f"{word!r}, {FAULT_WORDS[word]}, is {' and '.join(where)}, not a fault {flag} makes ({flag} takes "
            f"{', '.join(taken)})"
        )
    return f"unknown fault {word!r}{closest(word, taken)} ({flag} takes {', '.join(taken)})"


def fault_word(text: str) -> str:
    """bench fault's --fault: one word of the vocabulary it takes."""
    word = text.strip().lower()
    problem = fault_problem(word, FAULTS_TAKEN["bench fault --fault"], "--fault")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return word


def sweep_faults(text: str) -> str:
    """bench sweep's --faults: comma-separated words of the vocabulary it takes."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    taken = FAULTS_TAKEN["bench sweep --faults"]
    if not words:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} names no fault; choose from {', '.join(taken)}, or give --no-faults"
        )
    for word in words:
        problem = fault_problem(word, taken, "--faults")
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return text


def inject_fault(text: str) -> str:
    """--inject KIND:RANK:STEP: its KIND checked here, in the vocabulary's words (bench.rank.inject reads the rest)."""
    problem = fault_problem(text.split(":", 1)[0], INJECT_KINDS, "--inject")
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}, as KIND:RANK:STEP, for example hang:1:3")
    return text


# ---------------------------------------------------------------- the groups
# Each shared option names its group in its one declaration: the title its flags appear under in a verb's help.
# A verb takes a group whole (placement(), hosts(), ...) or some of its flags (parent).
GROUP_TITLES = {
    "what runs": "what runs",
    "world size": "placement",  # one run's
    "largest world size": "placement",  # a sweep's: its world sizes go up to it
    "placement": "placement",
    "hosts": "across hosts (ssh without a password to each; the same checkout path on every host)",
    "measurement": "measurement",
    "data": "data",
    "numerics": "numerics (the same for every backend; part of a run's conditions)",
    "harness": "testing the harness",
    "comm": "communication sweep (nccl-tests conventions)",
    "sharing": "sharing the machine (one benchmark at a time per set of cores)",
    "plan": "planning",
    "results": None,  # each verb places these where they read best
    "job": None,  # a cluster job's shape (bench k8s, bench slurm-script), among each verb's own options
    "skip": None,  # a part of a verb's work it can leave out, in a group of the verb's own
}


def group(name: str) -> tuple[str, ...]:
    """The flags of group `name`, in the order they are declared."""
    if name not in GROUP_TITLES:
        raise KeyError(f"no option group {name!r}; the groups are {', '.join(GROUP_TITLES)}")
    return tuple(f.flag for f in FLAGS if f.group == name)


def test_only_flags() -> tuple[str, ...]:
    """Accepted, but not shown: the tests' means of making a run fail or slow."""
    return tuple(f.flag for f in FLAGS if f.test_only)


# ---------------------------------------------------------------- the declarations: one record per flag
@dataclass(frozen=True)
class Later:
    """A value read when a parser is built, not when bench starts: a default of the code that owns it as it is then
    (tests change them), a sweep's own default for its launches, or the workloads (whose package loads only then).
    `read(at)`: `at` is what `declarations` gathers for the build (`Build`)."""

    read: Callable[[Build], object]


@dataclass(frozen=True)
class Build:
    """What a parser's declarations read as it is built (Later): `launch(key, words)` says a run's default, or a
    sweep's own for its launches with why it differs; the workloads' names; the data sources and loaders."""

    run_defaults: dict
    workloads: tuple[str, ...]
    sources: tuple[str, ...]
    loaders: tuple[str, ...]

    def launch(self, key: str, words: str) -> str:
        """`default N` of a run, or a sweep's own default for its launches, saying why it is not the run's."""
        sweep = self.run_defaults
        if key in sweep and sweep[key] != DEFAULTS[key]:
            return (
                f"default {sweep[key]} in a sweep, whose replicates are launches, so each is short; "
                f"{DEFAULTS[key]} for `bench run`; {words}"
            )
        return f"default {sweep.get(key, DEFAULTS[key])}, {words}"


@dataclass(frozen=True)
class Flag:
    """One shared option, declared once (FLAGS): its flag, its group (GROUP_TITLES), and what argparse is given for it,
    any of help, default and choices a Later where it is read when a parser is built. `invalid`: values it must refuse
    (tests/test_bad_input_table.py gives each to every verb that takes it), or `valid_because`: why every string is
    valid; `needs`: what it takes effect with; `short`: its one-letter spelling; `test_only`: accepted, never shown."""

    flag: str
    group: str
    help: str | Later
    type: Callable | None = None
    metavar: str | None = None
    choices: tuple | Later | None = None
    default: object = None
    action: str | None = None
    short: str | None = None
    test_only: bool = False
    invalid: tuple[str, ...] = ()
    valid_because: str | None = None
    needs: tuple[str, ...] = ()

    def keywords(self, at: Build) -> dict:
        """`add`'s keywords, with the group, short and test_only that `declare` reads (what is not given left out)."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "flag"}
        read = {name: value.read(at) if isinstance(value, Later) else value for name, value in given.items()}
        return {name: value for name, value in read.items() if value is not None}


FLAGS = (
    # what runs
    Flag(
        "--backend",
        "what runs",
        "comma-separated backends, or all",  # each verb says its default, and what all is
        type=backend_names,
        metavar="B1,B2|all",
        invalid=("tensorflow", "", ",", "elastic,horovd", "all,elastic"),
    ),
    Flag(
        "--workload",
        "what runs",
        Later(
            lambda at: (
                f"comma-separated workloads, or all ({', '.join(at.workloads)}), each run in turn; your own "
                "as PKG.MODULE:NAME or path/to/file.py:NAME "
                "(docs/usage.md, 'Compare on your own model') (default %(default)s, the quick one)"
            )
        ),
        type=workload_names,
        metavar="W1,W2|all",
        default=Later(lambda at: at.workloads[0]),  # the registry's first: the quick one
        invalid=("gpt5", "", ",", "mnist_mlp,gpt5"),
    ),
    Flag(
        "--world-sizes",
        "what runs",
        "comma-separated world sizes, each run in turn",  # each verb says its default
        type=world_sizes,
        metavar="N1,N2,...",
        invalid=("1,x", "0", "", "-2"),
    ),
    # placement: one run's world size, or the largest of a sweep's
    Flag(
        "--nproc",
        "world size",
        "the world size: N CPU worker processes (gloo); default min(2, cores); their threads at "
        f"most the cores, or {MAX_THREADS_PER_CORE} a core with --oversubscribe",
        type=positive_int,
        metavar="N",
        invalid=("0", "-1", "two", "1.5", "", "100000"),
        needs=("--oversubscribe",),
    ),
    Flag(
        "--gpus",
        "world size",
        "the world size on GPUs: one worker per GPU, N of them (NCCL); with --hosts/--hostfile N on every "
        "host, the world size N x hosts (default: none, CPU processes)",
        type=positive_int,
        metavar="N",
        invalid=("0", "-1", "x"),
    ),
    Flag(
        "--max-nproc",
        "largest world size",
        "the largest world size of the sweep's CPU runs: world sizes 1, 2, 4 ... up to N, and "
        "N (default min(2, cores)); --world-sizes chooses them instead",
        type=positive_int,
        metavar="N",
        invalid=("0", "-1", "two", "1.5", "", "100000"),
        needs=("--oversubscribe",),
    ),
    Flag(
        "--max-gpus",
        "largest world size",
        "the largest world size on GPUs, one worker per GPU: world sizes 1, 2, 4 ... up to N, "
        "and N; with --hosts/--hostfile N GPUs on every host, up to N x hosts (default: none, CPU processes)",
        type=positive_int,
        metavar="N",
        invalid=("0", "-1", "x"),
    ),
    Flag(
        "--threads",
        "placement",
        "threads per worker, set for every backend alike (default: cores / largest world size)",
        type=positive_int,
        invalid=("0", "-1", "x"),
    ),
    Flag(
        "--cpu-bind",
        "placement",
        "cores: pin each worker (every thread of it) to its own cores; numa: pin each GPU worker to its "
        "share of its GPU's NUMA node's cores; none: leave them to the scheduler; auto (default): cores for CPU "
        "workers on one host that fit its cores, numa on GPUs, none with --oversubscribe, across hosts of CPU "
        "workers, on an existing Ray cluster and in fault runs",
        choices=CPU_BINDS,
        invalid=("all",),
    ),
    Flag(
        "--oversubscribe",
        "placement",
        f"allow more worker threads than cores, up to {MAX_THREADS_PER_CORE} a core (measures contention)",
        action="store_true",
    ),
    # across hosts
    Flag(
        "--hosts",
        "hosts",
        "run across these hosts, N processes each at most (horovodrun/mpirun -H); the world "
        "size is the sum of the slots unless the world size options choose fewer",
        type=host_list,
        metavar="H1:N,H2:N",
        invalid=("", ",", "h1:0", "h1:x", "bad host:1", "h1:1,h1:2", "h1\n:2"),
    ),
    Flag(
        "--hostfile",
        "hosts",
        "the hosts, one `host slots=N` per line (as mpirun and horovodrun read it)",
        type=hostfile,
        metavar="FILE",
        invalid=("", "/nonexistent/hostfile"),
    ),
    Flag(
        "--scheduler",
        "hosts",
        "slurm: run across the nodes of the Slurm allocation bench runs in (the default "
        "inside one, that is where SLURM_JOB_ID is set); kubeflow: bench run in a pod of a PyTorchJob or "
        "TrainJob becomes one torchrun agent of one run over the job's pods (the default where the operator's "
        "PET_NNODES is set); none: ignore an allocation or a job",
        choices=("slurm", "kubeflow", "none"),
        invalid=("pbs", "slurm", "kubeflow"),  # slurm, kubeflow here: not inside an allocation, not in a pod
    ),
    Flag(
        "--iface",
        "hosts",
        "network interface every backend uses across hosts (default: the one the hosts route to each other through)",
        type=nonempty_name,
        metavar="NAME",
        invalid=("", "lo"),  # "lo" without --hosts: the option applies across hosts only
    ),
    Flag(
        "--link",
        "hosts",
        "shape every host's link with tc for each run: a rate limit and a delay, such as "
        "1gbit:0.1ms or 100mbit (needs --hosts)",
        metavar="RATE[:DELAY]",
        invalid=("", "fast", "1gbit:soon", "0mbit", "1gbit", "1gbit\n:1ms", "1gbit:1ms\n:"),  # 1gbit alone: hosts only
    ),
    # measurement
    Flag(
        "--batch-size",
        "measurement",
        "per-worker batch (default: the workload's)",
        type=positive_int,
        invalid=("0", "-1", "x"),
    ),
    Flag(
        "--warmup-steps",
        "measurement",
        Later(lambda at: f"untimed steps first ({at.launch('warmup_steps', 'at least 1')})"),
        type=positive_int,
        invalid=("0", "x"),
    ),
    Flag(
        "--steps-per-window",
        "measurement",
        "steps timed per window (default: the workload's, about a second of work or less)",
        type=positive_int,
        invalid=("0", "x"),
    ),
    Flag(
        "--windows",
        "measurement",
        Later(lambda at: f"timed windows ({at.launch('windows', 'at least 2')})"),
        type=positive_int,
        invalid=("0", "1", "x"),
    ),
    Flag(
        "--seed",
        "measurement",
        Later(lambda at: f"seed of the model and the data (default {DEFAULTS['seed']})"),
        type=count,
        invalid=("-1", "x", "1.5"),
    ),
    Flag(
        "--lr",
        "measurement",
        Later(lambda at: f"SGD learning rate (default {DEFAULTS['lr']}, momentum {DEFAULTS['momentum']})"),
        type=positive_float,
        invalid=("0", "-1", "nan", "inf", "x"),
    ),
    Flag(
        "--timeout",
        "measurement",
        Later(lambda at: f"deadline per run in seconds (default {DEFAULTS['timeout']:g}, at most {MAX_TIMEOUT_WORDS})"),
        type=timeout_seconds,
        metavar="SECONDS",
        invalid=tuple(BAD_TIMEOUTS),
    ),
    Flag(
        "--check-timeout",
        "measurement",
        "seconds a workload of your own may take to load, build and take a batch, in a "
        "process of its own before anything runs; past them it is refused, nothing "
        f"started (default {CHECK_TIMEOUT_S:g}; it never exceeds --timeout, and is at "
        f"most {MAX_TIMEOUT_WORDS}; the built-in workloads need no check)",
        type=timeout_seconds,
        metavar="SECONDS",
        invalid=tuple(BAD_TIMEOUTS),
    ),
    # data
    Flag(
        "--data",
        "data",
        Later(
            lambda at: f"default {DEFAULTS['data']}; digits is scikit-learn's, mnist and imagefolder need --data-dir"
        ),
        choices=Later(lambda at: at.sources),
        invalid=("imagenet",),
    ),
    Flag(
        "--data-dir",
        "data",
        "folder with MNIST's IDX files, or an ImageFolder tree (one sub-folder of images per "
        "class); nothing is downloaded",
        metavar="DIR",
        needs=("--data", "mnist"),
        invalid=("/nonexistent/mnist", "", "/"),
    ),
    Flag(
        "--loader",
        "data",
        "how in-memory data reach the model: memory (held on the device, never the limit) or "
        "dataloader (torch's DataLoader with a DistributedSampler, as training scripts read "
        "data) (default memory)",
        choices=Later(lambda at: at.loaders),
        invalid=("disk",),
    ),
    Flag(
        "--loader-workers",
        "data",
        "DataLoader processes per worker, with --loader dataloader or --data imagefolder (default 0: in the worker)",
        type=count,
        invalid=("-1", "x"),
    ),
    Flag(
        "--image-size",
        "data",
        "input side for image models (default: the workload's CPU or GPU size)",
        type=positive_int,
        invalid=("0", "x", "8"),
    ),
    # numerics
    Flag(
        "--precision",
        "numerics",
        "fp32 (default; TF32 off), tf32 (TF32 matmuls and convolutions, GPU only), bf16 (autocast), "
        "fp16 (autocast with a gradient scaler, GPU only); the TensorFlow backends run fp32 only",
        choices=PRECISIONS,
        invalid=("fp8", "half"),
    ),
    Flag(
        "--channels-last",
        "numerics",
        "model and 4-D inputs in channels_last memory format (default off; the MLP has no 4-D weights, so "
        "it changes nothing there); PyTorch backends only",
        action="store_true",
    ),
    Flag(
        "--no-cudnn-benchmark",
        "numerics",
        "leave cudnn.benchmark off on GPUs (default: on for GPU runs; it means nothing on CPUs)",
        action="store_true",
    ),
    # planning
    Flag(
        "--dry-run",
        "plan",
        "print each launch's plan (the command on each host, the environment it sets) and stop: no host is "
        "contacted, nothing is started, no store or run folder is made",
        action="store_true",
    ),
    # testing the harness
    Flag(
        "--inject",
        "harness",
        f"test-only fault: {', '.join(INJECT_KINDS)} "
        "(the fault words of docs/usage.md, 'Faults') of rank RANK at step STEP",
        test_only=True,
        type=inject_fault,
        metavar="KIND:RANK:STEP",
        invalid=("explode:1:1", "join:1:1", "crash:x:1", "crash:1", "crash:99:1", "crash:-1:1"),
    ),
    Flag(
        "--inject-delay",
        "harness",
        "test-only slowdown: every worker sleeps DELAY in every timed step, a share of "
        "its warm-up median step time (20%%) or a duration (5ms), under 10000%% or 100 s; "
        "a sweep never slows the plain single-process loop it measures the others against",
        test_only=True,
        metavar="DELAY",
        invalid=("x", "20", "-5ms", "100s", "10000%", "nan%", "infs"),
    ),
    Flag(
        "--save-params",
        "harness",
        "save each rank's parameters in the run directory (a fault run: also those each process resumed from)",
        action="store_true",
    ),
    Flag(
        "--save-model",
        "results",
        "after training, the first worker writes the model's state_dict there (torch.save, "
        "atomically), under every backend (default: not saved)",
        metavar="PATH",
        invalid=("/nonexistent/folder/model.pt", "", "/"),
    ),
    # communication sweep
    Flag(
        "--min-bytes",
        "comm",
        "smallest message: 4, 8K, 64M, 1G (default %(default)s)",
        type=byte_size,
        default=Later(lambda at: COMM_DEFAULTS["min_bytes"]),
        invalid=("0", "-1", "x", "1Q", "1.5K"),
    ),
    Flag(
        "--max-bytes",
        "comm",
        "largest message (default %(default)s)",
        type=byte_size,
        default=Later(lambda at: COMM_DEFAULTS["max_bytes"]),
        invalid=("0", "-1", "x", "1Q", "1.5K"),
    ),
    Flag(
        "--dtype",
        "comm",
        f"one of {', '.join(DTYPES)} (default %(default)s)",
        default=Later(lambda at: COMM_DEFAULTS["dtype"]),
        invalid=("float128", ""),
    ),
    Flag(
        "--ops",
        "comm",
        f"comma-separated, from {', '.join(OPS)} (default %(default)s)",
        default=Later(lambda at: COMM_DEFAULTS["ops"]),
        invalid=("nope", "allreduce,nope", "", ","),
    ),
    Flag(
        "--warmup-iters",
        "comm",
        "untimed ops per size (default %(default)s)",
        type=count,
        default=Later(lambda at: COMM_DEFAULTS["warmup_iters"]),
        invalid=("-1", "x"),
    ),
    Flag(
        "--iters",
        "comm",
        "timed ops per size (default %(default)s)",
        type=positive_int,
        default=Later(lambda at: COMM_DEFAULTS["iters"]),
        invalid=("0", "x"),
    ),
    # sharing the machine (bench.harness.cores)
    Flag(
        "--cores-timeout",
        "sharing",
        "while another bench run on this machine holds the cores a run needs, wait up "
        "to this many seconds for them (in the order runs arrived), then refuse with "
        f"exit 2 (default %(default)g; 0: refuse at once; at most {MAX_TIMEOUT_WORDS})",
        type=wait_seconds,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        invalid=("-1", "nan", "inf", "x", *TOO_LONG),
    ),
    Flag(
        "--allow-shared",
        "sharing",
        "run at once even where another bench run holds the cores: both runs' records "
        "are marked (shared_with) and left out of verdicts and the gate",
        action="store_true",
    ),
    # a cluster job's shape: each verb says what a node is to it (a pod of a Kubeflow job, a node of a Slurm
    # allocation) and its defaults, the job description's
    Flag("--nodes", "job", "nodes (%(default)s)", type=positive_int, invalid=("0", "x")),
    Flag(
        "--nproc-per-node",
        "job",
        "worker processes per node (one per GPU with --gpus-per-node)",
        type=positive_int,
        invalid=("0", "x"),
    ),
    Flag(
        "--gpus-per-node",
        "job",
        "GPUs per node, a worker each (none by default)",
        type=positive_int,
        invalid=("0", "x"),
    ),
    # parts of a verb's work it can leave out
    Flag("--no-comm", "skip", "skip the communication part", action="store_true"),  # each verb says which part
    # results
    Flag(
        "--store",
        "results",
        f"results store (SQLite file); default $BENCH_STORE, else {DEFAULT_STORE}",
        type=nonempty_path,
        metavar="FILE",
        invalid=("", "/", LONG_PATH),
    ),
    Flag(
        "--json",
        "results",
        "print the result as JSON on stdout (the record, the records or the comparison), and nothing else there",
        action="store_true",
    ),
    Flag(
        "--sweep",
        "results",
        "the sweep to take from the store (default: the latest one)",
        type=id_name,
        metavar="ID",
        invalid=("", "../x", "a/b", "x y"),
    ),
    Flag(
        "--output",
        "results",
        "after the runs, write the HTML report of the store there, plus a timestamped copy "
        "beside it (default: no report; `bench report` writes one any time)",
        short="-o",
        metavar="FILE",
        type=nonempty_path,
        invalid=("", "/", LONG_PATH),
    ),
    Flag(
        "--repeats",
        "results",
        "run every case this many times, in rounds (the regression gate's unit of replication; default %(default)s)",
        type=repeat_count,
        invalid=("0", "x", *TOO_MANY_REPEATS),
    ),
)


def declarations(run_defaults: dict | None = None) -> dict[str, dict]:
    """flag -> its group and `add` keywords, from FLAGS, with what they read when a parser is built (Later) read now.
    `run_defaults`: a sweep's own defaults for its launches (bench.workflows.plan.SWEEP_DEFAULTS), which its help
    states as the sweep's."""
    from workloads import WORKLOADS  # the workloads' package, loaded when a parser is first built
    from workloads.data.names import LOADERS, SOURCES

    at = Build(run_defaults or {}, tuple(WORKLOADS), tuple(SOURCES), tuple(LOADERS))
    return {f.flag: f.keywords(at) for f in FLAGS}


def declare(
    container,
    flag: str,
    *,
    help: str | None = None,
    hidden: bool = False,
    refuses=(),
    run_defaults: dict | None = None,
    **overrides,
) -> argparse.Action:
    """Add `flag`, as FLAGS declares it, to a parser or an argument group: with this verb's own `help`, hidden from
    help (`hidden`, or test-only), refusing `refuses` besides its declared bad values, and `overrides` (this verb's
    default) replacing what is declared."""
    kwargs = dict(declarations(run_defaults)[flag], **({"help": help} if help else {}), **overrides)
    short = kwargs.pop("short", None)
    kwargs.pop("group")
    if kwargs.pop("test_only", False) or hidden:
        kwargs["help"] = argparse.SUPPRESS
    kwargs["invalid"] = (*kwargs.get("invalid", ()), *refuses)
    return add(container, *([short] if short else []), flag, **kwargs)


def parent(
    title: str | None,
    flags,
    *,
    hidden=(),
    helps: dict[str, str] | None = None,
    refuses: dict[str, list[str]] | None = None,
    run_defaults: dict | None = None,
    **defaults,
) -> argparse.ArgumentParser:
    """A parent parser declaring `flags` (in an argument group `title`, if given). `hidden` flags are still
    parsed (so a verb can refuse them with a clear message, or a test use them) but left out of --help; `helps`:
    flag -> this verb's own help (a default that differs here, and why); `refuses`: flag -> values this verb refuses
    besides the declared ones (bench fault: a backend without an elastic mode); `defaults` replace the declared
    defaults for this parser only (a fresh parent is built for every verb)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group(title) if title else p
    for flag in flags:
        declare(
            g,
            flag,
            help=(helps or {}).get(flag),
            hidden=flag in hidden,
            refuses=(refuses or {}).get(flag, ()),
            run_defaults=run_defaults,
        )
    p.set_defaults(**defaults)
    return p


def of_group(name: str, flags=None, **kwargs) -> argparse.ArgumentParser:
    """A parent parser of group `name` (or of those of its `flags` given), under the group's title."""
    return parent(GROUP_TITLES[name], flags or group(name), **kwargs)


# ---------------------------------------------------------------- --backend on every verb, in one place
# What `all` means is the same on every verb (bench.core.registry.all_backends): every compared backend that takes
# runs of the verb's task and has the capability the verb needs of it, if any (CAPABILITIES). A verb's default is one
# of BACKEND_DEFAULTS, each with its reason: one backend where a verb measures one, else all of them, but for a sweep
# (long: the question's pair) and a projection (the backends its model was validated on).
CAPABILITIES = {
    "an elastic mode": lambda name: name in elastic_backends(),  # bench fault's runs
    "a bare loop": lambda name: name in BARE_LOOPS,  # bench selfcheck holds a backend against its bare loop
}
BACKEND_DEFAULTS = {
    "one": (DEFAULT_BACKEND, "a run measures one backend, the first of the question's pair"),
    "all": (ALL, "what it prints is read across backends, so every one takes part"),
    "pair": (
        ",".join(PRIMARY),
        "the question's pair, since a sweep takes long and compares; both must be able to run here, or the sweep "
        "says how to set up the missing one and runs nothing",
    ),
    "validated": (",".join(PROJECTED), "the ones the model's validation covers"),
}


@dataclass(frozen=True)
class Backends:
    """--backend on one verb: what it does with the backends given (`does`), the task of its runs, what more it
    needs of a backend (`needs`: a key of CAPABILITIES), whether `all` keeps only those that can run here (`here`:
    every verb that runs something), and its default (a key of BACKEND_DEFAULTS)."""

    verb: str
    does: str
    task: str
    default: str
    needs: str | None = None
    here: bool = True

    def every(self) -> tuple[str, ...]:
        """What `all` means on this verb."""
        return all_backends(self.task, CAPABILITIES[self.needs] if self.needs else None)

    def help(self) -> str:
        value, why = BACKEND_DEFAULTS[self.default]
        has = f" and has {self.needs}" if self.needs else ""
        where = ", those that can run here" if self.here else ""
        return (
            f"comma-separated backends, or all: {self.does}; all: every compared backend that takes "
            f"{get_task(self.task).label} runs{has} ({', '.join(self.every())}){where}; default {value}: {why}"
        )


BACKENDS = {
    b.verb: b
    for b in (
        Backends("run", "each run in turn, every run stored", "train", "one"),
        Backends("fault", "each run in turn", "fault", "one", needs="an elastic mode"),
        Backends("sweep", "the backends compared", "train", "pair"),
        Backends("allreduce", "a table each, in turn", "comm", "all"),
        Backends("converge", "each run in turn, on the same data", "converge", "all"),
        Backends("selfcheck", "each checked in turn", "train", "all", needs="a bare loop"),
        Backends("predict", "the backends to project", "train", "validated", here=False),
    )
}


def every_backend(verb: str) -> tuple[str, ...]:
    """What `--backend all` means on `verb`."""
    return BACKENDS[verb].every()


def default_backends(verb: str) -> str:
    """--backend's default on `verb`."""
    return BACKEND_DEFAULTS[BACKENDS[verb].default][0]


DECLARED = object()  # what_runs: keep the declared default


def what_runs(
    verb: str,
    *,
    workload_help: str | None = None,
    workload_default=DECLARED,
    refuses: dict[str, list[str]] | None = None,
    loads: bool = True,
    flags=("--backend", "--workload"),
) -> argparse.ArgumentParser:
    """--backend (and --workload) of `verb`: its --backend as BACKENDS has it, saying what `all` is and the default,
    with why. `loads`: the verb loads a workload of your own (and so refuses one that does not load); predict only
    names stored ones."""
    backends = BACKENDS[verb]
    helps = {"--backend": backends.help()}
    if workload_help:
        helps["--workload"] = workload_help
    refuses = dict(refuses or {})
    if loads and "--workload" in flags:
        refuses["--workload"] = ["missing.py:W", "no_such_module:W", *refuses.get("--workload", [])]
    defaults = {"backend": default_backends(verb)}
    if workload_default is not DECLARED:
        defaults["workload"] = workload_default
    return parent(GROUP_TITLES["what runs"], flags, helps=helps, refuses=refuses, **defaults)


def store(help: str | None = None) -> argparse.ArgumentParser:
    """--store; `help`: what it means for a verb whose default store is not the results store."""
    return parent(None, ["--store"], helps={"--store": help} if help else None)


def report_output() -> argparse.ArgumentParser:
    """-o/--output: the report page a verb writes after its runs."""
    return parent("output", ["--output"])


def json_output() -> argparse.ArgumentParser:
    return parent(None, ["--json"])


def placement(flags=None, *, largest: bool = False, **kwargs) -> argparse.ArgumentParser:
    """The world size (or, `largest`, a sweep's largest) and where the workers go: `flags` of them, or all."""
    every = (*group("largest world size" if largest else "world size"), *group("placement"))
    return parent(GROUP_TITLES["placement"], flags or every, **kwargs)


def hosts() -> argparse.ArgumentParser:
    return of_group("hosts")


def measurement(run_defaults: dict | None = None) -> argparse.ArgumentParser:
    return of_group("measurement", run_defaults=run_defaults)


def data(**kwargs) -> argparse.ArgumentParser:
    return of_group("data", **kwargs)


def numerics() -> argparse.ArgumentParser:
    """--precision, --channels-last, --no-cudnn-benchmark: every verb that trains."""
    return of_group("numerics")


def harness() -> argparse.ArgumentParser:
    return of_group("harness")


def plan() -> argparse.ArgumentParser:
    """--dry-run: the verbs whose launches can be planned without running them."""
    return of_group("plan")


def sharing() -> argparse.ArgumentParser:
    """Every verb that runs something on this machine: what its runs do where another bench run holds the cores."""
    return of_group("sharing")


def comm(**kwargs) -> argparse.ArgumentParser:
    return of_group("comm", **kwargs)


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
            add(
                g,
                opt.flag,
                dest=BACKEND_OPTION + opt.name,
                choices=opt.choices,
                metavar=None if opt.choices else opt.name.upper(),
                type=finite_float if opt.type is float else opt.type,
                help=argparse.SUPPRESS
                if opt.fault_only and not fault
                else (
                    f"{opt.help} (default{':' if opt.default_words else ''} {opt.shown_default})"
                    + (f"; backends {', '.join(owners)}" if len(owners) > 1 else "")
                ).replace("%", "%%"),
                invalid=opt.invalid,
                needs=["--backend", name],
            )
    return p


def training(run_defaults: dict | None = None, *, largest: bool = False) -> list[argparse.ArgumentParser]:
    """Everything a training run takes: `bench run` and `bench sweep` (run_defaults: the sweep's own warm-up and
    windows, shown in its help as the sweep's; `largest`: the sweep's world size options, its largest)."""
    return [
        placement(largest=largest),
        hosts(),
        measurement(run_defaults),
        data(),
        numerics(),
        harness(),
        backend_options(),
        sharing(),
        store(),
        json_output(),
    ]
