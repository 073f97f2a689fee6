"""`bench selfcheck`: the suite against bare loops (docs/method.md, "Fidelity against bare loops").

For each backend with a bare loop (bench.workflows.bare_loops), pairs of launches: the suite's own run (built and
executed exactly as `bench run` and `bench allreduce` do) and the bare loop under its own launcher, in
alternating order (pair i: the suite first when i is even), so a slow spell of the machine lands on both
sides. Each launch gives one value (the launch is the unit of replication); the figure is the ratio
suite / bare with its t interval over the pairs' ratios (bench.core.stats.ratio_of_pairs: a slow spell that
spans a pair cancels in it). A figure passes when the
interval includes 1.0 and its low end is at least the goal's floor. At least `pairs` pairs are run, then
more, one figure at a time, until each interval is as narrow as its goal asks or the time budget is spent.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.core.console import format_duration, note
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED, Interrupted, UsageError
from bench.core.records import RunStatus
from bench.core.registry import BACKEND_MODULES, COMPARED, get_backend
from bench.core.spec import MAX_TIMEOUT_S, pinned_words
from bench.core.stats import CONFIDENCE, MIN_LAUNCHES, geometric_mean, ratio_of_pairs, t_quantile
from bench.core.store import Store
from bench.harness.cores import CoreClaim, run_resources
from bench.harness.lifeline import Lifeline
from bench.harness.runner import execute, new_run_id, worker_environment
from bench.harness.supervisor import supervise
from bench.tasks.train import build_spec
from bench.workflows.bare_loops import BARE_LOOPS, read_figure
from bench.workflows.plan import comm_options, comm_specs

ALLREDUCE_BYTES = 16 * 2**20  # bandwidth-bound, and the largest message of a default sweep
DEFAULT_PAIRS = 5
DEFAULT_MAX_MINUTES = 10.0  # per backend, both figures together
MAX_MINUTES = MAX_TIMEOUT_S / 60  # --pairs-timeout at most, in minutes: 7 days (bench.core.spec.MAX_TIMEOUT_S)
MAX_MINUTES_WORDS = f"{MAX_MINUTES:g}, 7 days"
SIDES = ("suite", "bare")


@dataclass(frozen=True)
class Goal:
    """What a figure must show: the interval's low end at least `floor` (and 1.0 inside it); pairs are added
    until the interval's half-width (Estimate.resolution) is at most `resolution`."""

    figure: str
    label: str
    unit: str
    key: str  # what the bare loop prints
    floor: float
    resolution: float
    fmt: str


GOALS = {
    "throughput": Goal("throughput", "throughput", "samples/s", "throughput", 0.98, 0.02, "{:,.1f}"),
    "busbw": Goal("busbw", "allreduce busbw 16 MiB", "GB/s", "busbw_GBps", 0.95, 0.05, "{:.3f}"),
}


class LaunchFailed(Exception):
    """A launch of either side ended without its figure; the message says how, and where its log is."""


def pair_order(i: int) -> tuple[str, str]:
    """Which side launches first in pair i (0-based): the suite when i is even, the bare loop when odd."""
    return SIDES if i % 2 == 0 else SIDES[::-1]


def meets_goal(estimate, goal: Goal) -> tuple[bool, str]:
    """Whether the suite's figure over the bare loop's meets the goal, as (passed, why not): the interval must
    include 1.0 and its low end be at least goal.floor."""
    if estimate is None or not estimate.replicated:
        return False, "fewer than 2 pairs of launches: no interval"
    if estimate.low > 1.0:
        return False, "the interval lies above 1.0: the suite measured more than the bare loop"
    if estimate.high < 1.0:
        return False, "the interval lies below 1.0: the suite measured less than the bare loop"
    if estimate.low < goal.floor:
        return False, f"the interval's low end {estimate.low:.3f} is below {goal.floor:g}"
    return True, ""


def resolved(estimate, goal: Goal) -> bool:
    """The interval is as narrow as the goal asks (half-width at most goal.resolution)."""
    return estimate is not None and estimate.replicated and estimate.resolution <= goal.resolution


def pairs_for_goal(estimate, goal: Goal, limit: int = 100_000) -> int | None:
    """How many pairs in all would narrow the interval to goal.resolution if the pairs' ratios kept the spread
    they have so far (None without an interval, or when even `limit` pairs would not): the least m with
    t(m-1) x sd / sqrt(m) <= log(1 + resolution)."""
    if estimate is None or not estimate.replicated or not math.isfinite(estimate.resolution):
        return None
    n, conf = estimate.launches[0], estimate.confidence
    sd = math.log1p(estimate.resolution) / t_quantile(conf, n - 1) * math.sqrt(n)  # of the pairs' log ratios

    def narrow_enough(m: int) -> bool:
        return t_quantile(conf, m - 1) * sd / math.sqrt(m) <= math.log1p(goal.resolution)

    if not narrow_enough(limit):
        return None
    low, high = 2, limit  # the half-width shrinks as m grows: the least m that is narrow enough, by bisection
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if narrow_enough(mid) else (mid + 1, high)
    return low


@dataclass
class Check:
    """One figure of one backend: the launches made so far on each side, in the order they ran."""

    backend: str
    goal: Goal
    launch: dict = field(default_factory=dict, repr=False)  # side -> () -> value (raises LaunchFailed)
    suite: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # sides, in launch order
    pair_seconds: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def pairs(self) -> int:
        return len(self.pair_seconds)

    @property
    def estimate(self):
        if not self.suite or not self.bare:
            return None
        return ratio_of_pairs(self.suite, self.bare)

    @property
    def passed(self) -> bool:
        return self.error is None and meets_goal(self.estimate, self.goal)[0]

    @property
    def resolved(self) -> bool:
        return resolved(self.estimate, self.goal)

    def run_pair(self, clock: Callable[[], float] = time.monotonic) -> None:
        t0 = clock()
        for side in pair_order(self.pairs):
            value = self.launch[side]()
            getattr(self, side).append(value)
            self.order.append(side)
        self.pair_seconds.append(clock() - t0)

    def to_dict(self) -> dict:
        est = self.estimate
        why = meets_goal(est, self.goal)[1]

        def num(x):
            return x if x is not None and math.isfinite(x) else None

        return {
            "backend": self.backend,
            "figure": self.goal.figure,
            "label": self.goal.label,
            "unit": self.goal.unit,
            "suite": self.suite,
            "bare": self.bare,
            "order": self.order,
            "launches": [len(self.suite), len(self.bare)],
            "suite_mean": geometric_mean(self.suite) if self.suite else None,
            "bare_mean": geometric_mean(self.bare) if self.bare else None,
            "ratio": num(est.ratio) if est else None,
            "low": num(est.low) if est else None,
            "high": num(est.high) if est else None,
            "p": num(est.p) if est else None,
            "resolution": num(est.resolution) if est else None,
            "confidence": est.confidence if est else None,
            "goal": {"floor": self.goal.floor, "resolution": self.goal.resolution},
            "resolved": self.resolved,
            "passed": self.passed,
            "pairs_for_goal": pairs_for_goal(est, self.goal),
            "seconds_per_pair": sum(self.pair_seconds) / self.pairs if self.pairs else None,
            "why": f"a launch failed: {self.error}" if self.error else why,
        }


# ---------------------------------------------------------------- the adaptive loop
def progress_line(check: Check, pairs: int, elapsed: float, left: str) -> str:
    g, n = check.goal, check.pairs
    first = check.order[-2]
    est = check.estimate
    so_far = f"ratio {est.ratio:.3f}" + (f" ±{est.resolution:.1%}" if est.replicated else "")
    count = f"{n}/{pairs}" if n <= pairs else f"{n}, goal ±{g.resolution:.0%}"
    return (
        f"[{check.backend} {g.figure} {count}] suite {g.fmt.format(check.suite[-1])} {g.unit}, "
        f"bare {g.fmt.format(check.bare[-1])} {g.unit} ({first} first); {so_far}; "
        f"elapsed {format_duration(elapsed)}, {left}"
    )


def run_checks(
    checks: list[Check],
    pairs: int,
    budget_s: float,
    say: Callable[[str], None] = note,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """One backend's checks: `pairs` pairs of each (in the order given), then one more pair at a time for each
    figure whose interval is still wider than its goal, until none is or `budget_s` has passed since the
    start. A failed launch ends its check (its error is kept); the other checks go on."""
    start = clock()

    def left_for_minimum(current: Check) -> str:
        guess = sum(current.pair_seconds) / current.pairs
        rest = 0.0
        for c in checks:
            if c.error is None and c.pairs < pairs:
                per = sum(c.pair_seconds) / c.pairs if c.pairs else guess
                rest += (pairs - c.pairs) * per
        return f"about {format_duration(rest)} left" if rest else "minimum pairs done"

    def one_pair(check: Check, left: Callable[[Check], str]) -> None:
        try:
            check.run_pair(clock)
        except LaunchFailed as exc:
            check.error = str(exc)
            say(f"[{check.backend} {check.goal.figure}] launch failed: {exc}")
            return
        say(progress_line(check, pairs, clock() - start, left(check)))

    for check in checks:
        while check.error is None and check.pairs < pairs:
            one_pair(check, left_for_minimum)

    def left_of_budget(_check: Check) -> str:
        return f"adding pairs until the goal or the time budget ({format_duration(start + budget_s - clock())} left)"

    while clock() - start < budget_s:
        pending = [c for c in checks if c.error is None and not c.resolved]
        if not pending:
            break
        for check in pending:
            if clock() - start >= budget_s:
                break
            one_pair(check, left_of_budget)


# ---------------------------------------------------------------- launches
def suite_launch(spec, store, pick: Callable) -> Callable[[], float]:
    """The suite's side: the spec executed and stored exactly as `bench run` / `bench allreduce` do."""

    def launch() -> float:
        record = execute(spec, store, show_progress=False)
        if record.status == RunStatus.INTERRUPTED:
            raise Interrupted()
        if not record.ok:
            raise LaunchFailed(
                f"suite run {record.run_id} ended {record.status}: "
                f"{record.error.message if record.error else 'no error recorded'} "
                f"(`bench list --store {store.path}`)"
            )
        if record.shared_with:
            raise LaunchFailed(f"suite run {record.run_id} {shared_words(record.shared_with)}")
        return pick(record)

    return launch


def bare_launch(loop, spec, args: list[str], key: str, log_dir: Path, name: str) -> Callable[[], float]:
    """The bare side: the bare loop under its own launcher, with the environment the suite's ranks get (threads,
    device visibility), supervised as a run is: a session of its own, ended with all it started at the deadline or
    when this process dies."""
    count = [0]

    def launch() -> float:
        count[0] += 1
        log = log_dir / f"{name}-{count[0]}.log"
        tag = f"selfcheck-{new_run_id()}"
        # A temporary folder of the launch's own (TMPDIR), removed however it ended: what a bare loop or its
        # launcher leaves there (Ray's session files) goes with it, also after a deadline or Ctrl-C. It is short,
        # as the unix sockets Ray makes there need.
        scratch = tempfile.mkdtemp(prefix="bare-")
        try:
            # the machine's cores to itself, as a suite run has them (bench.harness.cores)
            with (
                CoreClaim(tag, f"selfcheck's bare {name} loop", None, run_resources(spec)) as claim,
                Lifeline(tag, holds=(claim.fd,)) as lifeline,
            ):  # a killed selfcheck leaves no bare loop behind
                claim.add_holder(lifeline.proc.pid)
                outcome = supervise(
                    loop.command(spec.world_size, args),
                    {**worker_environment(spec, tag), "TMPDIR": scratch},
                    log,
                    spec.timeout,
                )
                shared = claim.finish()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if outcome.ending == "interrupted":
            raise Interrupted()
        text = log.read_text(errors="replace") if log.exists() else ""
        value = _bare_figure(text, key)
        if outcome.ending == "timeout":
            raise LaunchFailed(f"bare loop passed its deadline ({spec.timeout:g} s) and was ended; log {log}")
        if outcome.returncode != 0 or value is None:
            last = (text.strip().splitlines() or ["no output"])[-1][:200]
            raise LaunchFailed(f"bare loop exited {outcome.returncode} without its figure ({last}); log {log}")
        if shared:
            raise LaunchFailed(f"bare loop {shared_words(shared)}")
        return value

    return launch


def shared_words(shared_with: list[dict]) -> str:
    """Why a launch that shared its cores cannot be counted."""
    return (
        f"shared its cores with {', '.join(r['run_id'] for r in shared_with)} (--allow-shared): the check compares "
        "launches that each had the machine to itself; run it again without --allow-shared"
    )


def _bare_figure(text: str, key: str) -> float | None:
    value = read_figure(text, key)
    return value if value is not None and value > 0 and math.isfinite(value) else None


def train_args(spec) -> list[str]:
    """The bare loop's arguments for the training run `spec`: the same model, data shape, threads, pinning and
    steps."""
    return [
        "--workload",
        spec.workload,
        "--device",
        spec.device,
        "--batch-size",
        spec.batch_size,
        "--image-size",
        spec.image_size,
        "--classes",
        spec.num_classes,
        "--threads",
        spec.threads,
        "--warmup-steps",
        spec.warmup_steps,
        "--steps",
        spec.steps_per_window * spec.windows,
        "--seed",
        spec.seed,
        "--lr",
        spec.lr,
        "--momentum",
        spec.momentum,
        "--cpu-bind",
        spec.cpu_bind,
    ]


def allreduce_args(spec) -> list[str]:
    """The bare loop's arguments for the communication run `spec` (one size): the same bytes and iterations."""
    c = spec.comm
    return [
        "--device",
        spec.device,
        "--threads",
        spec.threads,
        "--allreduce",
        c.min_bytes,
        "--warmup-iters",
        c.warmup_iters,
        "--iters",
        c.iters,
        "--cpu-bind",
        spec.cpu_bind,
    ]


def pick_throughput(record) -> float:
    return record.metrics.throughput.mean


def pick_busbw(record) -> float:
    return next(r.busbw_gbps for r in record.metrics.rows if r.op == "allreduce" and r.size == ALLREDUCE_BYTES)


# ---------------------------------------------------------------- planning and the verb
def choose_backends(text: str | None, device: str) -> list[str]:
    """The backends to check: those named (each must have a bare loop and be able to run here), or by default
    every compared backend (those a sweep compares) with a bare loop that can run here."""
    choices = ", ".join(BARE_LOOPS)
    if text is None:
        chosen = []
        for name in (n for n in BARE_LOOPS if n in COMPARED):
            problem = get_backend(name).unavailable_reason(device)
            if problem:
                note(f"bench selfcheck: skipping {name}: {problem}")
            else:
                chosen.append(name)
        if not chosen:
            raise UsageError(f"none of {choices} can run here; `bench doctor` says why")
        return chosen
    chosen = [name for name in text.split(",") if name]
    if not chosen:
        raise UsageError(f"--backend names no backend; choose from {choices}")
    for name in chosen:
        if name not in BARE_LOOPS:
            if name in BACKEND_MODULES:
                raise UsageError(f"backend {name} has no bare loop to compare with; choose from {choices}")
            raise UsageError(f"unknown backend {name!r}; choose from {choices}")
        problem = get_backend(name).unavailable_reason(device)
        if problem:
            raise UsageError(f"backend {name} cannot run here: {problem}")
    return list(dict.fromkeys(chosen))


@dataclass
class Plan:
    """Everything a selfcheck runs, built (and so validated) before anything is launched."""

    backend: str
    train: object  # RunSpec
    comm: object | None  # RunSpec, or None without the allreduce check


def plan(
    backends: list[str], workload: str, device: str, world_size: int, *, options: dict, allreduce: bool, comm: dict
) -> list[Plan]:
    """The suite's specs per backend: a training run (bench.tasks.train.build_spec, as `bench run`) and, with
    allreduce, a communication run at exactly ALLREDUCE_BYTES (bench.workflows.plan.comm_specs, as
    `bench allreduce`)."""
    from workloads import WORKLOADS

    if ":" in workload:  # a user's workload (a plain unknown name gets build_spec's message)
        raise UsageError(
            f"--workload {workload}: the bare loops take the built-in workloads only ({', '.join(WORKLOADS)})"
        )
    if allreduce and world_size < 2:
        raise UsageError(
            f"--nproc {world_size}: an allreduce needs 2 processes or more; raise --nproc or pass --no-comm"
        )
    sizes = comm_options(
        {**comm, "ops": "allreduce", "dtype": "float32", "min_bytes": ALLREDUCE_BYTES, "max_bytes": ALLREDUCE_BYTES}
    )
    out = []
    for backend in backends:
        train = build_spec(backend=backend, workload=workload, world_size=world_size, device=device, **options)
        comm_spec = comm_specs([backend], device, [world_size], comm=sizes, options=options)[0] if allreduce else None
        out.append(Plan(backend, train, comm_spec))
    return out


def checks_of(p: Plan, store, log_dir: Path) -> list[Check]:
    loop = BARE_LOOPS[p.backend]
    t = GOALS["throughput"]
    checks = [
        Check(
            p.backend,
            t,
            {
                "suite": suite_launch(p.train, store, pick_throughput),
                "bare": bare_launch(loop, p.train, train_args(p.train), t.key, log_dir, f"{p.backend}-throughput"),
            },
        )
    ]
    if p.comm is not None:
        b = GOALS["busbw"]
        checks.append(
            Check(
                p.backend,
                b,
                {
                    "suite": suite_launch(p.comm, store, pick_busbw),
                    "bare": bare_launch(loop, p.comm, allreduce_args(p.comm), b.key, log_dir, f"{p.backend}-allreduce"),
                },
            )
        )
    return checks


def validate(pairs: int, max_minutes: float) -> None:
    if pairs < MIN_LAUNCHES:
        raise UsageError(f"--pairs {pairs}: an interval needs at least {MIN_LAUNCHES} launches a side")
    if not (math.isfinite(max_minutes) and 0 <= max_minutes <= MAX_MINUTES):
        raise UsageError(
            f"--pairs-timeout {max_minutes * 60:g}: give 0 or more seconds, at most "
            f"{MAX_TIMEOUT_S:g} (0: only the --pairs pairs)"
        )


def selfcheck(plans: list[Plan], *, pairs: int, max_minutes: float, store_path: str | None, as_json: bool) -> int:
    """Run every plan's checks (see run_checks), print the table (or JSON) on stdout; exit 0 when every figure
    passes, 1 when one does not or a launch failed."""
    temporary = None
    if store_path is None:  # the check's runs are not the user's results: a store of their own, removed after
        temporary = Path(tempfile.mkdtemp(prefix="bench-selfcheck-"))
        store_path = str(temporary / "bench.sqlite")
    store = Store(store_path)
    store.check_writable()
    log_dir = store.run_dir(f"selfcheck-{new_run_id()}")
    log_dir.mkdir(parents=True, exist_ok=True)
    first = plans[0].train
    note(
        f"bench selfcheck: suite vs bare loop, {first.workload}, {first.world_size} {first.device} process(es), "
        f"{first.threads} thread(s) each{pinned_words(first.cpu_bind, ', ')}, "
        f"{first.warmup_steps} warm-up + {first.windows} x "
        f"{first.steps_per_window} steps; {pairs} pairs or more per figure, up to {max_minutes:g} min per backend "
        f"-> {store.path}"
    )
    checks: list[Check] = []
    try:
        for p in plans:
            mine = checks_of(p, store, log_dir)
            checks += mine
            run_checks(mine, pairs, max_minutes * 60)
    except (KeyboardInterrupt, Interrupted):
        if temporary is not None:  # a check cut short decides nothing: nothing to keep
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    failed = any(c.error for c in checks)
    if as_json:
        print(json.dumps(result_dict(plans, checks, pairs, max_minutes), indent=1))
    else:
        print("\n".join(table_lines(plans, checks)))
    if temporary is not None and not failed:
        shutil.rmtree(temporary, ignore_errors=True)
    else:
        note(f"bench selfcheck: runs in {store.path}, bare loops' logs in {log_dir}")
    return EXIT_OK if all(c.passed for c in checks) else EXIT_RUN_FAILED


# ---------------------------------------------------------------- output
def result_dict(plans: list[Plan], checks: list[Check], pairs: int, max_minutes: float) -> dict:
    first = plans[0].train
    return {
        "workload": first.workload,
        "device": first.device,
        "world_size": first.world_size,
        "threads": first.threads,
        "cpu_bind": first.cpu_bind,
        "warmup_steps": first.warmup_steps,
        "windows": first.windows,
        "steps_per_window": first.steps_per_window,
        "allreduce_bytes": ALLREDUCE_BYTES,
        "pairs": pairs,
        "max_minutes": max_minutes,
        "checks": [c.to_dict() for c in checks],
        "passed": all(c.passed for c in checks),
    }


def more_pairs_text(check: Check, d: dict) -> str:
    """What would reach the goal's resolution at the spread seen so far, in pairs and minutes."""
    needed = d["pairs_for_goal"]
    if needed is None:
        return "more --pairs or a longer --pairs-timeout narrow it"
    more = max(needed - check.pairs, 1)
    minutes = math.ceil(more * d["seconds_per_pair"] / 60)
    return (
        f"at this spread about {needed} pairs in all would reach it: {more} more, about {minutes} min at "
        f"{d['seconds_per_pair']:.0f} s a pair; raise --pairs-timeout"
    )


def table_lines(plans: list[Plan], checks: list[Check]) -> list[str]:
    """The verdict table: per backend and figure, launches, the geometric means, the ratio, its interval and
    PASS/FAIL; then a line per figure that failed or whose interval stayed wider than its goal."""
    first = plans[0].train
    head = (
        "backend",
        "figure",
        "launches",
        "suite mean",
        "bare mean",
        "ratio",
        f"{CONFIDENCE:.0%} interval",
        "verdict",
    )
    rows, notes = [], []
    for c in checks:
        d, g = c.to_dict(), c.goal

        def fig(v):
            return f"{g.fmt.format(v)} {g.unit}" if v is not None else "-"

        interval = f"{d['low']:.3f} to {d['high']:.3f}" if d["low"] is not None else "-"
        rows.append(
            (
                c.backend,
                g.label,
                f"{len(c.suite)} + {len(c.bare)}",
                fig(d["suite_mean"]),
                fig(d["bare_mean"]),
                f"{d['ratio']:.3f}" if d["ratio"] is not None else "-",
                interval,
                "PASS" if d["passed"] else "FAIL",
            )
        )
        where = f"{c.backend} {g.label}"
        if not d["passed"]:
            notes.append(f"{where}: FAIL: {d['why']}")
        if c.error is None and not d["resolved"] and d["resolution"] is not None:
            notes.append(
                f"{where}: goal resolution not reached: the interval is ±{d['resolution']:.1%}, the goal "
                f"±{g.resolution:.0%} ({more_pairs_text(c, d)})"
            )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        f"# suite / bare loop: {first.workload}, {first.world_size} {first.device} process(es), "
        f"{first.threads} thread(s) each{pinned_words(first.cpu_bind, ', ')}; means are geometric over launches"
    ]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    lines += notes
    goals = ", ".join(f"{g.floor:g} ({g.figure})" for g in GOALS.values())
    lines.append(
        f"# PASS: the {CONFIDENCE:.0%} interval of suite/bare includes 1.0 and its low end is at least {goals}"
    )
    return lines
