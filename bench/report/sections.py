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
import re
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

from bench.core.cgroups import quota_words
from bench.core.inputs import printable
from bench.core.registry import BACKEND_MODULES


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
SPEED, FAILURE = "speed", "failure"  # ScoreRow.weighs: a training-speed scenario, a failure scenario


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
    # what the page's answer does with the row (bench.report.answer): SPEED or FAILURE weighs it as a scenario;
    # "" shows it in the scorecard only (a microbenchmark, start-up, scaling efficiency)
    weighs: str = ""
    # a failure scenario's: backend -> (runs that came through, runs, how the others ended in words, the range of the
    # times of those that came through: "0.14-0.42 s")
    recovered: dict = field(default_factory=dict)
    leader: str | None = None  # the backend ahead in every run of a failure scenario, decided or not
    to_decide: str = ""  # what would decide a failure scenario not yet decided ("4 runs a side can decide it")
    # the comparison one way, as pyperf's compare says it: "horovod 1.47x faster [1.36, 1.59]" (the side ahead, the
    # ratio of the two figures and its 95% interval, only where the difference is called), "a tie within ±8%",
    # "not significant, ..." or "one launch a side: cannot tell"; `line` says it with the figures beside
    compared: str = ""
    test: str = ""  # the test's p behind `compared`: "p 0.0022 (permutation test)", "-" without one
    brief: dict = field(default_factory=dict)  # backend -> its figure in a few words, where `figures` says more

    @property
    def line(self) -> str:
        """The row in one line: the comparison, then each side's figure and the launches (or runs) behind them:
        "elastic 1.47x faster [1.36, 1.59] (elastic 8,391, horovod 5,700 samples/s; 6 + 6 launches)", a unit both
        figures end with said once."""
        texts = [self.brief.get(b) or figure for b, figure in self.figures.items()]
        ends = [text.rsplit(" ", 2) for text in texts]  # [..., number, unit]
        if len(ends) > 1 and all(len(e) > 1 and NUMBER.fullmatch(e[-2]) and e[-1] == ends[0][-1] for e in ends):
            texts = [text.rsplit(" ", 1)[0] for text in texts[:-1]] + texts[-1:]
            sides = ", ".join(f"{b} {text}" for b, text in zip(self.figures, texts))
        else:
            sides = "; ".join(f"{b} {text}" for b, text in zip(self.figures, texts))
        return f"{self.compared or self.outcome} ({sides}; {launch_words(self.launches)})"


@dataclass(frozen=True)
class Wording:
    """How a comparison names its better side: "{side} {better} by 12.0%" below twice the other's figure, and
    "{side} {times}" (n the factor) from twice on, where a percentage of thousands reads as noise."""

    better: str = "faster"
    times: str = "{n} times as fast"
    ratio: str = "faster"  # after a ratio: "horovod 1.47x faster"


FASTER = Wording()
STARTS_SOONER = Wording("starts sooner", "starts {n} times as fast", "sooner")
RECOVERS_SOONER = Wording("recovers sooner", "recovers {n} times as fast", "sooner")
SCALES_BETTER = Wording("scales better", "scales {n} times as well", "better")
AHEAD = Wording("ahead", "ahead by a factor of {n}", "ahead")  # one launch a side: what it measured, claiming nothing


NUMBER = re.compile(r"[\d.,]+%?")  # a figure's number as a row says it: "12,129", "0.26", "46%"


def launch_words(launches: str) -> str:
    """A row's launches as its line says them: "9 + 9 (3 sweeps pooled)" -> "9 + 9 launches, 3 sweeps pooled";
    "6 + 6 runs" as it is."""
    count, _, more = launches.partition(" (")
    count = count if count.endswith(("runs", "launches")) else f"{count} launches"
    return count + (f", {more.removesuffix(')')}" if more else "")


def oriented(low: float, high: float, side_is_a: bool, higher_is_better: bool = True) -> tuple[float, float]:
    """An interval of a / b as a factor in favour of the side ahead (ahead_of): as it is where that side's figure
    is the numerator and higher is better (or the denominator and lower is), else turned over."""
    if side_is_a == higher_is_better:
        return low, high
    return (1 / high if high else math.inf), (1 / low if low else math.inf)


def ratio_words(side: str, factor: float, low: float, high: float, words: Wording = FASTER) -> str:
    """A difference one way, as pyperf's compare says it: "horovod 1.47x faster [1.36, 1.59]", the ratio of the side
    ahead's figure to the other's (of the other's time to its own for a time) and its interval in the same direction."""
    return f"{side} {factor:.2f}x {words.ratio} [{low:.2f}, {high:.2f}]"


def ahead_of(ratio: float, a: str, b: str, higher_is_better: bool = True) -> tuple[str, float]:
    """Which of a and b a ratio a / b favours, and by what factor (the better side's figure over the worse's when
    higher is better, the worse's over the better's for a time: always 1 or more)."""
    factor = max(ratio, 1 / ratio)
    return (a if (ratio >= 1) == higher_is_better else b), factor


def factor_words(factor: float, digits: int = 1) -> str:
    """How much ahead, without the side: "12.0%", or "2.6 times" from twice on."""
    return f"{factor:.1f} times" if factor >= 2 else f"{factor - 1:.{digits}%}"


def advantage(side: str, factor: float, words: Wording = FASTER, digits: int = 1) -> str:
    """One side ahead in words: "elastic faster by 12.0%", or "horovod recovers 26.4 times as fast" from twice on.
    `factor` >= 1 (ahead_of)."""
    if factor >= 2:
        return f"{side} {words.times.format(n=f'{factor:.1f}')}"
    return f"{side} {words.better} by {factor - 1:.{digits}%}"


def difference_words(est, a: str, b: str, higher_is_better: bool = True, words=FASTER) -> str:
    """An estimate of a / b (bench.core.stats.Estimate) said one way: the side it favours and by how much, then its
    interval in the same direction, "elastic faster by 20.1% (12.0% to 28.7%)"; an interval that crosses no
    difference names the side each end favours, "elastic faster by 3.0% (horovod faster by 2.0% to elastic faster
    by 8.0%)". Without an interval (one launch a side), the estimate alone."""
    side, factor = ahead_of(est.ratio, a, b, higher_is_better)
    point = advantage(side, factor, words) if factor > 1 else "no difference"
    if not est.replicated:
        return point
    ends = [ahead_of(end, a, b, higher_is_better) for end in (est.low, est.high)]
    # from the end least in favour of the side ahead to the end most in favour of it
    ends.sort(key=lambda e: e[1] if e[0] == side else 1 / e[1])
    if all(s == side or f == 1 for s, f in ends):
        return f"{point} ({factor_words(ends[0][1])} to {factor_words(ends[1][1])})"
    return f"{point} ({advantage(*ends[0], words)} to {advantage(*ends[1], words)})"


def judged_outcome(judgement, a: str, b: str, higher_is_better: bool = True, words=FASTER) -> dict:
    """The ScoreRow fields of a comparison of backend a against b (a bench.core.stats.Judgement of a / b): the
    difference and its interval, the outcome in words, the winner and the standing, every one of them naming the
    side ahead (difference_words). `higher_is_better` False for a time (the lower ratio wins); `words` (a Wording)
    say how a side is ahead ("faster", "starts sooner")."""
    est = judgement.estimate
    side, factor = ahead_of(est.ratio, a, b, higher_is_better)
    if not est.replicated:  # said in neutral words: one launch a side supports no "faster" or "sooner"
        return {
            "difference": f"{advantage(side, factor, AHEAD)} (one launch a side: no interval)",
            "standing": "one launch",
            "winner": None,
            "outcome": f"cannot tell: one launch on a side ({advantage(side, factor, AHEAD, 0)})",
            "compared": "one launch a side: cannot tell",
            "test": "-",
        }
    said = difference_words(est, a, b, higher_is_better, words)
    test = f"p {judgement.p_adjusted:.2g} (Holm)"
    difference = f"{said}, {test}"
    if judgement.significant:
        # Holm's adjusted p below 5% implies the comparison's own p is, so its 95% interval excludes 1: the ratio
        # and its interval are stated only here, where they cannot contradict the call
        return {
            "difference": difference,
            "standing": "ahead",
            "winner": side,
            "outcome": advantage(side, factor, words, 0),
            "compared": ratio_words(side, factor, *oriented(est.low, est.high, side == a, higher_is_better), words),
            "test": test,
        }
    margin = judgement.margin
    if judgement.equivalent:
        return {
            "difference": difference,
            "standing": "within",
            "winner": None,
            "margin": margin,
            "outcome": f"within ±{margin:.0%} of each other",
            "compared": f"a tie within ±{margin:.0%}",
            "test": test,
        }
    return {
        "difference": difference,
        "standing": "unresolved",
        "winner": None,
        "margin": margin,
        "outcome": f"not resolved: the data allow up to ±{margin:.0%}; more launches narrow it",
        "compared": f"not significant, the data allow up to ±{margin:.0%}",
        "test": test,
    }


def at_least_zero(value: float | None, spec: str, unit: str = "") -> str:
    """A figure that cannot be negative (a cost: exposed communication, an overhead) as the page shows it: a
    negative estimate is noise around zero, so it is shown as 0 with what was measured ("0 (within noise: -0.3 ms
    measured)"; `unit` only there, where the column's heading is not beside it)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value < 0:
        return f"0 (within noise: {format(value, spec)}{unit} measured)"
    return format(value, spec)


SPREAD = "spread (sd / mean)"  # how the page names a relative standard deviation, wherever it shows one


# One colour per backend on every plot of the page, so a reader who has learnt elastic's colour in one plot finds
# it in the next: the registry's backends in its order, each its colour; a backend it does not list gets one of
# the spare colours, the same for its name on every page.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b", "#e377c2")
SPARE_COLOURS = ("#17becf", "#bcbd22", "#d62728", "#393b79", "#637939")
BACKEND_COLOURS = dict(zip(BACKEND_MODULES, PALETTE))


def colour_of(backend: str) -> str:
    """The colour every plot of the page draws `backend` in (BACKEND_COLOURS)."""
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    return SPARE_COLOURS[sum(backend.encode()) % len(SPARE_COLOURS)]


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


def drawable(value) -> bool:
    """Whether a figure can be drawn: a finite number (a ratio of an absurd figure to a sane one is infinite; the
    tables say it, a plot's axes cannot hold it)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def positive(value) -> bool:
    """Whether a value read from a record is a positive finite number: one a log scale or a ratio takes."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display: figures only become PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig) -> str:
    """A matplotlib figure as base64 PNG (for an inline data: URL): its texts shown as written (texts_as_written), then
    laid out tight; the figure is closed. Every plot of the page is drawn here and none before: a text is first read
    (measured) when the figure is laid out, which is why the layout is made here, after texts_as_written."""
    plt = pyplot()
    try:
        texts_as_written(fig)
        buf = io.BytesIO()
        with warnings.catch_warnings():
            # a character the font lacks is drawn as a box; matplotlib's warning would copy it onto the terminal
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            fig.tight_layout()
            fig.savefig(buf, format="png", dpi=100)
    finally:
        plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def texts_as_written(fig) -> None:
    """Every text of a figure (titles, axis labels, legends, annotations, tick labels given as text) as_written: what a
    plot shows comes from the runs' records. The numbers of matplotlib's own formatters (a log axis's 2^k, drawn as a
    formula) are left as they are: made again whenever the figure is drawn, they replace what their texts held."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FormatStrFormatter, FuncFormatter, StrMethodFormatter

    for text in {id(t): t for t in fig.findobj(Text)}.values():  # each once: escaped twice, a `$` would show as `\$`
        text.set_text(as_written(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            # tick labels given as text (set_xticks with labels makes a FuncFormatter) are drawn from their formatter
            major, minor = axis.get_major_formatter(), axis.get_minor_formatter()
            if isinstance(major, (FixedFormatter, FuncFormatter, FormatStrFormatter, StrMethodFormatter)):
                axis.set_major_formatter(FuncFormatter(lambda x, pos, given=major: as_written(given(x, pos))))
            if isinstance(minor, (FixedFormatter, FuncFormatter, FormatStrFormatter, StrMethodFormatter)):
                axis.set_minor_formatter(FuncFormatter(lambda x, pos, given=minor: as_written(given(x, pos))))


# control characters (a terminal escape, NUL), which no font draws and no page shows: those of a plot's text (all but
# the line break) and of the page (all but its own line breaks and tabs)
CONTROL_IN_PLOT = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
CONTROL_IN_PAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def controls_escaped(text: str, control: re.Pattern[str]) -> str:
    """`text` with each character `control` matches as its escape (`\\x1b`)."""
    return control.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def as_written(text: str) -> str:
    """Text as a plot shows it, character for character: matplotlib reads text between two `$` as a formula
    (mathtext), which draws `$x$` as one and fails on `$\\frac{a}$`, so every `$` is escaped (drawn as itself); a lone
    surrogate, which fails the drawing, and a control character are shown as their escapes."""
    return controls_escaped(printable(text), CONTROL_IN_PLOT).replace("$", r"\$")


ENV_KEYS = (
    "hostname",
    "cpu_model",
    "cpu_count",
    "cpu_quota",
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
    # None is "no limit" where the run recorded its quota, and nothing recorded where it did not (older runs)
    out["cpu_quota"] = quota_words(env["cpu_quota"]) if "cpu_quota" in env else None
    for name, value in (env.get("variables") or {}).items():
        out[f"${name}"] = value
    return out


def env_differences(records: list) -> list[str]:
    """Fingerprint facts that differ between these runs (RunRecords)."""
    flats = [flat_env(r.environment or {}) for r in records]
    keys = sorted(set().union(*flats)) if flats else []
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1 and k not in ("bench",)]
