"""The page's answer, first on it: one line per scenario a user weighs (training speed at each measured scale and
condition; each failure scenario: a killed, hung or terminated worker, one joining, a lost or cut-off host), each
with its evidence and how sure, and one overall sentence that follows from those lines and never goes beyond them.

What is weighed, and what is only shown (docs/method.md, "The answer"):
- training speed: the training-throughput rows of two or more workers (one worker measures the wrappers' overhead);
- failures: whether each backend came through, in how many of its runs, and where both always did, how soon;
- shown beside, never a reason: a collective's bus bandwidth (a microbenchmark, not training), the start-up time (paid
  once a job) and scaling efficiency (the throughput rows again, divided by one worker's);
- never weighed: rows under conditions that distort the comparison (shaded on the scorecard, with the reason).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bench.core.registry import PRIMARY
from bench.report.sections import FAILURE, SPEED, ScoreRow
from bench.tasks.fault.results import undecided


@dataclass(frozen=True)
class Scenario:
    name: str  # "training, mnist_mlp, 2 workers, cpu, pinned, one host" / "a hung worker"
    said: str  # what was found, with its evidence and how sure
    favours: str | None = None  # the backend this scenario counts for, where it decides
    failure: bool = False  # a failure scenario (else training speed)
    too_few_runs: bool = False  # a failure scenario whose runs are too few to decide it


def speed_scenario(row: ScoreRow, hardware: str) -> Scenario:
    name = "training, " + short_condition(row.condition, hardware)
    count, _, pooled = row.launches.partition(" (")  # "9 + 9 (3 sweeps pooled)"
    launches = f"{count} launches" + (f", {pooled[:-1]}" if pooled else "")
    if row.standing == "ahead":
        return Scenario(name, f"{row.outcome} ({launches})", row.winner)
    if row.standing == "within":
        return Scenario(name, f"a tie: {row.outcome} ({launches})")
    if row.standing == "one launch":
        return Scenario(name, f"one launch a side, which cannot tell ({launches})")
    return Scenario(name, f"{row.outcome} ({launches})")


def failure_scenario(row: ScoreRow) -> Scenario:
    """Whether each side came through, in how many runs; the recovery time only where both always did."""
    name = failure_name(row.measure)
    first, second = PRIMARY
    (k1, n1, _), (k2, n2, _) = (row.recovered.get(b, (0, 0, "")) for b in PRIMARY)
    count = f"{n1} + {n2} runs"
    sides = f"{came_through(row, first)}; {came_through(row, second)}"
    why_not = undecided((k1, n1), (k2, n2))
    if why_not:
        return Scenario(name, f"{sides}: {why_not}", failure=True, too_few_runs=True)
    if k1 * n2 != k2 * n1:  # the shares of runs that came through differ, by enough failures to decide
        return Scenario(name, sides, first if k1 * n2 > k2 * n1 else second, failure=True)
    if k1 == 0:
        return Scenario(name, f"neither came through ({count}): {row.outcome}", failure=True)
    if row.standing == "ahead":
        return Scenario(name, f"both came through every time; {row.outcome} ({count})", row.winner, failure=True)
    if row.standing == "within":
        return Scenario(name, f"both came through every time, a tie: {row.outcome} ({count})", failure=True)
    return Scenario(name, f"both came through every time; {row.outcome} ({count})", failure=True)


def came_through(row: ScoreRow, backend: str) -> str:
    """'elastic came through in 3 of 3 runs (15.7 s median)' / 'horovod did not, in 3 of 3 runs (timeout in 3 runs)'."""
    k, n, ended = row.recovered.get(backend, (0, 0, ""))
    if k == n:
        return f"{backend} came through in {n} of {n} run{'s' if n != 1 else ''} ({row.figures[backend]})"
    if k == 0:
        return f"{backend} did not, in {n} of {n} run{'s' if n != 1 else ''} ({ended})"
    return f"{backend} came through in {k} of {n} runs ({row.figures[backend]}; {ended})"


def failure_name(measure: str) -> str:
    """'recovery from a hung worker' -> 'a hung worker'."""
    return measure.removeprefix("recovery from ")


def short_condition(condition: str, hardware: str) -> str:
    """The condition without the hardware, which the answer says once."""
    return condition.removesuffix(f", on {hardware}") if hardware else condition


def weighed(rows: list[ScoreRow]) -> list[ScoreRow]:
    return [r for r in rows if not r.artefact and r.decides]


def scenarios(rows: list[ScoreRow], hardware: str = "") -> list[Scenario]:
    """The scenarios of a page's scorecard rows (each task says which of its rows are one: ScoreRow.weighs),
    training speed first, then the failure scenarios, each in the order of `rows`."""
    basis = weighed(rows)
    speed = [speed_scenario(r, hardware) for r in basis if r.weighs == SPEED]
    failures = [r for r in basis if r.weighs == FAILURE]
    names = [failure_name(r.measure) for r in failures]
    return speed + [
        # a fault made under two sets of conditions is two scenarios: each named with its conditions
        dataclasses.replace(found, name=f"{found.name} ({short_condition(r.condition, hardware)})")
        if names.count(found.name) > 1
        else found
        for r, found in zip(failures, map(failure_scenario, failures))
    ]


def evidence(rows: list[ScoreRow], hardware: str = "") -> list[str]:
    """The rows shown beside the answer and never weighed in it, in words."""
    return [
        f"{r.measure}, {short_condition(r.condition, hardware)}: {r.outcome}" for r in weighed(rows) if not r.weighs
    ]


def listing(found: list[Scenario]) -> str:
    return "; ".join(s.name for s in found)


def overall(found: list[Scenario]) -> str:
    """One sentence that follows from the scenarios: a choice only where one backend is ahead somewhere and behind
    nowhere."""
    speed = [s for s in found if not s.failure]
    failures = [s for s in found if s.failure]
    ahead = {b: [s for s in found if s.favours == b] for b in PRIMARY}
    leaders = [b for b, won in ahead.items() if won]
    if not found:
        return (
            "No answer yet: no training speed or failure scenario was measured for both under conditions that do not "
            "distort the comparison."
        )
    if len(leaders) == 2:
        first, second = PRIMARY
        return (
            f"Neither is ahead everywhere: {first} in {listing(ahead[first])}, {second} in {listing(ahead[second])}; "
            "choose by which of these your jobs meet more."
        )
    if len(leaders) == 1:
        (leader,) = leaders
        other = next(b for b in PRIMARY if b != leader)
        fast = [s for s in ahead[leader] if not s.failure]
        robust = [s for s in ahead[leader] if s.failure]
        reasons = []
        if fast:
            reasons.append(f"it trains faster in {len(fast)} of {len(speed)} training scenario(s)")
        elif speed:
            reasons.append(f"training speed does not separate them ({len(speed)} scenario(s))")
        if robust:
            reasons.append(f"it is ahead in {listing(robust)}")
        said = f"Choose {leader} on this hardware: {' and '.join(reasons)}, and {other} is ahead in none"
        if not failures:
            said += "; no failure scenario was measured for both"
        return said + "."
    undecided = [s for s in found if s.too_few_runs]
    said = "Neither is ahead on what this page measured"
    if undecided:
        said += (
            f" ({len(undecided)} failure scenario(s) have too few runs to decide: more fault runs would tell, "
            "`bench sweep --fault-repeats 3`)"
        )
    return said + (
        ": choose on what it does not measure (your cluster's launcher and scheduler, the frameworks you use)."
    )
