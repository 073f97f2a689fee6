"""The scaling model held against published scaling tables (docs/studies/published.md): its track record.

Each table (published/cases.json) gives a system's throughput at 1 GPU and at each N its source measured, with the
model's inputs for it: the model's gradient tensors and their ready order (a profile committed beside it,
published/shapes/MODEL.json, as bench.projection.shapes makes one), the cluster as a description
(bench.projection.clusters.parse_gpu_cluster), the rule that moves the gradients (a backend's, with the options of
the version the source ran, or, for a system the suite does not run, a rule here) and the per-GPU batch. The compute
is the published 1-GPU step (batch / throughput). The framework overhead and the slowdown are the model's stated GPU
assumptions (bench.projection.model.GPU_ASSUMPTIONS). The tables are split and committed (cases.json's `set`,
`fits` and `split`): each fit-set table's figures set one parameter of the model (the spread of a GPU worker's step,
fit_jitter; NCCL's share of a TCP link before 2.4.8, fit_nccl_socket_share), the held-out tables' only judge it, and
the goal is judged on those.

Efficiency = throughput(N) / (N x throughput(1)), or as the source gives it where it gives efficiencies only; the
error is predicted - published, in percentage points."""

from __future__ import annotations

import functools
import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from bench.backends.base import CommSchedule, Exchange
from bench.core.registry import get_backend
from bench.projection.clusters import parse_cluster
from bench.projection.model import Inputs, Point, Shape, Value, project
from bench.projection.shapes import committed_profile, model_inputs

DATA = Path(__file__).resolve().parent / "published"
GOAL_MEDIAN_POINTS = 5.0  # median absolute error at most this
GOAL_WORST_POINTS = 10.0  # and none above this
# what each fitted parameter is (cases.json's `fits`: the fit set's tables each set one)
FITTED_WORDS = {"jitter": "the stragglers' spread", "nccl_socket_share": "NCCL's share of a TCP link before 2.4.8"}
STUDY = "docs/studies/published.md"


class DistributedReplicated:
    """TensorFlow 1.x's `distributed_replicated` (tf_cnn_benchmarks, as its performance guide describes it): every
    GPU keeps a copy of the variables; the gradients are summed over the GPUs of each instance, the sums are pushed
    to the parameter servers (the variables split evenly over them), and each instance pulls the updated variables
    back and copies them to its GPUs. The model takes it after the backward pass (the pull waits for every push),
    the sum within an instance over each GPU's link as a reduce and a broadcast, and, across instances, the busiest
    instance's link: one holding a server sends its push to the other servers ((K-1)/K of the bytes) and its
    server's share to the other instances ((nodes-1)/K). K = round(nodes x servers_per_node), at least 1."""

    name = "TensorFlow distributed_replicated"
    by_nccl = False  # its servers' gRPC carries the bytes between instances, not NCCL's sockets

    def comm_schedule(self, options: dict) -> CommSchedule:
        return CommSchedule("after_backward")

    def cost_model(self, world_size: int, options: dict) -> tuple[str, float, float]:
        return "parameter servers", 2.0, 1.0  # unused: no processing of its own is measured on GPUs

    def exchanges(self, nbytes: float, world_size: int, hosts: int, device: str, options: dict) -> list[Exchange]:
        n = world_size
        if n <= 1:
            return [Exchange("within a node", 0.0, 0.0)]
        if hosts >= n:  # one node: the model gives each GPU its own link
            return [Exchange("summed within the node", 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes)]
        per_node = n / hosts
        servers = max(1, round(hosts * options["servers_per_node"]))
        busiest = (servers - 1) / servers * nbytes + (hosts - 1) * nbytes / servers
        local = 2.0 * (per_node - 1)
        return [
            Exchange(
                f"summed in nodes, through {servers} server(s)",
                2.0 + local,
                busiest,
                local_steps=local,
                local_bytes=local / per_node * nbytes,
            )
        ]


RULES = {"distributed_replicated": DistributedReplicated()}
# the systems `bench predict` projects that are none of the suite's backends (--tf-replicated): name -> RULES' key
SYSTEMS = {"tf-replicated": "distributed_replicated"}
# a table's options as `bench predict` takes them (an option not here must be the backend's default)
FLAGS = {"hvd_fusion_mb": "--hvd-fusion-mb", "hvd_cycle_ms": "--hvd-cycle-ms", "servers_per_node": "--tf-replicated"}


@dataclass(frozen=True)
class Row:
    table: str
    set: str  # "fit" or "held-out" (cases.json's split)
    workers: int
    nodes: int
    published: float  # efficiency
    predicted: float
    low: float
    high: float
    throughput: float  # published samples/s
    predicted_throughput: float
    algorithm: str
    batch: int
    communication_s: float  # the predicted step's communication (hidden and exposed), the compute it slowed, and
    # what the negotiation added
    stragglers_s: float  # the predicted step's wait for the slowest of N workers
    given: bool = False  # the source gives the efficiency only: the published throughput is implied by it

    @property
    def error_points(self) -> float:
        return 100.0 * (self.predicted - self.published)

    @property
    def unexplained_s(self) -> float:
        """The published step at N beyond the predicted one: time the model does not account for."""
        return self.batch * self.workers / self.throughput - self.batch * self.workers / self.predicted_throughput


@dataclass(frozen=True)
class Ahead:
    """Where a source has two systems at one N: which is ahead (faster), published and predicted."""

    pair: str
    workers: int
    published: str
    predicted: str

    @property
    def agrees(self) -> bool:
        return self.published == self.predicted


@dataclass(frozen=True)
class Errors:
    """The absolute errors of a set of published figures."""

    rows: list[Row]

    @property
    def errors(self) -> list[float]:
        return [abs(r.error_points) for r in self.rows]

    @property
    def median(self) -> float:
        return statistics.median(self.errors) if self.rows else math.nan

    @property
    def worst(self) -> float:
        return max(self.errors) if self.rows else math.nan

    @property
    def over(self) -> list[Row]:
        return [r for r in self.rows if abs(r.error_points) > GOAL_WORST_POINTS]

    @property
    def tables(self) -> int:
        return len({r.table for r in self.rows})

    def words(self) -> str:
        tables = f"{self.tables} table{'' if self.tables == 1 else 's'}"
        return (
            f"median error {self.median:.1f} points over {len(self.rows)} published efficiencies of {tables} "
            f"(worst {self.worst:.1f}; {len(self.over)} above {GOAL_WORST_POINTS:g})"
        )

    def as_json(self) -> dict:
        return {
            "figures": len(self.rows),
            "tables": self.tables,
            "median_error_points": self.median,
            "worst_error_points": self.worst,
            "above_goal": len(self.over),
        }


@dataclass(frozen=True)
class TrackRecord:
    tables: list[dict]
    rows: list[Row]
    ahead: list[Ahead]

    @property
    def held_out(self) -> Errors:
        """The figures no parameter was fitted to: what the goal is judged on."""
        return Errors([r for r in self.rows if r.set != "fit"])

    @property
    def fit(self) -> Errors:
        return Errors([r for r in self.rows if r.set == "fit"])

    @property
    def every(self) -> Errors:
        return Errors(self.rows)

    @property
    def errors(self) -> list[float]:
        return self.every.errors

    @property
    def median_error(self) -> float:
        return self.every.median

    @property
    def worst_error(self) -> float:
        return self.every.worst

    @property
    def over_worst(self) -> list[Row]:
        return self.every.over

    def meets_goal(self) -> bool:
        held = self.held_out
        return held.median <= GOAL_MEDIAN_POINTS and not held.over and all(a.agrees for a in self.ahead)

    def summary(self) -> str:
        """The one line `bench predict` and the page show beside any projection."""
        agree = sum(a.agrees for a in self.ahead)
        by_parameter: dict[str, list[str]] = {}
        for t in self.tables:
            if t["set"] == "fit":
                by_parameter.setdefault(t["fits"], []).append(t["id"])
        fitted = "; ".join(
            f"{', '.join(ids)}, which set{'s' if len(ids) == 1 else ''} {FITTED_WORDS[parameter]}"
            for parameter, ids in by_parameter.items()
        )
        return (
            f"this model, on published clusters: held out, {self.held_out.words()}; fit set ({fitted}), "
            f"{self.fit.words()}; the faster system right at {agree} of "
            f"{len(self.ahead)}; goal on the held-out figures (median at most {GOAL_MEDIAN_POINTS:g}, none above "
            f"{GOAL_WORST_POINTS:g}): " + ("met" if self.meets_goal() else "missed") + f" ({STUDY})"
        )

    def as_json(self) -> dict:
        return {
            "summary": self.summary(),
            "held_out": self.held_out.as_json(),
            "fit": self.fit.as_json() | {"tables_fitted": sorted({r.table for r in self.fit.rows})},
            "median_error_points": self.median_error,
            "worst_error_points": self.worst_error,
            "meets_goal": self.meets_goal(),
        }


def load_cases() -> dict:
    return json.loads((DATA / "cases.json").read_text())


def shape_profile(model: str) -> dict:
    return json.loads((DATA / "shapes" / f"{model}.json").read_text())


def published_efficiencies(table: dict) -> dict[int, float]:
    """N -> the published efficiency at N GPUs: throughput(N) / (N x throughput(1)), or the source's own figure where
    it gives efficiencies only."""
    one = table["throughput"]["1"]
    out = {int(n): t / (int(n) * one) for n, t in table["throughput"].items() if n != "1"}
    return out | {int(n): e for n, e in table.get("efficiency", {}).items()}


def compute_ms(table: dict) -> str:
    """The published 1-GPU step, batch / throughput(1), in ms to the microsecond, as `bench predict --compute-ms`
    takes it: the study's compute is this figure, so that the command reproduces its rows."""
    return f"{1e3 * table['batch'] / table['throughput']['1']:.3f}"


def predict_backend(table: dict) -> str:
    """The name `bench predict --backend` takes for the table's system."""
    if table.get("rule"):
        return next(name for name, rule in SYSTEMS.items() if rule == table["rule"])
    return table["backend"]


def cli_args(table: dict) -> list[str]:
    """The `bench predict` arguments that project the table: its model (by name: the committed profile), system,
    1-GPU step, batch, cluster and options."""
    args = [
        "--model",
        table["model"],
        *([] if table.get("rule") else ["--backend", table["backend"]]),
        "--compute-ms",
        compute_ms(table),
        "--compute-batch",
        str(table["batch"]),
        "--cluster",
        table["cluster"],
    ]
    defaults = {} if table.get("rule") else {o.name: o.default for o in get_backend(table["backend"]).options}
    for name, value in table["options"].items():
        if name in FLAGS:
            args += [FLAGS[name], f"{value:g}"]
        elif defaults.get(name) != value:
            raise ValueError(f"table {table['id']}: option {name}={value!r} has no `bench predict` flag")
    return args


def inputs_for(table: dict) -> Inputs:
    """The model's inputs for a published table, as `bench predict` makes them from cli_args(table): its 1-GPU step
    as the compute, its model's committed profile, its rule and options, and the GPU assumptions."""
    profile = committed_profile(table["model"])
    if profile is None:
        raise ValueError(f"table {table['id']}: no committed profile of {table['model']}")
    rule = RULES[table["rule"]] if table.get("rule") else None
    return model_inputs(
        table["model"],
        profile,
        predict_backend(table),
        table["batch"],
        float(compute_ms(table)) / 1e3,
        "cuda",
        f"compute: the published 1-GPU step, {compute_ms(table)} ms at batch {table['batch']}",
        options=table["options"],
        rule=rule,
    )


def row_of(table: dict, point: Point) -> Row:
    one = table["throughput"]["1"]
    efficiency = published_efficiencies(table)[point.workers]
    parts = point.parts
    return Row(
        table["id"],
        table["set"],
        point.workers,
        point.nodes,
        efficiency,
        point.efficiency,
        point.efficiency_low,
        point.efficiency_high,
        efficiency * point.workers * one,
        point.efficiency * point.workers * one,
        point.algorithm,
        table["batch"],
        parts.hidden + parts.exposed + parts.slowdown + parts.coordination,
        parts.stragglers,
        str(point.workers) not in table["throughput"],
    )


def rows_from_cli(table: dict, answer: dict) -> list[Row]:
    """The table's rows from `bench predict --json`'s answer to cli_args(table): what the CLI projects."""
    (result,) = answer["results"]
    (projected,) = result["backends"].values()
    one = table["throughput"]["1"]
    figures = published_efficiencies(table)
    rows = []
    for p in projected["points"]:
        if p["workers"] not in figures:
            continue
        efficiency = figures[p["workers"]]
        parts = p["parts_s"]
        rows.append(
            Row(
                table["id"],
                table["set"],
                p["workers"],
                p["nodes"],
                efficiency,
                p["efficiency"],
                p["efficiency_low"],
                p["efficiency_high"],
                efficiency * p["workers"] * one,
                p["efficiency"] * p["workers"] * one,
                p["algorithm"],
                result["case"]["batch"],
                parts["hidden"] + parts["exposed"] + parts["slowdown"] + parts["coordination"],
                parts["stragglers"],
                str(p["workers"]) not in table["throughput"],
            )
        )
    return rows


def rows_of(table: dict, inputs_change=None, cluster_change=None) -> list[Row]:
    """The table's rows; `inputs_change(inputs)` and `cluster_change(cluster, nodes)` give the ablation's variants."""
    cluster = parse_cluster(table["cluster"], "cuda")
    counts = sorted(published_efficiencies(table))
    inputs = inputs_for(table) if inputs_change is None else inputs_change(inputs_for(table))
    if cluster_change is None:
        points = project(inputs, cluster, counts)
    else:
        points = [project(inputs, cluster_change(cluster, cluster.nodes_for(n)), [n])[0] for n in counts]
    return [row_of(table, p) for p in points]


def ahead_of(tables: list[dict], rows: list[Row]) -> list[Ahead]:
    """For each pair of tables from one source (the same `pair`), at each N both have: the faster system."""
    out = []
    by_pair: dict[str, list[dict]] = {}
    for t in tables:
        if t.get("pair"):
            by_pair.setdefault(t["pair"], []).append(t)
    for pair, (a, b) in ((p, ts) for p, ts in by_pair.items() if len(ts) == 2):
        for n in sorted(set(a["throughput"]) & set(b["throughput"]), key=int):
            if n == "1":
                continue
            ra = next(r for r in rows if r.table == a["id"] and r.workers == int(n))
            rb = next(r for r in rows if r.table == b["id"] and r.workers == int(n))
            published = a["id"] if a["throughput"][n] >= b["throughput"][n] else b["id"]
            predicted = a["id"] if ra.predicted_throughput >= rb.predicted_throughput else b["id"]
            out.append(Ahead(pair, int(n), published, predicted))
    return out


@functools.cache
def track_record() -> TrackRecord:
    cases = load_cases()
    tables = cases["tables"]
    rows = [row for t in tables for row in rows_of(t)]
    return TrackRecord(tables, rows, ahead_of(tables, rows))


def markdown_rows(record: TrackRecord) -> list[str]:
    """The study's table (docs/studies/published.md), one line per published efficiency."""
    return markdown_of_rows(record.rows)


def markdown_of_rows(rows: list[Row]) -> list[str]:
    lines = [
        "| table | set | GPUs | nodes | published img/s | published efficiency | predicted (95%) | error, points "
        "| communication ms (predicted) | stragglers ms | unexplained ms/step | algorithm |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.table} | {r.set} | {r.workers} | {r.nodes} | {'-' if r.given else f'{r.throughput:,.2f}'} | "
            f"{r.published:.1%} | {r.predicted:.1%} ({r.low:.1%}-{r.high:.1%}) | {r.error_points:+.1f} | "
            f"{r.communication_s * 1e3:.1f} | {r.stragglers_s * 1e3:.1f} | {r.unexplained_s * 1e3:+.1f} | "
            f"{r.algorithm} |"
        )
    return lines


def markdown_inputs(record: TrackRecord) -> list[str]:
    """The study's table of each published table's inputs."""
    sources = load_cases()["sources"]
    lines = [
        "| table | source | system | model: parameters, tensors | cluster | gradients move by | compute: 1-GPU step |",
        "|---|---|---|---|---|---|--:|",
    ]
    for t in record.tables:
        profile = shape_profile(t["model"])
        step = t["batch"] / t["throughput"]["1"]
        lines.append(
            f"| {t['id']} | [{t['source']}]({sources[t['source']]['url']}) ({sources[t['source']]['era']}) | "
            f"{t['system']} | {t['model']}: {profile['parameters'] / 1e6:.1f} M, {len(profile['grads'])} | "
            f"`{t['cluster']}` | {t['rule_words']} | {step * 1e3:,.1f} ms ({t['throughput']['1']:g} img/s) |"
        )
    return lines


def markdown_commands(record: TrackRecord) -> list[str]:
    """The study's table of the `bench predict` command that gives each table's rows."""
    lines = ["| table | the command that projects it |", "|---|---|"]
    lines += [f"| {t['id']} | `bench predict {' '.join(cli_args(t))}` |" for t in record.tables]
    return lines


def _at_end(end: str):
    def change(inputs: Inputs) -> Inputs:
        return replace(inputs, assumed=(), **{a.name: Value(getattr(a, end)) for a in inputs.assumed})

    return change


def _flat_shares(inputs: Inputs) -> Inputs:
    shape = inputs.shape
    return replace(inputs, shape=Shape(1 / 3, 2 / 3, 0.0, shape.grads, shape.run))


# (what changes, inputs_change, cluster_change): each part of the model taken away or moved, one at a time
VARIANTS = (
    ("the model as above", None, None),
    ("assumed overhead and slowdown at their low ends (0 ms, 0 s per s)", _at_end("low"), None),
    ("assumed overhead and slowdown at their high ends (1 ms, 0.3 s per s)", _at_end("high"), None),
    (
        "the link inside a node free across nodes (the model before this study)",
        None,
        lambda c, nodes: replace(c, node_link=None) if nodes > 1 else c,
    ),
    ("NCCL's ring only (no tree)", None, lambda c, nodes: replace(c, tree=False)),
    ("the step's shares not the CPU profile's but forward 1/3, backward 2/3", _flat_shares, None),
    ("without the stragglers (no spread of a worker's step)", lambda i: replace(i, jitter=Value(0.0)), None),
)


def fit_jitter() -> Value:
    """The spread of ln(a GPU worker's step) (bench.projection.model.GPU_JITTER) fitted on its fit set's figures."""

    def change(sigma: float):
        return (lambda inputs: replace(inputs, jitter=Value(sigma))), None

    return _fitted("jitter", change, (0.0, 0.2))


def fit_nccl_socket_share() -> Value:
    """The share of a TCP link NCCL's socket transport got before 2.4.8 (bench.projection.clusters.NCCL_SOCKET_SHARE)
    fitted on its fit set's figures."""

    def change(share: float):
        return None, (lambda cluster, nodes: replace(cluster, nccl_socket_share=share))

    return _fitted("nccl_socket_share", change, (0.05, 1.0))


def _fitted(parameter: str, change, bounds: tuple[float, float]) -> Value:
    """The value of one parameter fitted on the tables that fit it (cases.json's `fits`): the least squares of
    predicted against published efficiency, in points, and its standard error from the residuals (the residual
    variance over the squared sensitivity of the predictions to it), with the figures less one as its degrees of
    freedom. change(value) gives rows_of's (inputs_change, cluster_change) with the parameter at that value."""
    tables = [t for t in load_cases()["tables"] if t.get("fits") == parameter]

    def predicted(value: float) -> list[float]:
        return [100 * r.predicted for t in tables for r in rows_of(t, *change(value))]

    published = [100 * e for t in tables for _, e in sorted(published_efficiencies(t).items())]

    def squares(value: float) -> float:
        return sum((p - q) ** 2 for p, q in zip(predicted(value), published))

    from scipy import optimize  # here: scipy's import is a fifth of a second of every bench command's start

    best = float(optimize.minimize_scalar(squares, bounds=bounds, method="bounded", options={"xatol": 1e-7}).x)
    step = 1e-4
    slopes = [(a - b) / (2 * step) for a, b in zip(predicted(best + step), predicted(best - step))]
    dof = len(published) - 1
    se = math.sqrt(squares(best) / dof / sum(s * s for s in slopes))
    return Value(best, se, dof, tuple(t["id"] for t in tables))


def ablation() -> list[tuple[str, float, float, int]]:
    """(variant, median absolute error, worst, figures above GOAL_WORST_POINTS) for each of VARIANTS: what each
    part of the model does to the track record (docs/studies/published.md)."""
    tables = load_cases()["tables"]
    out = []
    for words, inputs_change, cluster_change in VARIANTS:
        errors = [abs(r.error_points) for t in tables for r in rows_of(t, inputs_change, cluster_change)]
        out.append((words, statistics.median(errors), max(errors), sum(e > GOAL_WORST_POINTS for e in errors)))
    return out


def markdown_ablation() -> list[str]:
    lines = ["| variant | median absolute error, points | worst | above 10 |", "|---|--:|--:|--:|"]
    lines += [f"| {words} | {median:.1f} | {worst:.1f} | {over} |" for words, median, worst, over in ablation()]
    return lines
