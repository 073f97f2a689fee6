"""`bench report`: one self-contained HTML page that answers "elastic or Horovod?" for the hardware
the stored runs ran on (inline CSS and plots, no script, no network).

Every registered task contributes its part from the frame of its own runs (Task.report_part, a
bench.report.sections.ReportPart): verdict sentences, recommendation, and its sections. This module adds what
every run has (Rank map, Environment, Failed and unstable runs, Methodology), orders the sections and
renders them with the template bench/report/templates/report.html.j2. Runs are compared only under equal
conditions (bench.results.frame.CONDITIONS); where the environments of compared runs differ, the page says how.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from pathlib import Path

from bench.cluster.kubeflow import SCOPE
from bench.cluster.kubeflow_pod import of_kubeflow
from bench.core import stats
from bench.core.errors import StoreError, UsageError
from bench.core.inputs import printable
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY, all_tasks, task_part
from bench.core.rundir import write_atomic
from bench.core.stats import Family
from bench.core.store import check_folder_writable
from bench.report.agreement_table import comparison_words
from bench.report.answer import RULE, evidence, overall, scenarios, weighed
from bench.report.gpu_nodes import gpu_node_blocks, gpu_scope
from bench.report.scale import scale_section
from bench.report.sections import (
    CONTROL_IN_PAGE,
    ENV_KEYS,
    SPREAD,
    Bullets,
    Cell,
    Folded,
    Heading,
    Paragraph,
    Plot,
    ReportContext,
    ReportPart,
    Row,
    ScoreRow,
    Section,
    Table,
    code,
    controls_escaped,
    figure_png,
    flat_env,
    fmt,
    left,
    pct,
    pyplot,
    right,
    strong,
    styled,
)
from bench.report.setup import setup_rows, setup_section
from bench.results.agreement import agreement, frame_comparisons
from bench.results.frame import DISTORTION_NOTE, frame_columns, load_frame, of_task, shared_runs
from bench.results.sweeps import RUNNING, SweepStatus, sweep_statuses

TEMPLATE = "report.html.j2"  # in the package's templates folder


@functools.lru_cache(maxsize=1)
def _template():
    from jinja2 import Environment, PackageLoader

    env = Environment(
        loader=PackageLoader("bench.report", "templates"), autoescape=True, trim_blocks=True, lstrip_blocks=True
    )
    return env.get_template(TEMPLATE)


def parse_where(clause: str) -> tuple[str, set[str]]:
    """--where KEY=V1,V2 -> (KEY, {V1, V2}), KEY a column of the frame (bench.results.frame.frame_columns)."""
    if "=" not in clause:
        raise UsageError(f"--where {clause!r}: expected KEY=VALUE[,VALUE...], for example backend={','.join(PRIMARY)}")
    key, values = clause.split("=", 1)
    allowed = [c for c in frame_columns() if c != "record"]
    if key not in allowed:
        raise UsageError(f"--where {clause!r}: unknown key {key!r}; use one of {', '.join(allowed)}")
    return key, set(values.split(","))


def apply_where(frame, where: list[str] | None):
    """--where KEY=V1,V2 (repeatable): keep runs whose column KEY is one of the values."""
    for clause in where or []:
        key, wanted = parse_where(clause)
        frame = frame[frame[key].astype(str).isin(wanted)]
    return frame


def task_parts(frame, context: ReportContext, unfinished: dict[str, SweepStatus] | None = None) -> list[ReportPart]:
    """Each registered task's part of the page, from the frame of its own runs. `unfinished`: the sweeps on the page
    that did not run their whole plan (sweep id -> status); the scorecard rows of a task whose runs include one's say
    so beside their launches, which are then not a whole sweep's."""
    parts = []
    for task in all_tasks():
        view = task_part(task.name, "report")
        if view is None:
            continue
        mine = of_task(frame, task.name)
        part = view.report_part(mine, context)
        if part is None:
            continue
        cut = {unfinished[sid].state for sid in set(mine["sweep_id"].dropna()) if sid in (unfinished or {})}
        for row in part.scorecard if cut else []:
            row.launches += " (sweep still running)" if cut == {RUNNING} else " (sweep interrupted)"
        parts.append(part)
    return parts


def _case(record) -> str:
    """A run in words: backend, what ran (its task's description) and world size."""
    spec = record.spec
    return f"{spec.backend} {record.task.case(spec)}, world {spec.world_size}"


# ---------------------------------------------------------------- sections every page has
def agreement_note(frame) -> tuple[str, bool]:
    """Whether the sweeps on the page agree with each other (bench.results.agreement), when there are several:
    (the sentence, whether two sweeps contradict each other)."""
    sweeps = {sid: list(group["record"]) for sid, group in frame.groupby("sweep_id") if sid}
    if len(sweeps) < 2:
        return "", False
    result = agreement(sweeps, frame.attrs.get("looks"))
    bad_keys = {k for keys in result["pairs"].values() for k in keys}
    far_keys = {k for keys in result["apart"].values() for k in keys} - bad_keys
    bad, far = (sorted(comparison_words(k)[0] for k in keys) for keys in (bad_keys, far_keys))
    head = (
        f"Rerun check: this selection holds {len(sweeps)} sweeps; each comparison taken from each sweep on its "
        f"own ({len(result['keys'])} comparisons, {len(result['pairs'])} pairs of sweeps, `bench agreement`): "
    )
    said = ([f"{len(bad)} comparison(s) contradict between sweeps: {'; '.join(bad)}"] if bad else []) + (
        [f"{len(far)} comparison(s) disagree beyond their resolution: {'; '.join(far)}"] if far else []
    )
    if said:
        return head + "; ".join(said) + ".", True
    return head + (
        f"no contradiction; {len(result['resolved_everywhere'])} comparison(s) significant in the same "
        "direction in every sweep that made them."
    ), False


# The scorecard's measures in the order a reader weighs them; a measure not listed here follows them.
MEASURE_ORDER = (
    "training throughput",
    "scaling efficiency",
    "startup to the first step",
    "allreduce bus bandwidth",
    "recovery from a killed worker",
    "recovery from a hung worker",
    "recovery from a terminated worker",
    "a joining worker",
    "recovery from a lost host",
    "recovery from a cut-off host",
)


def row_order(row: ScoreRow) -> tuple:
    """The default condition first, then the other undistorted ones, then the distorted; by measure within each."""
    measure = MEASURE_ORDER.index(row.measure) if row.measure in MEASURE_ORDER else len(MEASURE_ORDER)
    return (bool(row.artefact), not row.default, not row.decides, measure, row.condition)


def scorecard_table(rows: list[ScoreRow], id: str = "scorecard") -> Table:
    first, second = PRIMARY
    columns = [
        left("measure"),
        left("condition"),
        right(first),
        right(second),
        right("launches"),
        # one direction, the side ahead's: its ratio with the interval where the difference is called, as pyperf's
        # compare says it, else a tie within its margin or "not significant"
        left(f"comparison ({pct(stats.CONFIDENCE)} interval)"),
        left("test"),
    ]
    out = []
    for r in sorted(rows, key=row_order):
        condition = Cell(r.condition + (f" (distorted: {r.artefact})" if r.artefact else ""))
        figures = [Cell(r.figures.get(b, "-"), "win" if r.winner == b else "") for b in PRIMARY]
        compared = Cell(r.compared or r.outcome, "bad" if r.standing == "failed" else "")
        out.append(
            Row([r.measure, condition, *figures, r.launches, compared, r.test or "-"], "artefact" if r.artefact else "")
        )
    return Table(columns, out, id=id)


def hardware_of(rows: list[ScoreRow], frame=None) -> str:
    """The hardware every weighed row's condition ends with (', on AMD EPYC (2 CPUs)'), else (the conditions name no
    machine where the page has one) the one machine of `frame`'s ok runs, or ''."""
    ends = {r.condition.rsplit(", on ", 1)[1] for r in weighed(rows) if ", on " in r.condition}
    if not ends and frame is not None:
        ends = {h for h in frame[frame["status"] == RunStatus.OK]["hardware"] if h}
    return ends.pop() if len(ends) == 1 else ""


SCENARIOS_SHOWN = 8  # scenario lines in the first screen at 1280x800, under the overall sentence


def page_scenarios(rows: list[ScoreRow]) -> list:
    """The answer's scenarios, in the scorecard's order (the default condition first)."""
    return scenarios(sorted(rows, key=row_order), hardware_of(rows))


def scorecard_recommendation(rows: list[ScoreRow]) -> list[str]:
    """The overall sentence of the answer (bench.report.answer), then what it leaves out."""
    found = page_scenarios(rows)
    said = [overall(found)]
    if found and all(s.failure for s in found):
        said.append("No training speed was compared under conditions that do not distort it.")
    left_out = [r for r in rows if r.artefact]
    if left_out:
        said.append(
            f"{len(left_out)} row(s) under conditions that distort the comparison (shaded, with the reason) "
            "are left out of this answer."
        )
    return said


def answer_blocks(rows: list[ScoreRow], frame=None) -> list:
    """The answer, first on the page: the overall sentence, a line per scenario with its evidence, and what is
    shown beside but never weighed. `frame`: the page's runs, which name the machine where the rows do not."""
    hardware = hardware_of(rows)
    found = page_scenarios(rows)
    head = f"The answer for {hardware_of(rows, frame) or 'this hardware'}: "  # the page's first line names the hardware
    blocks: list = [Paragraph([strong(head), " ".join(scorecard_recommendation(rows))], "rec")]
    lines = [[strong(s.name + ": "), s.said] for s in found]
    if lines:  # the first ones in the first screen, however many conditions the store holds; the others a click away
        blocks.append(Bullets(lines[:SCENARIOS_SHOWN], "answer"))
    if len(lines) > SCENARIOS_SHOWN:
        blocks.append(Folded(f"{len(lines) - SCENARIOS_SHOWN} more scenario(s)", [Bullets(lines[SCENARIOS_SHOWN:])]))
    beside = evidence(rows, hardware)
    if beside:
        blocks.append(
            Paragraph(
                f"Shown in the scorecard below, not weighed (a collective microbenchmark is not training, start-up is "
                f"paid once a job, scaling efficiency restates throughput): {len(beside)} row(s).",
                "note",
            )
        )
    return blocks


def scope_line(frame) -> str:
    """What the scorecard rests on (the machines, devices, world sizes and hosts of the ok runs) and what it
    does not cover."""
    ok = frame[frame["status"] == RunStatus.OK]
    if ok.empty:
        return "Scope: no run ended ok, so nothing is measured."
    hardware = sorted({h for h in ok["hardware"] if h})
    sizes = sorted({int(n) for n in ok["world_size"]})
    across = [r for r in ok["record"] if r.spec.hosts]
    separate = [r for r in across if r.spec.machines is not None and r.spec.machines == len(r.spec.hosts)]
    words = [
        f"Scope: {len(ok)} ok runs on {'; '.join(hardware) or 'an unknown machine'}",
        f"world sizes {', '.join(map(str, sizes))}",
        "on one host" + (f" and across up to {max(len(r.spec.hosts) for r in across)} hosts" if across else ""),
    ]
    gpu_words = gpu_scope([r for r in ok["record"] if r.spec.device == "cuda"])
    if gpu_words:
        words.append(gpu_words)
    missing = []
    if not (ok["device"] == "cuda").any():
        missing.append("no GPU (so no NCCL) data")
    missing.append(f"nothing above {max(sizes)} workers")
    if across and not separate:
        missing.append("no hosts known to be separate machines")
    elif not across:
        missing.append("no run across hosts")
    pods = sorted({r.spec.scheduler["name"] for r in ok["record"] if of_kubeflow(r.spec.scheduler)})
    if pods:  # runs in a Kubeflow job's pods: what they rest on is said with them
        words.append(f"in the pods of a {' and a '.join(name.split(' ', 1)[1] for name in pods)} ({SCOPE})")
    return ", ".join(words) + ". Not covered: " + ", ".join(missing) + "."


def answer_markdown(frame, page_link: str = "") -> str:
    """The answer of `frame`'s runs as Markdown (for the README): the overall sentence, a line per scenario with its
    evidence, the scope line, and where the scorecard behind it is."""
    parts = task_parts(frame, ReportContext("", [], frame, Family(frame_comparisons(frame))))
    rows = [r for p in parts for r in p.scorecard]
    distorted = sum(1 for r in rows if r.artefact)
    where = (
        f"The scorecard behind it, every compared measure with its figures and interval ({len(rows)} rows, "
        f"{distorted} of them under conditions that distort the comparison): " + (page_link or "the page") + "."
    )
    return "\n".join(
        [
            f"**The answer for {hardware_of(rows, frame) or 'this hardware'}.** "
            f"{' '.join(scorecard_recommendation(rows))}",
            "",
            *(f"- **{s.name}**: {s.said}" for s in page_scenarios(rows)),
            "",
            scope_line(frame) + " " + where,
        ]
    )


def shared_note(frame) -> str:
    """The one line that says which ok runs are left out because another bench run shared their cores."""
    shared = shared_runs(frame)
    if shared.empty:
        return ""
    runs = "; ".join(
        f"{r.run_id} (with {', '.join(o['run_id'] for o in r.record.shared_with)})" for r in shared.itertuples()
    )
    return (
        f"{len(shared)} ok run(s) left out of every comparison, verdict and the gate: another bench run shared "
        f"their cores while they ran (--allow-shared), so they measured it too: {runs}."
    )


def verdict_section(
    parts: list[ReportPart],
    frame,
    rerun: tuple[str, bool] = ("", False),
    shared: str = "",
    unfinished: list[SweepStatus] = (),
) -> Section:
    """The answer first: a sweep on the page that did not run its whole plan (interrupted, or still running) said
    before anything else; the scorecard (every compared measure, default condition first), the recommendation
    that follows from it, its scope, and whether the sweeps on the page agree with each other."""
    rows = [r for p in parts for r in p.scorecard]
    blocks: list = [Paragraph(status.sentence(), "warn") for status in unfinished]
    if rows:
        blocks += answer_blocks(rows, frame)
        blocks.append(Paragraph(scope_line(frame), "scope"))
        family = Paragraph(
            [
                f"Each row compares {' and '.join(PRIMARY)} under equal conditions, across launches, in one "
                "direction: the side ahead, the ratio of the two figures and its "
                f"{pct(stats.CONFIDENCE)} interval (\"1.47x faster [1.36, 1.59]\"), called only where the "
                "difference holds after Holm's correction over this page's comparisons (a failure scenario: its "
                "exact test); else a tie within the margin two one-sided tests at "
                f"{pct(stats.CONFIDENCE)} show, or not significant. One-worker rows measure the wrappers' overhead "
                "only."
            ],
            "note",
        )
        clean, distorted = [r for r in rows if not r.artefact], [r for r in rows if r.artefact]
        # with the facts of what each backend takes to run beside the measures, never weighed
        blocks += [Heading("Scorecard"), scorecard_table((clean or rows) + setup_rows(frame)), family]
        if clean and distorted:
            blocks.append(
                Folded(
                    f"{len(distorted)} more row(s), under conditions that distort the comparison, not weighed",
                    [
                        Paragraph(f"{DISTORTION_NOTE[0]}{DISTORTION_NOTE[1:]}", "note"),
                        scorecard_table(distorted, "scorecard-distorted"),
                    ],
                )
            )
        elif distorted:
            blocks.append(Paragraph(f"Shaded rows: {DISTORTION_NOTE[0].lower()}{DISTORTION_NOTE[1:]}", "note"))
    else:
        blocks += [Paragraph(p.no_verdict) for p in parts if p.no_verdict]
        blocks.append(
            Paragraph(
                [
                    strong("The answer: "),
                    f"none yet: run both {' and '.join(PRIMARY)} under the same conditions (`bench sweep`).",
                ],
                "rec",
            )
        )
        blocks.append(Paragraph(scope_line(frame), "scope"))
    if shared:
        blocks.append(Paragraph(shared, "warn"))
    if rerun[0]:
        blocks.append(Paragraph(rerun[0], "warn" if rerun[1] else "note"))
    blocks += [Paragraph(line, "warn") for p in parts for line in p.fairness]
    return Section("verdict", "Verdict", 0, blocks)


RANK_COLUMNS = [
    left("role"),
    right("rank"),
    right("local rank"),
    right("node (group) rank"),
    right("rank among its role"),
    right("restarts"),
    left("host"),
    right("pid"),
    left("phase"),
]
PID_AT = [c.name for c in RANK_COLUMNS].index("pid")


HOST_MAP_PANELS = 6  # the latest runs across hosts drawn, one panel per backend, task and phase


def host_map_panels(frame) -> list[dict]:
    """The latest run across hosts of each backend and task, one panel per phase (before and after a fault):
    {"title", "hosts": every host of the run, "rows": its rank rows in that phase}."""
    chosen: dict[tuple, object] = {}
    runs = zip(frame["status"], frame["created_at"], frame["backend"], frame["task"], frame["record"])
    for _, _, backend, task, rec in sorted(runs, key=lambda r: (r[0] == RunStatus.OK, r[1])):  # the latest ok run wins
        if len({x.host for x in rec.rank_map}) > 1:
            chosen[(backend, task)] = rec
    panels = []
    for rec in chosen.values():
        hosts = sorted({x.host for x in rec.rank_map}, key=natural)  # the same order in every panel of the run
        for phase in sorted({x.phase or "" for x in rec.rank_map}, key=lambda p: p != "before"):
            title = f"{rec.spec.backend} {rec.task.kind(rec.spec)}" + (f", {phase}" if phase else "")
            panels.append(
                {
                    "title": f"{title}\n{rec.run_id}",
                    "hosts": hosts,
                    "rows": [x for x in rec.rank_map if (x.phase or "") == phase],
                }
            )
    return panels[:HOST_MAP_PANELS]


def natural(text: str) -> list:
    """A sort key that puts bench-th2 before bench-th10."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text or "")]


def host_map_plot(panels: list[dict]) -> Plot:
    """Each panel: one row per host of the run, one box per process there (in local-rank order) with its global
    rank, local rank and node (group) rank as the launcher gave them; servers shaded apart from workers; a host
    without processes in that phase (after a host loss) says so."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 2.4), squeeze=False)
    widest = max(sum(1 for x in p["rows"] if x.host == h) for p in panels for h in p["hosts"])
    for ax, panel in zip(axes[0], panels):
        hosts = panel["hosts"]
        for y, host in enumerate(hosts):
            here = sorted((x for x in panel["rows"] if x.host == host), key=lambda x: (x.local_rank or 0, x.rank))
            if not here:
                ax.text(widest / 2, -y, "not in the run", ha="center", va="center", fontsize=7, color="#b03030")
            for i, x in enumerate(here):
                ax.add_patch(
                    plt.Rectangle(
                        (i + 0.05, -y - 0.42), 0.9, 0.84, color="#f4c27a" if x.role == "server" else "#9cc3e6"
                    )
                )
                ax.text(
                    i + 0.5,
                    -y,
                    f"rank {x.rank}\nlocal {fmt(x.local_rank, 'd')}\nnode {fmt(x.group_rank, 'd')}",
                    ha="center",
                    va="center",
                    fontsize=7,
                )
        ax.set_xlim(0, widest)
        ax.set_ylim(-len(hosts) + 0.5, 0.5)
        ax.set_yticks([-y for y in range(len(hosts))], hosts, fontsize=7)
        ax.set_xticks([])
        ax.set_title(panel["title"], fontsize=8)
    return Plot("hosts with the ranks the launcher gave each process", figure_png(fig))


def rank_rows(rec) -> list[list]:
    """A run's rank map as table rows (RANK_COLUMNS), before a fault and then after it, by rank."""
    return [
        [
            x.role or "worker",
            x.rank,
            x.local_rank,
            x.group_rank,
            x.role_rank,
            x.restart_count,
            x.host,
            x.pid,
            x.phase or "",
        ]
        for x in sorted(rec.rank_map, key=lambda x: (x.phase != "before", x.rank))
    ]


def rank_layout(rec) -> tuple:
    """What the launcher gave each process of a run, without what differs from run to run anyway (process ids):
    runs with equal layouts have the same rank map."""
    return tuple(tuple(cell for i, cell in enumerate(row) if i != PID_AT) for row in rank_rows(rec))


def runs_word(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def rank_map_tables(records: list) -> list:
    """The rank maps worth reading, each a collapsed table: of runs across hosts and of runs whose rank map a fault
    changed (phases before and after), one per case and distinct rank map, showing the latest run that had it, with
    the others' ids behind a disclosure of their own; of every other case (backend, what ran, world size), one
    example, its latest ok run. `records` oldest first."""
    examples: dict[str, list] = {}  # case -> its runs on one host without a fault
    alike: dict[tuple, list] = {}  # (case, layout) -> the runs across hosts or with a fault that had it
    for rec in records:
        spread = len({x.host for x in rec.rank_map}) > 1
        if spread or any(x.phase for x in rec.rank_map):
            alike.setdefault((_case(rec), rank_layout(rec)), []).append(rec)
        else:
            examples.setdefault(_case(rec), []).append(rec)
    tables = []
    for case in sorted({c for c in examples} | {c for c, _ in alike}):
        runs = examples.get(case, [])
        ok = [r for r in runs if r.ok]
        if ok:
            rec = ok[-1]
            tables.append(
                Table(
                    RANK_COLUMNS,
                    rank_rows(rec),
                    details=f"{case}: {rec.run_id} ({rec.status}), the "
                    f"latest ok of its {runs_word(len(runs))} on one host",
                )
            )
        for _, group in sorted(
            ((k, g) for k, g in alike.items() if k[0] == case), key=lambda item: item[1][-1].created_at
        ):
            rec = group[-1]
            hosts = len({x.host for x in rec.rank_map})
            where = f"{hosts} hosts" if hosts > 1 else "one host"
            changed = ", before and after a fault" if any(x.phase for x in rec.rank_map) else ""
            statuses = ", ".join(f"{n} {status}" for status, n in Counter(str(r.status) for r in group).items())
            tables.append(
                Table(
                    RANK_COLUMNS,
                    rank_rows(rec),
                    details=f"{case}, {where}{changed}: {runs_word(len(group))} with this rank map "
                    f"({statuses}); process ids of the latest, {rec.run_id} ({rec.status})",
                )
            )
            if len(group) > 1:
                by_status: dict[str, list[str]] = {}
                for r in reversed(group):
                    by_status.setdefault(str(r.status), []).append(r.run_id)
                tables.append(
                    Table(
                        [left("status"), left("runs, latest first")],
                        [
                            [Cell(status, "" if status == RunStatus.OK else "bad"), ", ".join(ids)]
                            for status, ids in by_status.items()
                        ],
                        details=f"the {runs_word(len(group))} with that rank map",
                    )
                )
    return tables


def rank_map_section(frame) -> Section:
    """Runs across hosts drawn first, host by host; then the rank maps worth reading (rank_map_tables), collapsed."""
    blocks = []
    panels = host_map_panels(frame)
    if panels:
        blocks += [
            Paragraph(
                "Hosts and their processes in the latest run across hosts of each backend (and "
                "before and after a fault): a box per process, with the global rank, local rank and "
                "node (group) rank its launcher gave it; parameter servers shaded orange.",
                "note",
            ),
            host_map_plot(panels),
        ]
    blocks.append(
        Paragraph(
            "What each process was given by its launcher: for every case (backend, what ran, world "
            "size), its latest ok run on one host; for runs across hosts and runs with a fault, every "
            "rank map they had (before and after the fault), with the runs that had it. Rank among its role: "
            "the process's number among the processes of its role alone (the workers, or the parameter servers).",
            "note",
        )
    )
    tables = rank_map_tables(list(frame.sort_values("created_at")["record"]))
    if tables:  # a case each, many on a store of sweeps: one line on the page until opened
        blocks.append(Folded(f"the rank maps of {len(tables)} case(s), each under its own line", tables))
    return Section("ranks", "Rank map", 60, blocks)


def env_text(value) -> str:
    """A fingerprint value as the page shows it ("-" where the run recorded none)."""
    return "-" if value in (None, "", []) else str(value)


def environment_section(records: list) -> Section:
    """The runs' fingerprint: one value per fact; where the runs differ, each value with how many runs had it
    (shaded), and which runs those were behind a disclosure (every value's but the commonest's)."""
    flats = [flat_env(r.environment or {}) for r in records]
    keys = list(ENV_KEYS) + sorted({k for f in flats for k in f if k.startswith("$")})
    rows, which = [], []
    for key in keys:
        by_value: dict[str, list] = {}  # repr of the value -> (its text, the runs that had it), first seen first
        for rec, flat in zip(records, flats):
            by_value.setdefault(repr(flat.get(key)), [env_text(flat.get(key)), []])[1].append(rec.run_id)
        if len(by_value) == 1:
            rows.append(Row([key, next(iter(by_value.values()))[0]]))
            continue
        groups = sorted(by_value.values(), key=lambda g: -len(g[1]))  # stable: equal counts keep their order
        rows.append(Row([key, "; ".join(f"{text} ({runs_word(len(ids))})" for text, ids in groups)], "diff"))
        which += [[key, text, ", ".join(ids)] for text, ids in groups[1:]]
        which.append([key, groups[0][0], f"the other {runs_word(len(groups[0][1]))}"])
    note = Paragraph(
        [
            "The fingerprint of the runs on this page. Rows shaded ",
            styled("like this", "diff"),
            " differ between runs (each value with the number of runs that had it; which runs, below): "
            "figures from such runs are not like for like.",
        ],
        "note",
    )
    blocks = [note, Table([left("fact"), left("value")], rows)]
    if which:
        blocks.append(
            Table(
                [left("fact"), left("value"), left("runs")],
                which,
                details="Which runs had each value of the facts that differ",
            )
        )
    return Section("env", "Environment", 70, blocks + gpu_node_blocks(records))


def failed_section(frame, parts: list[ReportPart], skipped: dict[str, str] | None = None) -> Section:
    """Runs that did not end ok (with their error and its output), stored runs this bench cannot read (`skipped`: run
    id -> why, bench.core.store.Store.skipped), then results too noisy to trust."""
    failed = []
    for r in frame[frame["status"] != RunStatus.OK].itertuples():
        err = r.record.error
        failed.append(
            [
                r.run_id,
                Cell(r.status, "bad"),
                f"{_case(r.record)} ({r.device})",
                Cell(err.message, pre=err.tail or "") if err else "",
            ]
        )
    blocks = (
        [
            Table(
                [left("run"), left("status"), left("case"), left("error")],
                failed,
                details=f"{len(failed)} run(s) that did not end ok, each with its error and the end of its output",
            )
        ]
        if failed
        else [Paragraph("No failed run: every run in this selection ended ok.")]
    )
    if skipped:
        blocks.append(
            Table(
                [left("run"), left("why it is left out")],
                [[run_id, Cell(why, "bad")] for run_id, why in skipped.items()],
                details=f"{len(skipped)} stored run(s) left out of this page: this bench cannot read their record",
                id="skipped",
            )
        )
    unstable = [line for p in parts for line in p.unstable]
    if unstable:
        blocks.append(
            Folded(
                f"{len(unstable)} unstable result(s), with a {SPREAD} above {pct(stats.UNSTABLE_REL_STDEV)} or "
                f"fewer than {stats.MIN_STABLE_WINDOWS} windows",
                [Bullets(unstable)],
            )
        )
    else:
        blocks.append(Paragraph("No unstable result."))
    return Section("failed", "Failed and unstable runs", 80, blocks, nav="Failed and unstable")


def method_section(parts: list[ReportPart]) -> Section:
    fairness = [
        strong("Fairness."),
        " The harness sets threads (OMP_NUM_THREADS, torch), seed, batch, data, dtype "
        "and device placement identically for every backend; only runs with equal conditions are compared. "
        "A case pools every launch of the sweeps made with the same code as its latest ("
        "docs/method.md, 'Replication'); ",
        code("bench list"),
        " lists the runs.",
    ]
    notes = [
        [strong("The answer."), " " + RULE.removeprefix("The answer's rule. ")],
        *(m for p in parts for m in p.method),
        fairness,
    ]
    return Section(
        "method",
        "Methodology",
        90,
        [
            Folded(
                f"How each figure on this page is made ({len(notes)} notes; docs/method.md has them all)",
                [Bullets(notes)],
            )
        ],
    )


def _hardware(records: list) -> str:
    machines = set()
    for r in records:
        env = r.environment
        if env:
            machines.add(
                f"{env.get('hostname')}: {env.get('cpu_model')}, {env.get('cpu_count')} CPUs, "
                f"{len(env.get('cuda_devices') or [])} GPU(s)"
            )
    return "; ".join(sorted(machines)) or "unknown"


# ---------------------------------------------------------------- the page
def render_report(
    frame,
    store_label: str,
    where: list[str] | None = None,
    sweeps: list[dict] | None = None,
    skipped: dict[str, str] | None = None,
) -> str:
    """The page for the runs of `frame` (bench.results.frame.load_frame); `store_label` is plain text. `sweeps`: the
    store's sweep rows (bench.core.store.Store.sweeps), from which a sweep on the page that did not run its whole
    plan is said, with how many of its planned launches ran (counted over every run of `frame`, before --where).
    `skipped`: the store's runs this bench cannot read (run id -> why), which the page names, each with why, the
    others shown without them."""
    skipped = skipped or {}
    if frame.empty:
        unread = f" this bench can read ({len(skipped)} skipped, each said above)" if skipped else ""
        raise StoreError(f"no runs in {store_label}{unread}: nothing to report; run `bench sweep` first")
    statuses = sweep_statuses(sweeps or [], list(frame["record"]))
    frame = apply_where(frame, where)
    if frame.empty:
        raise UsageError(
            f"no run in {store_label} matches --where {' '.join(where or [])}; `bench list` shows what is stored"
        )
    on_page = set(frame["sweep_id"].dropna())
    unfinished = {sid: status for sid, status in statuses.items() if sid in on_page and not status.complete}
    family = Family(frame_comparisons(frame))
    parts = task_parts(frame, ReportContext(store_label, list(where or []), frame, family), unfinished)
    shown = [rec for p in parts for rec in p.shown] or list(frame["record"])
    scale = scale_section(list(frame["record"]))
    setup = setup_section(frame)
    sections = [
        verdict_section(parts, frame, agreement_note(frame), shared_note(frame), list(unfinished.values())),
        *(s for p in parts for s in p.sections),
        *([scale] if scale else []),
        *([setup] if setup else []),
        rank_map_section(frame),
        environment_section(shown),
        failed_section(frame, parts, skipped),
        method_section(parts),
    ]
    sections.sort(key=lambda s: s.order)  # stable: sections of equal order keep the tasks' order
    # the page is UTF-8 whatever it shows: a path that is not (the store's folder, one in a run's error or
    # environment) is shown with its odd bytes escaped, instead of the page not being written; so is a control
    # character a run's text holds (a terminal escape in a rank's output), which a page cannot show
    page = printable(
        _template().render(
            store=store_label,
            where=" ".join(where or []),
            n_runs=len(frame),
            n_ok=int((frame["status"] == RunStatus.OK).sum()),
            n_skipped=len(skipped),
            hardware=_hardware(shown),
            written=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            sections=sections,
            unfinished=[
                f"sweep {sid} {'still running' if s.state == RUNNING else 'interrupted'}: {s.ran} of its "
                f"{s.planned} planned launches ran"
                for sid, s in unfinished.items()
            ],
        )
    )
    return controls_escaped(page, CONTROL_IN_PAGE)


def output_path(output) -> Path:
    """The report's file, or a one-line error for a path that cannot be one (before a sweep, not after)."""
    path = Path(output)
    try:
        if path.is_dir():
            raise UsageError(
                f"cannot write the report to {path}: it is a directory; give a file name, "
                f"for example {path / 'report.html'}"
            )
        check_folder_writable(path.parent, create=False)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    return path


def _unwritable(path: Path, exc: OSError) -> UsageError:
    return UsageError(
        f"cannot write the report to {path} ({(exc.strerror or str(exc)).lower()}); choose another "
        "output file in a folder you can write to"
    )


def _write(path: Path, text: str) -> Path:
    """Write through a temporary file beside `path`, so a reader never sees half a page; on failure
    nothing is left behind."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    return path


def write_report(store, output, where: list[str] | None = None) -> Path:
    path = output_path(output)
    for clause in where or []:
        parse_where(clause)  # before the store is read
    frame = load_frame(store)
    return _write(path, render_report(frame, str(store.path), where, store.sweeps(), store.skipped))


def write_report_with_copy(store, output, where: list[str] | None = None) -> tuple[Path, Path]:
    """Write the report to `output` and a timestamped copy beside it (report-YYYYmmdd-HHMMSS.html)."""
    latest = write_report(store, output, where)
    stamped = latest.with_name(f"report-{time.strftime('%Y%m%d-%H%M%S')}{latest.suffix}")
    return latest, _write(stamped, latest.read_text(encoding="utf-8"))
