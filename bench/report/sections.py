"""The report's building blocks: typed sections and blocks that the page template renders, the part
each task's report view contributes (`ReportPart`), and the helpers the views share (number formatting,
plots as inline PNG, the environment fingerprint).

A page is a header, then Sections in their `order`; a Section is a list of blocks (Heading, Paragraph,
Bullets, Table, Plot). Text is plain (the template escapes it) or a list of plain strings and Spans
(inline code, emphasis, strong). The page's sections and their order numbers:

    0 Verdict, 10 Throughput and scaling, 20 Communication, 30 Where the time goes, 35 At your scale (the scaling
    model's projection), 40 Startup and rendezvous, 50 Elasticity, 60 Rank map, 70 Environment, 80 Failed and unstable
    runs, 90 Methodology.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import ClassVar


# ---------------------------------------------------------------- inline text
@dataclass
class Span:
    """A piece of inline text with its markup: "" (plain), "code", "em", "strong" or "span" (with `css`)."""

    text: str
    tag: str = ""
    css: str = ""


def code(text: str) -> Span:
    return Span(text, "code")


def em(text: str) -> Span:
    return Span(text, "em")


def strong(text: str) -> Span:
    return Span(text, "strong")


def styled(text: str, css: str) -> Span:
    """Inline text in a css class (for example a sample of a table row's shading)."""
    return Span(text, "span", css)


def spans(text) -> list[Span]:
    """Plain text, a Span, or a list of both, as a list of Spans."""
    parts = text if isinstance(text, (list, tuple)) else [text]
    return [p if isinstance(p, Span) else Span(str(p)) for p in parts]


# ---------------------------------------------------------------- blocks
@dataclass
class Heading:
    """A sub-heading inside a section."""

    kind: ClassVar[str] = "heading"
    text: str


@dataclass
class Paragraph:
    kind: ClassVar[str] = "paragraph"
    text: object  # str, Span, or a list of them
    css: str = ""  # "note", "warn", "rec", ...

    def __post_init__(self):
        self.text = spans(self.text)


@dataclass
class Bullets:
    kind: ClassVar[str] = "bullets"
    items: list  # each item: str, Span, or a list of them
    css: str = ""

    def __post_init__(self):
        self.items = [spans(item) for item in self.items]


@dataclass
class Folded:
    """Blocks a reader opens when wanted (detail that would bury the answer): collapsed under `summary`."""

    kind: ClassVar[str] = "folded"
    summary: str
    blocks: list


@dataclass
class Column:
    name: str
    align: str = "right"  # "left" for words, "right" for figures


def left(name: str) -> Column:
    return Column(name, "left")


def right(name: str) -> Column:
    return Column(name, "right")


@dataclass
class Cell:
    text: str = ""
    css: str = ""  # "warn", "bad", ...
    pre: str = ""  # preformatted text shown below the text (an error's output)


@dataclass
class Row:
    cells: list  # Cell or plain values (shown with str(); None as an empty cell)
    css: str = ""  # "diff": a shaded row

    def __post_init__(self):
        self.cells = [c if isinstance(c, Cell) else Cell("" if c is None else str(c)) for c in self.cells]


@dataclass
class Table:
    kind: ClassVar[str] = "table"
    columns: list[Column]
    rows: list  # Row, or a list of cells
    details: str | None = None  # when set, the table is collapsed under this summary line
    id: str = ""  # an anchor for the table, where a page links to it

    def __post_init__(self):
        self.rows = [r if isinstance(r, Row) else Row(r) for r in self.rows]
        for r in self.rows:
            if len(r.cells) != len(self.columns):
                raise ValueError(f"a row of {len(r.cells)} cells in a table of {len(self.columns)} columns")


@dataclass
class Plot:
    """An inline picture: a matplotlib figure as PNG (figure_png), with its alternative text."""

    kind: ClassVar[str] = "plot"
    alt: str
    png: str  # base64 (figure_png)


@dataclass
class Section:
    id: str  # the anchor the nav bar links to
    title: str
    order: int  # the page lists sections by this number (module docstring)
    blocks: list = field(default_factory=list)
    nav: str = ""  # the nav bar's label, when shorter than the title

    @property
    def nav_label(self) -> str:
        return self.nav or self.title


# ---------------------------------------------------------------- what a task's view returns
@dataclass
class ScoreRow:
    """One row of the page's scorecard: one measure under one condition, each compared backend's figure, their
    difference and what it amounts to in words (bench.report.page.scorecard_section)."""

    measure: str  # "training throughput", "recovery from a killed worker", ...
    condition: str  # the conditions in words: "mnist_mlp, 2 workers, pinned, one host"
    figures: dict  # backend -> its figure in words
    difference: str  # the difference with its interval, or "-"
    launches: str  # launches (or runs) per side: "6 + 6"
    outcome: str  # in words: "elastic faster by 12%", "within ±6% of each other", "horovod did not recover"
    winner: str | None = None  # the backend the outcome favours, where it is resolved
    standing: str = "unresolved"  # "ahead", "within", "unresolved", "one launch", "failed", "one side"
    artefact: str = ""  # why this condition distorts the comparison; such rows never drive the recommendation
    default: bool = False  # the default sweep's condition: listed first
    operations: bool = False  # a measure of operations (startup, recovery), not of training speed
    decides: bool = True  # False where the row measures overhead only (one worker): shown, not weighed
    margin: float = float("nan")  # the equivalence margin, where the outcome is "within"
    # a failure scenario's: backend -> (runs that came through, runs, how the others ended in words)
    recovered: dict = field(default_factory=dict)


def judged_outcome(
    judgement, a: str, b: str, higher_is_better: bool = True, words: tuple[str, str] = ("faster", "slower")
) -> dict:
    """The ScoreRow fields of a comparison of backend a against b (a bench.core.stats.Judgement of a / b): the
    difference and its interval, the outcome in words, the winner and the standing. `higher_is_better` False for
    a time (the lower ratio wins); `words` name the better and the worse side ("sooner", "later")."""
    est = judgement.estimate
    if not est.replicated:
        ahead = a if (est.ratio > 1) == higher_is_better else b
        return {
            "difference": f"{est.ratio - 1:+.1%}",
            "standing": "one launch",
            "winner": None,
            "outcome": f"cannot tell: one launch on a side ({ahead} ahead {by_how_much(est.ratio)})",
        }
    difference = (
        f"{est.ratio - 1:+.1%} ({est.low - 1:+.1%} to {est.high - 1:+.1%}), p {judgement.p_adjusted:.2g} (Holm)"
    )
    if judgement.significant:
        winner = a if (est.ratio > 1) == higher_is_better else b
        return {
            "difference": difference,
            "standing": "ahead",
            "winner": winner,
            "outcome": f"{winner} {words[0]} {by_how_much(est.ratio)}",
        }
    margin = judgement.margin
    if judgement.equivalent:
        return {
            "difference": difference,
            "standing": "within",
            "winner": None,
            "margin": margin,
            "outcome": f"within ±{margin:.0%} of each other",
        }
    return {
        "difference": difference,
        "standing": "unresolved",
        "winner": None,
        "margin": margin,
        "outcome": f"not resolved: the data allow up to ±{margin:.0%}; more launches narrow it",
    }


def by_how_much(ratio: float) -> str:
    """'by 12%', or 'by 3.4x' from twice on (a percentage of thousands reads as noise)."""
    factor = max(ratio, 1 / ratio)
    return f"by {factor:.1f}x" if factor >= 2 else f"by {factor - 1:.0%}"


@dataclass
class ReportPart:
    """One task's contribution to the page, from the frame of its own runs."""

    no_verdict: str = ""  # said under the verdict when the page has no scorecard row: what to run for one
    fairness: list[str] = field(default_factory=list)  # warnings under the verdict: compared runs not like for like
    unstable: list[str] = field(default_factory=list)  # one note per unstable result
    method: list = field(default_factory=list)  # Methodology bullets (str, Span, or lists of them)
    shown: list = field(default_factory=list)  # the RunRecords whose figures the page shows
    sections: list[Section] = field(default_factory=list)
    scorecard: list[ScoreRow] = field(default_factory=list)  # this task's rows of the page's scorecard


@dataclass
class ReportContext:
    """What every view may know besides its own runs."""

    store_label: str
    where: list[str]
    frame: object  # every run on the page (pandas DataFrame)
    family: object = None  # every comparison on the page, judged together (bench.core.stats.Family)


# ---------------------------------------------------------------- shared helpers
def fmt(value, spec: str, missing: str = "-") -> str:
    """A number formatted with `spec`, or `missing` when there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def pct(fraction: float) -> str:
    """0.95 -> "95%", 0.125 -> "12.5%" (a setting as the page states it)."""
    return f"{100 * fraction:g}%"


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display: figures only become PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig) -> str:
    """A matplotlib figure as base64 PNG (for an inline data: URL); the figure is closed."""
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


ENV_KEYS = (
    "hostname",
    "cpu_model",
    "cpu_count",
    "cpu_flags",
    "cpu_capability",
    "platform",
    "python",
    "torch",
    "torch_cuda_build",
    "cuda_devices",
    "nccl_version",
    "packages.torchvision",
    "packages.horovod",
    "git.commit",
    "git.dirty",
    "bench",
)


def flat_env(env: dict) -> dict:
    """A run's environment fingerprint as one level of facts (ENV_KEYS, then $VARIABLES)."""
    out = {}
    for key in ENV_KEYS:
        value = env
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[key] = value
    for name, value in (env.get("variables") or {}).items():
        out[f"${name}"] = value
    return out


def env_differences(records: list) -> list[str]:
    """Fingerprint facts that differ between these runs (RunRecords)."""
    flats = [flat_env(r.environment or {}) for r in records]
    keys = sorted(set().union(*flats)) if flats else []
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1 and k not in ("bench",)]
