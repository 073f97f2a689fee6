"""Do sweeps of the same code on the same machine agree? Every comparison the report makes (the primary
pair, the reference backend against each of them, each case against the plain loop, scaling efficiency,
allreduce busbw at a matched size) is taken from each sweep on its own, and two sweeps contradict each
other on a comparison when one calls it significant in one direction and the other's estimate points
the other way (docs/method.md, "Replication").
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.registry import all_tasks, task_part
from bench.core.stats import CONFIDENCE, Estimate
from bench.results.frame import hardware, records_to_frame


@dataclass(frozen=True)
class Claim:
    """One comparison in one sweep: its estimate, as a ratio (above 1: the first named side is ahead)."""
    key: str
    estimate: Estimate

    @property
    def direction(self) -> int:
        """+1 or -1 where significant, else 0."""
        if not self.estimate.significant:
            return 0
        return 1 if self.estimate.ratio > 1 else -1

    @property
    def leaning(self) -> int:
        """The sign of the point estimate, significant or not."""
        return 1 if self.estimate.ratio > 1 else -1 if self.estimate.ratio < 1 else 0

    def cell(self) -> str:
        e = self.estimate
        text = f"{e.ratio - 1:+.1%}"
        if not e.replicated:
            return text + " (1 launch)"
        return text + (" *" if self.direction else f" (±{e.resolution:.0%})")


def sweep_claims(records: list) -> dict[str, Claim]:
    """The comparisons of one sweep's records, by key: what each task's report view compares
    (`comparisons` of bench/tasks/<task>/results.py)."""
    return claims_by_sweep({"": records})[""]


def claims_by_sweep(sweeps: dict[str, list]) -> dict[str, dict[str, Claim]]:
    """sweep_claims of every sweep (sweep id -> records), from one frame of all their runs cut by sweep and task:
    a store of a thousand sweeps would otherwise build a thousand frames."""
    frame = records_to_frame([rec for recs in sweeps.values() for rec in recs])
    labels = [sid for sid, recs in sweeps.items() for _ in recs]
    parts = dict(iter(frame.groupby([labels, frame["task"].tolist()], sort=False))) if labels else {}
    none = frame.iloc[0:0]
    views = [(task.name, results) for task in all_tasks()
             if (results := task_part(task.name, "results")) is not None and hasattr(results, "comparisons")]
    return {sid: {key: Claim(key, est) for name, results in views
                  for key, est in results.comparisons(parts.get((sid, name), none)).items()}
            for sid in sweeps}


def contradictions(a: dict[str, Claim], b: dict[str, Claim]) -> list[str]:
    """The keys on which one sweep is significant in one direction and the other leans the other way."""
    out = []
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if (x.direction and y.leaning == -x.direction) or (y.direction and x.leaning == -y.direction):
            out.append(key)
    return out


def pair_contradictions(claims: dict[str, dict[str, Claim]], pairs: list[tuple[str, str]]) -> dict[tuple, list[str]]:
    """contradictions() of each pair of sweeps (a, b), a before b in sorted order, `claims` sweep id -> its claims.
    The same rule taken key by key, not pair by pair: on a key, the sweeps significant in one direction contradict
    those that lean the other way, and only those pairs are visited (a store of a thousand sweeps makes half a
    million pairs, nearly all of them without a contradiction)."""
    out: dict[tuple, list[str]] = {pair: [] for pair in pairs}
    by_key: dict[str, dict[str, Claim]] = {}
    for sid, made in claims.items():
        for key, claim in made.items():
            by_key.setdefault(key, {})[sid] = claim
    for key in sorted(by_key):  # each pair's keys in sorted order, as contradictions() lists them
        leaning: dict[int, list[str]] = {1: [], -1: [], 0: []}
        for sid, claim in by_key[key].items():
            leaning[claim.leaning].append(sid)
        found = set()
        for sid, claim in by_key[key].items():
            if claim.direction:
                found.update(tuple(sorted((sid, other))) for other in leaning[-claim.direction])
        for pair in found:
            if pair in out:  # sweeps of one machine only
                out[pair].append(key)
    return out


def machine_label(records: list) -> str:
    """The machine a sweep ran on (bench.results.frame.hardware); a sweep that somehow spans two names both."""
    return " + ".join(sorted({hardware(r) for r in records}))


def agreement(sweeps: dict[str, list]) -> dict:
    """Claims of every sweep (sweep id -> records), and the contradictions of every pair of sweeps made on one
    machine. Sweeps of two machines are not reruns of each other: where the store holds more than one machine,
    each claim's key names its machine, so none is compared with another machine's."""
    machines = {sid: machine_label(recs) for sid, recs in sweeps.items()}
    several = len(set(machines.values())) > 1
    claims = {}
    for sid, made in claims_by_sweep(sweeps).items():
        claims[sid] = {}
        for key, claim in made.items():
            key = f"{key}, on {machines[sid]}" if several else key
            claims[sid][key] = Claim(key, claim.estimate)
    ids = sorted(claims)
    pairs = pair_contradictions(claims, [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]
                                         if machines[a] == machines[b]])
    keys = sorted({k for c in claims.values() for k in c})
    # significant, and in the same direction, in every sweep that made the comparison (two or more)
    resolved = []
    for k in keys:
        made = [claims[s][k] for s in ids if k in claims[s]]
        if len(made) >= 2 and all(c.direction for c in made) and len({c.direction for c in made}) == 1:
            resolved.append(k)
    return {"sweeps": ids, "claims": claims, "pairs": pairs, "keys": keys, "resolved_everywhere": resolved}


def format_agreement(result: dict) -> str:
    ids, claims = result["sweeps"], result["claims"]
    width = max([len(k) for k in result["keys"]] + [10])
    lines = [f"{'comparison (first / second - 1)':<{width}}  " + "  ".join(f"{s[-6:]:>16}" for s in ids) + "  agree",
             ]
    bad = {k for keys in result["pairs"].values() for k in keys}
    for key in result["keys"]:
        cells = [claims[s][key].cell() if key in claims[s] else "-" for s in ids]
        lines.append(f"{key:<{width}}  " + "  ".join(f"{c:>16}" for c in cells) + ("  NO" if key in bad else "  yes"))
    n_pairs = len(result["pairs"])
    n_bad = sum(len(v) for v in result["pairs"].values())
    lines.append(f"* significant ({CONFIDENCE:.0%} interval excludes 0); otherwise (±R): the smallest difference "
                 "that sweep could have detected.")
    lines.append(f"{len(ids)} sweeps, {n_pairs} pairs, {len(result['keys'])} comparisons: {n_bad} contradiction(s); "
                 f"{len(result['resolved_everywhere'])} comparison(s) significant in the same direction in every sweep "
                 "that made it.")
    return "\n".join(lines)
