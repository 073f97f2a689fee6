"""The page's answer, first on it: one line per scenario a user weighs (training speed at each measured scale and
condition; each failure scenario: a killed, hung or terminated worker, one joining, a lost or cut-off host), each
with its evidence and how sure, and one overall sentence made from those lines by one rule (RULE, also on the page's
methodology and in docs/method.md, "The answer"), which never goes beyond them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from bench.core.registry import PRIMARY
from bench.core.stats import EQUIVALENCE_USEFUL
from bench.report.sections import FAILURE, SPEED, ScoreRow

WON, TIE, UNDECIDED, NEITHER = "won", "tie", "not yet decided", "neither came through"

RULE = (
    "The answer's rule. Weighed: training throughput at each condition with 2 or more workers, and each failure "
    "scenario both backends ran; shown beside, never weighed: a collective's bus bandwidth, start-up, scaling "
    "efficiency, one-worker rows and rows under conditions that distort the comparison. Each scenario ends one way: "
    "won by a backend (training: significant at 5% after Holm's correction over the page; a failure: its exact test "
    "at 5%, Fisher's on the runs that came through, else the permutation test of the recovery times); a tie "
    f"(shown within a margin of at most ±{EQUIVALENCE_USEFUL:.0%}, the margin stated); neither came through; or not "
    "yet decided (said with the side ahead in every run, where one was, and what would decide it). Every scenario "
    "counts once and none is traded against another: the sentence chooses a backend only where it wins a scenario, "
    "the other wins none and was ahead in every run of no undecided one; where each wins somewhere it names what each "
    "wins; it always names the ties and what is not yet decided."
)


@dataclass(frozen=True)
class Scenario:
    name: str  # "training, mnist_mlp, 2 workers, cpu, pinned, one host" / "a hung worker"
    said: str  # what was found, with its evidence and how sure
    favours: str | None = None  # the backend that won it
    failure: bool = False  # a failure scenario (else training speed)
    state: str = UNDECIDED  # WON, TIE, UNDECIDED or NEITHER
    leader: str | None = None  # the backend ahead in every run of it, decided or not (failure scenarios)
    why: str = ""  # a tie's margin, or what leaves it undecided and what would decide it, in a few words


def speed_scenario(row: ScoreRow, hardware: str) -> Scenario:
    name = "training, " + short_condition(row.condition, hardware)
    if row.standing == "ahead":
        return Scenario(name, row.line, row.winner, state=WON)
    if row.standing == "within":
        return Scenario(name, row.line, state=TIE, why=f"within ±{row.margin:.0%}")
    if row.standing == "one launch":
        return Scenario(name, row.line, why="one launch a side")
    why = "not resolved" if math.isnan(row.margin) else f"not resolved at ±{row.margin:.0%}"
    return Scenario(name, row.line, why=why)


def failure_scenario(row: ScoreRow) -> Scenario:
    """The row's line (who came through and how soon, each side's median and runs), and, where not yet decided, the
    side ahead in every run and what would decide it (bench.tasks.fault.results.decide made the row's verdict)."""
    name = failure_name(row.measure)
    (k1, n1, _, _), (k2, n2, _, _) = (row.recovered.get(b, (0, 0, "", "")) for b in PRIMARY)
    said = row.line
    if row.winner is not None:
        return Scenario(name, said, row.winner, failure=True, state=WON, leader=row.leader)
    if row.standing == "within":
        return Scenario(name, said, failure=True, state=TIE, why=f"within ±{row.margin:.0%}")
    if k1 == 0 and k2 == 0 and min(n1, n2) > 0 and not row.to_decide:
        return Scenario(name, said, failure=True, state=NEITHER)
    if row.leader is not None and k1 * n2 != k2 * n1:
        other = PRIMARY[1] if row.leader == PRIMARY[0] else PRIMARY[0]
        why = f"{row.leader} came through in every run and {other} in none, {n1} + {n2} runs"
    elif row.leader is not None:
        why = f"{row.leader} recovered sooner in every one of {n1} + {n2} runs"
    elif min(n1, n2) < 2:
        why = "one run a side"
    else:
        why = f"not resolved at ±{row.margin:.0%}" if 0 < row.margin < float("inf") else "the runs overlap"
    why += f"; {row.to_decide}" if row.to_decide else ""
    # one run a side is what the line already says; beside any other, what leaves it open and what would decide it
    extra = row.to_decide if why.startswith("one run a side") else why
    said += f"; {extra}" if extra else ""
    return Scenario(name, said, failure=True, leader=row.leader, why=why)


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


def listing(found: list[Scenario], why: bool = False) -> str:
    """The scenarios' names, each with its few words where `why`."""
    return "; ".join(s.name + (f" ({s.why})" if why and s.why else "") for s in found)


def overall(found: list[Scenario]) -> str:
    """The one sentence the scenarios make, by RULE: what each backend wins, a choice only where one wins somewhere
    and the other nowhere, not even in every run of a scenario not yet decided; then the ties and what is not yet
    decided."""
    if not found:
        return (
            "No answer yet: no training speed or failure scenario was measured for both under conditions that do not "
            "distort the comparison."
        )
    first, second = PRIMARY
    wins = {b: [s for s in found if s.state == WON and s.favours == b] for b in PRIMARY}
    undecided = [s for s in found if s.state == UNDECIDED]
    leaning = {b: [s for s in undecided if s.leader == b] for b in PRIMARY}
    speed = [s for s in found if not s.failure]
    if wins[first] and wins[second]:
        said = (
            f"Neither is ahead everywhere: {first} wins {listing(wins[first])}; {second} wins "
            f"{listing(wins[second])}; choose by which your jobs meet more."
        )
    elif wins[first] or wins[second]:
        leader = first if wins[first] else second
        other = second if leader == first else first
        fast = [s for s in wins[leader] if not s.failure]
        robust = [s for s in wins[leader] if s.failure]
        reasons = []
        if fast:
            reasons.append(f"it trains faster in {len(fast)} of {len(speed)} training scenario(s)")
        if robust:
            reasons.append(f"it wins {listing(robust)}")
        if leaning[other]:
            said = (
                f"No choice yet: {leader} wins {listing(wins[leader])}; {other} wins none so far, but was ahead in "
                f"every run of {listing(leaning[other])}, which is not yet decided."
            )
        else:
            said = f"Choose {leader} on this hardware: {' and '.join(reasons)}; {other} wins none."
    elif leaning[first] or leaning[second]:  # what each was ahead in is said with the undecided scenarios
        said = "No choice yet: no scenario is decided for either."
    else:
        said = (
            "Neither is ahead on what this page measured: choose on what it does not measure (your cluster's "
            "launcher and scheduler, the frameworks you use)."
        )
    ties = [s for s in found if s.state == TIE]
    if ties:
        # every training scenario tied: said in a few words, as each is a line below
        tied_speed = [s for s in ties if not s.failure]
        named = [listing([s for s in ties if s.failure], why=True)] if len(tied_speed) < len(ties) else []
        if tied_speed and len(tied_speed) == len(speed):
            margins = ", ".join(s.why.removeprefix("within ") for s in tied_speed)
            named.insert(0, f"training speed in {len(speed)} of {len(speed)} scenario(s) (within {margins})")
        elif tied_speed:
            named.insert(0, listing(tied_speed, why=True))
        said += f" Tied: {'; '.join(named)}."
    if undecided:
        # those run once a side are counted, not listed: each is a line below, and what decides them is the same
        once = [s for s in undecided if s.why.startswith(("one run a side", "one launch a side"))]
        named = [listing([s for s in undecided if s not in once], why=True)] if len(once) < len(undecided) else []
        if once:
            named.append(f"{len(once)} scenario(s) run once a side")
        said += f" Not yet decided: {'; '.join(named)}."
    neither = [s for s in found if s.state == NEITHER]
    if neither:
        said += f" Neither came through: {listing(neither)}."
    if not any(s.failure for s in found):
        said += " No failure scenario was measured for both."
    return said
