"""The documentation against the code: the README short and in its order, its two commands the ones CI and nox run,
every relative link and anchor of the README and docs/ resolving, every default the documents state the code's,
and every section the code cites existing.

Defaults are read from the code that owns them (the workloads, the sweep plan, the fault spec, the regression matrix,
the backends' options) and from the real parser (bench.cli.build_parser): its defaults and the defaults its help
states."""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.backends import horovod as hvd
from bench.backends.base import BackendOption
from bench.backends.shared.ddp import DDP_FIRST_BUCKET_BYTES
from bench.cli import build_parser
from bench.core.registry import BACKEND_MODULES, PLAIN_LOOP, PRIMARY, get_backend
from bench.tasks.fault.spec import AT_STEP_WINDOWS, CHECKPOINT_WINDOWS, FAULT_DEFAULTS
from bench.tasks.fault.spec import build_spec as build_fault_spec
from bench.workflows.plan import SWEEP_DEFAULTS
from bench.workflows.regress import REGRESS_REPEATS, regress_command
from needs import README_BLOCK, readme_block
from workloads import WORKLOADS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_WORDS = 2500
# docs/ read by a newcomer in an afternoon: the method, each study's question, answer and data, and no copy of what
# a command prints (the options: python -m bench.cli.docs)
DOCS_WORDS = 40_000
README_SECTIONS = [
    "The answer so far",
    "Quick start: a laptop CPU",
    "Quick start: one 8-GPU node",
    "Quick start: a cluster",
    "What it guarantees",
    "More",
]
SCORECARD = ("<!-- scorecard:begin -->", "<!-- scorecard:end -->")

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """The text without its fenced code blocks (a link or a default in a code block is an example)."""
    return FENCE.sub("", text)


def words(text: str) -> int:
    """Words as a reader counts them: runs of non-space holding a letter or a digit (not a table's pipes)."""
    return sum(1 for token in text.split() if re.search(r"\w", token))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, without punctuation, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", prose(path.read_text()), re.M):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def headings(path: Path, level: int) -> list[str]:
    return re.findall(rf"^{'#' * level}[ \t]+(.+?)[ \t]*$", prose(path.read_text()), re.M)


# ---------------------------------------------------------------------------------------------------- the README


def test_readme_is_read_in_five_minutes():
    count = words(README.read_text())
    assert count <= README_WORDS, f"README.md has {count} words, more than {README_WORDS}: move detail to docs/"


def test_readme_says_what_the_project_is_then_gives_its_two_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ")
    first = next(line for line in lines[1:] if line.strip())
    assert first.endswith(".") and not re.search(r"[.!?]\s+[A-Z]", first), (
        f"the first line after the title must be one sentence saying what the project is: {first!r}"
    )
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert block and block.start() < text.index("\n## "), "the two commands come before the first section"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["pip install nox && nox -s bench", "pip install nox && nox -s tests"]


def test_readme_sections_come_in_order_with_the_scorecard_markers():
    assert headings(README, 2) == README_SECTIONS
    text = README.read_text()
    begin, end = (text.count(marker) for marker in SCORECARD)
    assert (begin, end) == (1, 1), "each scorecard marker exactly once, as written"
    answer = text.index("## " + README_SECTIONS[0])
    assert answer < text.index(SCORECARD[0]) < text.index(SCORECARD[1]) < text.index("## " + README_SECTIONS[1])


def test_readme_commands_are_what_ci_and_nox_run():
    """`.ci/run` runs the README's test command; `nox -s bench` is a sweep of the primary pair on this machine's
    CPU that writes reports/latest.html, as the README's first command says."""
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    normalised = [re.sub(r"\bpython3? -m (nox|pip)\b", r"\1", line) for line in ci]
    assert "nox -s tests" in normalised
    assert any(re.fullmatch(r"pip install( --?\S+)* nox", line) for line in normalised)

    sessions = {}
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d) in ("nox.session", "nox.session()") for d in node.decorator_list
        ):
            sessions[node.name] = [
                ast.literal_eval(arg)
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "session.run"
                for arg in call.args
                if isinstance(arg, ast.Constant)
            ]
    assert "pytest" in sessions["tests"]
    # the code is checked before the tests run: the formatter (checking only), the linter and the type checker
    assert normalised.index("nox -s lint") < normalised.index("nox -s tests")
    lint = sessions["lint"]
    assert ["ruff", "check"] == lint[:2] and ["ruff", "format", "--check"] == lint[3:6] and "mypy" in lint
    bench_run = sessions["bench"]
    assert bench_run[bench_run.index("bench") :][:4] == ["bench", "sweep", "--output", "reports/latest.html"]
    args = build_parser().parse_args(["sweep"])
    assert args.backend == ",".join(PRIMARY) and args.max_gpus is None  # the primary pair, CPU processes
    assert PRIMARY == ("elastic", "horovod")


def main_job_args() -> list[str]:
    return next(
        ast.literal_eval(node.value)
        for node in ast.parse((ROOT / "noxfile.py").read_text()).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "MAIN_JOB_SEQUENTIAL"
    )


def test_every_launch_of_the_main_job_is_one_its_answer_weighs(tmp_path):
    """`nox -s bench`'s plan on this machine (its sweep, dry run): both backends' training at 2 or more workers on every
    workload and their killed and hung workers, what the page's answer weighs (bench.report.answer.RULE); no
    one-worker run, plain loop or communication sweep, which it never weighs."""
    from bench.report.answer import RULE
    from conftest import bench_in_process

    assert "Weighed: training throughput at each condition with 2 or more workers, and each failure scenario" in RULE
    proc = bench_in_process("sweep", *main_job_args(), "--dry-run", "--store", tmp_path / "never.sqlite")
    assert proc.returncode == 0, proc.stderr
    launches = re.findall(r"^launch \d+/\d+: (\S+) (.+?): world size (\d+) on ", proc.stdout, re.MULTILINE)
    assert launches and len(launches) == int(re.search(r"dry run: (\d+) launch", proc.stdout).group(1))
    assert all(int(size) >= 2 for _, _, size in launches), launches
    training = {(backend, case) for backend, case, _ in launches if ":" not in case}
    assert training == {(backend, workload) for backend in PRIMARY for workload in WORKLOADS}, training
    faults = {(backend, case.split(": ")[1].split(" to ")[0]) for backend, case, _ in launches if ":" in case}
    assert faults == {(backend, signal) for backend in PRIMARY for signal in ("SIGKILL", "SIGSTOP")}, faults


def test_the_main_job_resolves_its_rows_within_ten_minutes():
    """`nox -s bench` (no ARGS) is a sequential sweep to ±8%: in the three timed main jobs
    (docs/studies/main-job/timings.json) its added rounds stayed within --resolution-timeout, and the median sweep,
    rounds and fault runs included, within 10 minutes, and the first of them wrote its page within 10 minutes of the
    fresh clone's `nox -s bench`, set-up included (docs/studies/main-job.md states the load it measured)."""
    args = build_parser().parse_args(["sweep", *main_job_args()])
    assert args.resolution == 8 and args.weighed_only and args.world_sizes is None and args.repeats >= 3
    timed = json.loads((ROOT / "docs" / "studies" / "main-job" / "timings.json").read_text())
    assert all(s["added_seconds"] <= args.resolution_timeout for s in timed["sweeps"])
    assert statistics.median(s["seconds"] for s in timed["sweeps"]) <= 600
    # the first page, the answer at one launch a side, within 10 minutes of a fresh `nox -s bench`, set-up included
    assert timed["sweeps"][0]["first_page_seconds"] <= 600 and timed["set_up"].startswith("a fresh clone")


def test_a_test_whose_system_package_is_missing_skips_naming_it():
    """What the README's test line says of a machine without the packages .ci/run installs: the tests that need
    OpenMPI or Chromium skip there, naming the package. Here as in CI's pass as on a fresh machine
    (BENCH_TESTS_WITHOUT_OPTIONAL=1, tests/needs.py: the programs hidden), which skips even where CI=true."""
    env = {**os.environ, "CI": "true", "BENCH_TESTS_WITHOUT_OPTIONAL": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_horovod.py::test_mpi_controllers",
            "tests/test_report_browser.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "\n6 skipped in " in proc.stdout, proc.stdout[-3000:]
    assert "mpirun not found: apt-get install openmpi-bin libopenmpi-dev" in proc.stdout
    assert "chromium not found: apt-get install chromium" in proc.stdout


# what each need answers, printed by a process that hides what the pass as on a fresh machine hides, or by one that
# does not (tests/needs.py)
MISSING_NEEDS = """
import json, os, sys
sys.path.insert(0, "tests")
import needs
from bench.core.registry import BACKEND_MODULES
if needs.WITHOUT_OPTIONAL:
    needs.hide_optional()
names = [*needs.NEEDS, *(needs.BACKEND + name for name in BACKEND_MODULES)]
print(json.dumps(sorted(name for name in names if needs.missing(name))))
"""


@pytest.mark.slow
def test_every_need_the_fresh_machine_pass_takes_away_marks_its_tests_optional():
    """`nox -s tests` runs every fast test once, as on a fresh machine, and then only the `optional` ones among them
    with everything present: so each need that hiding the optional programs and Horovod builds makes missing must
    be in needs.HIDDEN_NEEDS, whose tests are marked `optional`; one left out would never run with its program."""
    from needs import HIDDEN_NEEDS

    def missing(hidden: bool) -> set[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "BENCH_TESTS_WITHOUT_OPTIONAL")}
        env |= {"BENCH_TESTS_WITHOUT_OPTIONAL": "1"} if hidden else {}
        proc = subprocess.run(
            [sys.executable, "-c", MISSING_NEEDS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return set(json.loads(proc.stdout.splitlines()[-1]))

    taken_away = missing(hidden=True) - missing(hidden=False)
    assert taken_away <= HIDDEN_NEEDS, (
        f"missing only when hidden, not in needs.HIDDEN_NEEDS: {taken_away - HIDDEN_NEEDS}"
    )
    if os.environ.get("CI") == "true":  # .ci/run installs every optional package: each of them is taken away
        assert taken_away >= HIDDEN_NEEDS - {"horovod-gpu"}, HIDDEN_NEEDS - taken_away  # no NCCL on a CPU machine
    optional = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "optional"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "tests/test_slurm_script.py::test_sbatch_reads_every_option_as_written" in optional.stdout
    assert "tests/test_horovod.py::test_mpi_controllers" in optional.stdout


def test_the_readme_says_what_each_optional_part_adds_to_the_tests():
    """One line per need a test may declare (tests/needs.py NEEDS), as `python tests/needs.py` writes them."""
    text = README.read_text()
    assert all(text.count(marker) == 1 for marker in README_BLOCK)
    written = text[text.index(README_BLOCK[0]) : text.index(README_BLOCK[1]) + len(README_BLOCK[1])]
    assert written == readme_block(), "the README's list is stale: run python tests/needs.py"


# ------------------------------------------------------------------------------------------------------- docs/


def test_docs_are_read_in_an_afternoon():
    """docs/ holds at most DOCS_WORDS words, counted as `find docs -name '*.md' | xargs wc -w` counts them (runs of
    bytes between ASCII white space)."""
    counts = {p.relative_to(ROOT): len(p.read_bytes().split()) for p in DOCS.rglob("*.md")}
    total = sum(counts.values())
    largest = ", ".join(f"{p} {n}" for p, n in sorted(counts.items(), key=lambda item: -item[1])[:5])
    assert total <= DOCS_WORDS, f"docs/ has {total} words, more than {DOCS_WORDS} (the largest: {largest}): cut"


def test_docs_have_a_map():
    """docs/README.md links every page of docs/ (studies through their own index), so a newcomer finds the one that
    matters."""
    text = prose((DOCS / "README.md").read_text())
    linked = {(DOCS / m.group(1).partition("#")[0]).resolve() for m in LINK.finditer(text)}
    pages = {p.resolve() for p in DOCS.glob("*.md") if p.name != "README.md"}
    pages.add((DOCS / "studies" / "README.md").resolve())
    unlinked = sorted(str(p.relative_to(DOCS)) for p in pages - linked)
    assert not unlinked, f"docs/README.md does not link: {unlinked}"


# ------------------------------------------------------------------------------------------------------ links


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    broken = []
    for match in LINK.finditer(prose(path.read_text())):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_sections_the_code_cites_exist():
    """`docs/method.md, "Replication"` in a comment, docstring or message names a heading (or a bold lead-in) of
    that file."""
    cited = re.compile(r"(docs/[\w/.-]+\.md), [\"']([^\"']+)[\"']")
    missing = []
    for folder in ("bench", "tests", "workloads", "examples", "scripts"):
        for source in sorted((ROOT / folder).rglob("*")):
            if source.suffix not in (".py", ".sh", ".j2") or source == Path(__file__):
                continue
            text = re.sub(r"\n\s*#?\s*", " ", source.read_text())  # citations wrap over comment lines
            for file, title in cited.findall(text):
                doc = ROOT / file
                titles = set(headings(doc, 2) + headings(doc, 3) + headings(doc, 4)) if doc.exists() else set()
                titles |= set(re.findall(r"\*\*([^*]+)\*\*", doc.read_text())) if doc.exists() else set()
                if title not in titles:
                    missing.append(f"{source.relative_to(ROOT)}: {file}, {title!r}")
    assert not missing, "cited sections that do not exist: " + "; ".join(missing)


# --------------------------------------------------------------------------------------------------- defaults


def workload_defaults() -> dict:
    mlp, resnet = WORKLOADS["mnist_mlp"], WORKLOADS["resnet18"]
    return dict(
        mlp=mlp,
        resnet=resnet,
        at_step={name: int(AT_STEP_WINDOWS * w.size("cpu").window_steps) for name, w in WORKLOADS.items()},
        checkpoint={name: CHECKPOINT_WINDOWS * w.size("cpu").window_steps for name, w in WORKLOADS.items()},
    )


def fault_steps_multiple() -> int:
    """What `--steps` defaults to, in checkpoint intervals after the fault, as the fault spec computes it."""
    at, every = 7, 5
    spec = build_fault_spec(
        backend="elastic",
        workload="mnist_mlp",
        world_size=2,
        fault="kill",
        rank=1,
        at_step=at,
        max_restarts=3,
        checkpoint_every=every,
        total_steps=None,
        comm_timeout=10.0,
        recovery_timeout=90.0,
    )
    return (spec.fault.total_steps - at) // every


@functools.cache
def claims() -> list[tuple[str, str, tuple]]:
    """(what, pattern, the code's values): every statement of a default that names the workloads, or says more than
    one option's value. Each must be found in the documents at least once, and every finding must hold the code's
    values."""
    w = workload_defaults()
    mlp, resnet = w["mlp"], w["resnet"]
    cpu_m, cpu_r, gpu_m, gpu_r = mlp.cpu, resnet.cpu, mlp.gpu, resnet.gpu
    return [
        (
            "steps per window by workload",
            r"on CPU (\d+) for mnist_mlp and (\d+) for resnet18; on GPU (\d+) and (\d+)",
            (cpu_m.window_steps, cpu_r.window_steps, gpu_m.window_steps, gpu_r.window_steps),
        ),
        (
            "batch by workload, MLP",
            r"\| `mnist_mlp` \|[^|\n]*\| 1x(\d+)x\1, batch (\d+) \| the same \|",
            (gpu_m.image, gpu_m.batch),
        ),
        (
            "batch by workload, ResNet18",
            r"\| `resnet18` \|[^|\n]*\| 3x(\d+)x\1, batch (\d+), (\d+) synthetic classes \| 3x(\d+)x\4, batch (\d+), "
            r"(\d+) classes \|",
            (gpu_r.image, gpu_r.batch, gpu_r.synthetic_classes, cpu_r.image, cpu_r.batch, cpu_r.synthetic_classes),
        ),
        (
            "fault step (method)",
            r"`--at-step`, default ([\d.]+) x the workload's window:\s+(\d+) for mnist_mlp, "
            r"(\d+) for resnet18",
            (AT_STEP_WINDOWS, w["at_step"]["mnist_mlp"], w["at_step"]["resnet18"]),
        ),
        (
            "checkpoint interval (method)",
            r"checkpoint or commit every (\d+) windows\s+\(`--checkpoint-every`: (\d+) "
            r"for mnist_mlp, (\d+) for resnet18\)",
            (CHECKPOINT_WINDOWS, w["checkpoint"]["mnist_mlp"], w["checkpoint"]["resnet18"]),
        ),
        (
            "fault step and checkpoint interval (usage)",
            r"fault at ([\d.]+) windows \(step (\d+) for mnist_mlp, (\d+) for resnet18\), checkpoint or commit every "
            r"(\d+)\s+windows \((\d+), (\d+)\)",
            (
                AT_STEP_WINDOWS,
                w["at_step"]["mnist_mlp"],
                w["at_step"]["resnet18"],
                CHECKPOINT_WINDOWS,
                w["checkpoint"]["mnist_mlp"],
                w["checkpoint"]["resnet18"],
            ),
        ),
        ("fault steps", r"`--steps`,? =? ?at-step \+ (\d+) x checkpoint-every", (fault_steps_multiple(),)),
        (
            "fault kill",
            r"Defaults: (\w+), rank (\d+),\s+`(\w+)`",
            (
                build_parser().parse_args(["fault"]).workload,
                FAULT_DEFAULTS["kill_rank"],
                build_parser().parse_args(["fault"]).fault,
            ),
        ),
        (
            "fault timeouts (method)",
            r"`--max-restarts (\d+)`, `--comm-timeout (\d+)`, `--recovery-timeout (\d+)`",
            (FAULT_DEFAULTS["max_restarts"], FAULT_DEFAULTS["comm_timeout"], FAULT_DEFAULTS["recovery_timeout"]),
        ),
        (
            "a sweep's launches",
            r"\((\d+) warm-up steps and (\d+) windows unless given\)",
            (SWEEP_DEFAULTS["warmup_steps"], SWEEP_DEFAULTS["windows"]),
        ),
        ("a sweep's repeats", r"launches every case (\d+) times by default", (SWEEP_DEFAULTS["repeats"],)),
        ("Horovod's cycle in the projection", r"wakes every cycle \(([\d.]+) ms by default", (hvd.DEFAULT_CYCLE_MS,)),
        (
            "Horovod's fusion threshold in the projection",
            r"fusion threshold \(([\d.]+) MiB by default\)",
            (hvd.DEFAULT_FUSION_MB,),
        ),
        (
            "DDP's first bucket in the projection",
            r"\(the first of at most ([\d.]+) MiB\)",
            (DDP_FIRST_BUCKET_BYTES / 2**20,),
        ),
        (
            "the regression matrix",
            r"`(bench sweep --max-nproc \d[^`]*--repeats \d+(?:\s--no-faults)?)`",
            (" ".join(regress_command(REGRESS_REPEATS)),),
        ),
    ]


def normalised(value) -> str:
    """A value as documents write it: 10.0 as 10, a float to its shortest form."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def claim_findings(text: str):
    for what, pattern, expected in claims():
        for match in re.finditer(pattern, text):
            yield what, match, tuple(normalised(v) for v in expected)


def parsers(parser: argparse.ArgumentParser):
    """The parser and every parser under it (verbs, and verbs of verbs: `bench testray up`)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def words_of(phrase: str) -> str:
    return " ".join(phrase.replace("`", "").lower().split())


@functools.cache
def parser_defaults() -> dict[str, tuple[set[str], set[str]]]:
    """Option -> (every default value the real parser gives it in any verb, the phrases its help says it defaults
    to): the argparse default, the values its help says when the code fills them in later (`default 5, at least
    1`), and the words where the code computes it (`default: cores / largest world size`)."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for sub in parsers(build_parser()):
        for action in sub._actions:
            help_text = " ".join(((action.help or "") % {"default": action.default}).split()) if action.help else ""
            for option in action.option_strings:
                values, phrases = found.setdefault(option, (set(), set()))
                if action.default not in (None, False, True, argparse.SUPPRESS):
                    values.add(normalised(action.default))
                for stated in re.findall(r"default:? (`?[\w./$%-]+`?)", help_text):
                    values.add(value_of(stated.strip("`")))
                phrases.update(words_of(p) for p in re.findall(r"default: ([^;)]+)", help_text))
    return found


VALUE = r"((?:`(?!-)[^`]+`)|[\d.]+[%MKG]?)(?=[ ,;:)])(?! x )"
OPTION = r"`(--[a-z][\w-]*)(?: [\w|,.]+)?`"  # `--opt` or `--opt METAVAR`
STATED = [
    re.compile(p)
    for p in (
        rf"{OPTION} \({VALUE}",
        rf"{OPTION}[\w ]{{0,25}}(?:, |\()default:? {VALUE}",
        r"`(--[a-z][\w-]*) ([^`\s]+)` by default",
        r"`(--[a-z][\w-]*)`, ([\d.]+)(?: \w+)? by default",
    )
]
# "`--opt` ... (default: the words its help says)": a default the code computes, stated as the parser's help states it
STATED_IN_WORDS = re.compile(rf"{OPTION}[\w ]{{0,25}}\(default: ([^;)]+)")


def stated_defaults(text: str):
    for pattern in STATED:
        yield from pattern.finditer(text)


def value_of(stated: str) -> str:
    stated = stated.strip("`")
    try:
        return normalised(float(stated))
    except ValueError:
        return stated


def test_every_claim_is_found_and_holds_the_codes_values():
    text = "\n".join(prose(p.read_text()) for p in documents())
    found, wrong = set(), []
    for what, match, expected in claim_findings(text):
        found.add(what)
        got = tuple(normalised(value_of(" ".join(g.split()))) for g in match.groups() if g is not None)[: len(expected)]
        if got != expected:
            wrong.append(f"{what}: the documents say {got}, the code {expected} ({match.group(0)!r})")
    unfound = [what for what, _, _ in claims() if what not in found]
    assert not wrong, "; ".join(wrong)
    assert not unfound, f"no document states these any more (drop the claim or the drift): {unfound}"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_default_a_document_states_is_the_parsers(path):
    known = parser_defaults()
    text = prose(path.read_text())
    wrong = []
    for match in stated_defaults(text):
        option, stated = match.group(1), value_of(match.group(2))
        if option not in known:
            wrong.append(f"{option}: no such option")
        elif stated not in known[option][0]:
            wrong.append(f"{option} {stated!r} (the code: {sorted(known[option][0]) or 'none'})")
    for match in STATED_IN_WORDS.finditer(text):
        option, stated = match.group(1), words_of(match.group(2))
        phrases = known.get(option, (set(), set()))[1]
        if not any(stated.startswith(p) or p.startswith(stated) for p in phrases):
            wrong.append(f"{option}: default {stated!r} (the code's help: {sorted(phrases) or 'none'})")
    assert not wrong, f"{path.relative_to(ROOT)} states defaults the code does not have: " + "; ".join(wrong)


def sentences(text: str):
    """Sentences of prose, list items and table rows, each on one line."""
    for block in re.split(r"\n\s*\n", prose(text)):
        if block.lstrip().startswith("|"):
            yield from block.splitlines()
            continue
        for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", block):
            yield from re.split(r"(?<=\.)\s+(?=[A-Z`(*\[])", " ".join(item.split()))


# Sentences that say "default" and name an option beside a number that is no default of this suite's options
# (another program's default, or an example): why each is not checked.
NOT_DEFAULTS = {
    "ServerAliveCountMax": "ssh's keepalive, Debian's default",
    "Horovod's default would wait 600 s": "Horovod's own elastic timeout",
    "`--ray-resize-interval` seconds (Ray's default": "Ray's own default, checked in backends.md's table",
    "three pinned default CPU sweeps": "the sample page's sweeps, made with the defaults",
}


@pytest.mark.parametrize(
    "path", [p for p in documents() if "studies" not in p.parts], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_sentence_stating_a_default_is_checked(path):
    """In a sentence (outside the studies, which record the settings of their time) that names an option and holds a
    number, every "default" is part of a statement in one of the forms the tests above check."""
    text = path.read_text()
    unchecked = []
    for sentence in sentences(text):
        if not (
            re.search(r"\bdefault", sentence, re.I)
            and re.search(r"`-?-[a-z]", sentence)
            and re.search(r"\b\d", sentence)
        ):
            continue
        if any(key in sentence for key in NOT_DEFAULTS):
            continue
        spans = (
            [m.span() for m in stated_defaults(sentence)]
            + [m.span() for m in STATED_IN_WORDS.finditer(sentence)]
            + [m.span() for _, m, _ in claim_findings(sentence)]
        )
        for word in re.finditer(r"\bdefaults?\b", sentence, re.I):
            if not any(start - 40 <= word.start() <= end + 40 for start, end in spans):
                unchecked.append(sentence[max(0, word.start() - 80) : word.end() + 60])
    assert not unchecked, f"{path.relative_to(ROOT)}: defaults stated in a form no test checks: {unchecked}"


# ------------------------------------------------------------------------------------------------ backends.md


def backend_options() -> dict[str, tuple[BackendOption, set[str]]]:
    out: dict[str, tuple[BackendOption, set[str]]] = {}
    for name in BACKEND_MODULES:
        for option in get_backend(name).options:
            out.setdefault(option.flag, (option, set()))[1].add(name)
    return out


def test_backend_options_table_holds_every_option_with_its_default():
    rows = [line for line in (DOCS / "backends.md").read_text().splitlines() if line.startswith("| `--")]
    declared = backend_options()
    listed = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        for flag in re.findall(r"`(--[\w-]+)", cells[0]):
            listed[flag] = (cells[1], cells[-1])
    assert set(listed) == set(declared), "backends.md's options table lists exactly the backends' options"
    wrong = []
    for flag, (backends, default) in listed.items():
        option, owners = declared[flag]
        if {b.strip() for b in backends.split(",")} != owners:
            wrong.append(f"{flag}: backends {backends!r}, the code {sorted(owners)}")
        if option.default is None:
            ok = default.startswith("none")
        else:
            ok = value_of(default) == normalised(option.default)
        if not ok:
            wrong.append(f"{flag}: default {default!r}, the code {option.default!r}")
    assert not wrong, "; ".join(wrong)


def test_the_plain_loop_and_the_primary_pair_are_the_ones_documented():
    text = (DOCS / "backends.md").read_text()
    assert f"`{PLAIN_LOOP}` is the plain loop" in text
    assert "default `elastic,horovod`, the question's pair" in (DOCS / "usage.md").read_text()


@pytest.mark.slow  # the sample store's page, rendered (seconds)
def test_the_readme_scorecard_is_what_the_sample_store_makes():
    """The README's answer is generated from the committed sample store (scripts/readme_scorecard.py), so it cannot
    drift from the page that store makes."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_scorecard.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr + "\nrun: python scripts/readme_scorecard.py"


# ------------------------------------------------------------- the README's and the studies index's figures
#
# Every measured figure of README.md (outside its generated blocks) and docs/studies/README.md is one the tests below
# compute from a committed store or record and find where the documents state it; the last test refuses any other.

STUDIES_INDEX = DOCS / "studies" / "README.md"
MAIN_JOB = DOCS / "studies" / "main-job"
PROJECTION_STORE = "docs/studies/projection/bench.sqlite"
# The README's projection for 8-GPU nodes, as a user types it: ResNet18's profile of the projection study, one H200's
# step (docs/studies/gpu-h200.md), nodes of 8 H100 over 100 Gbit/s InfiniBand.
GPU_PROJECTION = (
    f"bench predict --store {PROJECTION_STORE} --workload resnet18 --backend elastic,horovod --cluster ib-100g "
    "--compute-ms 14.5 --compute-batch 64"
)
CPU_PROJECTION = f"bench predict --store {PROJECTION_STORE} --cluster cpu-10g"
VALIDATION = f"bench predict --validate --store {PROJECTION_STORE}"
# A figure: a number with the unit that makes it a measurement (a share, a time, a factor, points of efficiency).
FIGURE = re.compile(r"±?\d[\d,]*(?:\.\d+)?(?:%| ?(?:ms|s|min|minutes?|points?|times|x|GB|MB)\b)")


def flat(text: str) -> str:
    return " ".join(text.split())


def readme_prose() -> str:
    """The README without its code blocks and its generated blocks (the scorecard, the optional parts)."""
    text = README.read_text()
    for begin, end in (SCORECARD, README_BLOCK):
        text = text[: text.index(begin)] + text[text.index(end) + len(end) :]
    return prose(text)


def table_row(text: str, starts: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {starts}"))


@functools.cache
def scorecard_of(store_path: Path) -> tuple:
    """The scorecard rows a store's page shows (a copy of the store: pages read, never write, but stay safe)."""
    import shutil
    import tempfile

    from bench.core.stats import Family
    from bench.core.store import Store
    from bench.report.page import ReportContext, task_parts
    from bench.results.agreement import frame_comparisons
    from bench.results.frame import load_frame

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.sqlite"
        shutil.copy(store_path, store)
        frame = load_frame(Store(store))
        parts = task_parts(frame, ReportContext("", [], frame, Family(frame_comparisons(frame))))
    return tuple(r for p in parts for r in p.scorecard)


def throughput_row(rows, condition: str):
    (row,) = [r for r in rows if r.measure == "training throughput" and r.condition.startswith(condition)]
    return row


def outcome_figure(row) -> str:
    """ "±16%" of "within ±16% of each other", "13%" of "elastic faster by 13%"."""
    return re.search(r"(±\d+%|by (\d+%))", row.outcome).group(2 if row.standing == "ahead" else 1)


@functools.cache
def predict(command: str) -> dict:
    """What `bench predict ... --json` answers, run as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *command.split()[1:], "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr  # --validate exits 1 when the model misses its goal
    return json.loads(proc.stdout)


def main_job_timings() -> dict:
    return json.loads((MAIN_JOB / "timings.json").read_text())


def main_job_resolution(timings: dict) -> tuple[str, str]:
    """The narrowest and widest margin a main job's two-worker training rows reached on each sweep's own launches."""
    margins = [row["margin"] for sweep in timings["sweeps"] for row in sweep["rows"].values()]
    return f"±{min(margins):.0%}", f"±{max(margins):.0%}"


def gpu_projection() -> dict:
    """elastic's and horovod's efficiency at 8 GPUs as the README says it ("95% (92%-99%)"), and the GPU counts at
    which a backend is named faster (only where its step's interval lies below the other's)."""
    (result,) = predict(GPU_PROJECTION)["results"]
    said = {}
    for backend in ("elastic", "horovod"):
        (point,) = [p for p in result["backends"][backend]["points"] if p["workers"] == 8]
        assert point["nodes"] == 1
        said[backend] = f"{point['efficiency']:.0%} ({point['efficiency_low']:.0%}-{point['efficiency_high']:.0%})"
    counts = [f["workers"] for f in result["fastest"]]
    named = [f["workers"] for f in result["fastest"] if f["backend"] == "horovod"]
    assert named == counts[counts.index(named[0]) : counts.index(named[-1]) + 1], result["fastest"]  # one run
    assert all(f["backend"] in ("horovod", None) for f in result["fastest"])
    return {**said, "named": named}


def validation() -> dict:
    answer = predict(VALIDATION)
    right, significant = map(int, re.search(r"at (\d+) of (\d+) significant", answer["summary"]).groups())
    return {
        "judged": sum(row["judged"] for row in answer["rows"]),
        "points": len(answer["rows"]),
        "median": f"{answer['median_error']:.1%}",
        "worst": f"{answer['worst_error']:.1%}",
        "right": right,
        "significant": significant,
    }


def track_record() -> tuple[str, re.Match]:
    summary = predict(GPU_PROJECTION)["track_record"]["summary"]
    found = re.search(
        r"median error ([\d.]+) points over (\d+) published efficiencies of (\d+) tables \(worst ([\d.]+); (\d+) above",
        summary,
    )
    assert found, summary
    return summary, found


@pytest.mark.slow  # the sample store's scorecard, computed (seconds)
def test_the_readme_studies_rows_say_what_the_sample_store_says():
    """The studies table's rows on training speed (on one host, pinned and unpinned, and across a shaped link) quote
    the sample store's scorecard (the page's outcomes, after Holm's correction), so they cannot disagree with the
    answer above them; the studies index and the link study say the same of the links."""
    rows = scorecard_of(ROOT / "reports" / "sample" / "bench.sqlite")
    readme = README.read_text()
    one_host = table_row(readme, "Which trains faster, 1 or 2 workers on one host")
    for workload in ("mnist_mlp", "resnet18"):
        row = throughput_row(rows, f"{workload}, 2 workers, cpu, pinned, one host")
        assert row.standing == "within" and outcome_figure(row) in one_host, (row.outcome, one_host)
    unpinned = table_row(readme, "... with threads left to the scheduler?")
    mlp, resnet = (throughput_row(rows, f"{w}, 2 workers, cpu, unpinned, one host") for w in ("mnist_mlp", "resnet18"))
    assert mlp.winner == resnet.winner == "elastic" and mlp.standing == resnet.standing == "ahead"
    said = f"Elastic faster at 2 workers, by {outcome_figure(mlp)} (MLP) and {outcome_figure(resnet)} (ResNet18)"
    assert said in unpinned, unpinned
    links = {
        link: throughput_row(rows, f"mnist_mlp, 2 workers, cpu, unpinned, across 2 hosts, {condition}")
        for link, condition in (("100mbit", "link 100mbit"), ("1gbit", "link 1gbit"), ("unlimited", "on "))
    }
    assert links["100mbit"].standing == "within" and links["1gbit"].winner == links["unlimited"].winner == "elastic"
    fast, slow = f"by {outcome_figure(links['1gbit'])} at 1gbit", outcome_figure(links["100mbit"])
    unlimited = f"by {outcome_figure(links['unlimited'])} unlimited"
    across = table_row(readme, "Across 2 hosts over a shaped link?")
    assert f"Elastic faster {fast} and {unlimited}; within {slow} of each other at 100mbit" in across, across
    index = table_row(STUDIES_INDEX.read_text(), "[links.md]")
    assert f"elastic faster {fast} and {unlimited}, within {slow} of each other at 100mbit" in index, index
    study = (DOCS / "studies" / "links.md").read_text()
    for link, row in links.items():
        assert re.search(rf"^\| {link}[ (].*\| {re.escape(row.outcome)} \|$", study, re.M), (link, row.outcome)


@pytest.mark.slow  # the main job's store's scorecard, computed (seconds)
def test_the_main_job_is_summed_up_as_its_store_and_timings_say():
    """The studies index's line on the main job: its timings (docs/studies/main-job/timings.json) and what the page
    of its store says of the two-worker training rows and the hung worker; main-job.md says the same."""
    from bench.core.stats import EQUIVALENCE_USEFUL

    rows = scorecard_of(MAIN_JOB / "bench.sqlite")
    mlp, resnet = (throughput_row(rows, f"{w}, 2 workers, cpu, pinned, one host") for w in ("mnist_mlp", "resnet18"))
    (hung,) = [r for r in rows if r.measure == "recovery from a hung worker"]
    assert hung.outcome == "elastic came through in every run and horovod in none", hung.outcome
    timings = main_job_timings()
    sweeps = [s["seconds"] / 60 for s in timings["sweeps"]]
    first_page = timings["sweeps"][0]["first_page_seconds"] / 60
    said = (
        f"set-up {timings['set_up_seconds'] / 60:.1f} minutes, first page {first_page:.1f} minutes after the start, "
        f"each sweep {min(sweeps):.1f} to {max(sweeps):.1f} minutes; every sweep alone: elastic came through a hung "
        "worker in every run, Horovod in none, and Horovod recovered sooner from a killed worker; pooled, training: "
        f"{mlp.outcome} (MLP), {resnet.outcome} (ResNet18)"
    )
    index = table_row(STUDIES_INDEX.read_text(), "[main-job.md]")
    assert said in index, index
    study = flat((MAIN_JOB.parent / "main-job.md").read_text())
    launches = mlp.line.split("; ")[-1].split(" launches")[0]  # "22 + 22"
    assert f"Pooled on the page of all three ({launches} launches), MLP: {mlp.outcome}" in study
    assert f"ResNet18: {resnet.outcome}." in study
    for sweep in timings["sweeps"]:  # each sweep's rows on its own launches, as its page would judge them
        mlp_alone, resnet_alone = (
            f"within ±{row['margin']:.0%}"
            if not row["significant"] and row["margin"] <= EQUIVALENCE_USEFUL
            else f"not resolved at ±{row['margin']:.0%}"
            for row in sweep["rows"].values()
        )
        assert f"| {sweep['sweep_id']} | {mlp_alone} | {resnet_alone} |" in study, sweep["sweep_id"]
    readme = table_row(README.read_text(), "Which trains faster, 1 or 2 workers on one host")
    assert (
        f"the main job's three runs pooled: {mlp.outcome} on the MLP, {resnet.outcome.split(' of each')[0]}" in readme
    )


def test_the_readme_times_the_main_job_as_it_was_measured():
    """The README's set-up and sweep times are the figures of the recorded run (docs/studies/main-job/timings.json,
    written by scripts/main_job.py), stated once, with the machine they ran on, and its study page says the same."""
    timings = main_job_timings()
    machine = timings["machine"]
    set_up = f"{timings['set_up_seconds'] / 60:.1f} minutes on a {machine['cpu_count']}-core {machine['cpu_model']}"
    sweeps = [s["seconds"] / 60 for s in timings["sweeps"]]
    assert all(s["state"] == "complete" for s in timings["sweeps"]) and len(sweeps) >= 3
    each = f"{min(sweeps):.1f} to {max(sweeps):.1f} minutes"
    first_page = f"{timings['sweeps'][0]['first_page_seconds'] / 60:.1f} minutes after `nox -s bench` started"
    readme = flat(readme_prose())
    assert f"built Horovod in {set_up}" in readme and f"each sweep then takes {each} there" in readme
    assert f"its first page (one launch a side) came {first_page}" in readme
    low, high = main_job_resolution(timings)
    assert f"rounds added toward ±8% on the two-worker rows, which each run alone brought to {low} to {high}" in readme
    assert readme.count(" minutes") == 3, "the main job's times are stated once"
    study = flat((MAIN_JOB.parent / "main-job.md").read_text())
    assert f"{timings['set_up_seconds'] / 60:.1f} minutes** ({timings['set_up_seconds']} s)" in study
    assert f"each sweep takes {each}" in study
    for sweep in timings["sweeps"]:
        assert f"| {sweep['sweep_id']} | {sweep['launches']} | {sweep['seconds'] / 60:.1f} min" in study


@pytest.mark.slow  # three projections of the projection study's store (seconds)
def test_the_projection_is_said_as_bench_predict_prints_it():
    """What the README's first screen says of 8-GPU nodes is `bench predict`'s answer for the command it shows, with
    the track record the command prints; the studies rows on the projection quote `bench predict --validate` and
    `bench predict --cluster cpu-10g` on the projection study's store."""
    readme, index = flat(readme_prose()), STUDIES_INDEX.read_text()
    gpu = gpu_projection()
    named = gpu["named"]
    said = (
        f"puts elastic at {gpu['elastic']} and Horovod at {gpu['horovod']} of linear scaling at 8 GPUs in one node, "
        f"and names Horovod faster at {min(named)} to {max(named)} GPUs, across nodes (elsewhere their intervals "
        "overlap)"
    )
    assert f"`{GPU_PROJECTION}`" in readme and said in readme, said
    summary, record = track_record()
    assert f'Its track record, as it prints it: "{summary}"' in readme
    median, figures, _, _, above = record.groups()
    published = table_row(README.read_text(), "The same model against published GPU tables?")
    assert f"median error {median} points over {figures} published efficiencies, {above} above 10" in published
    assert summary[summary.index("median error") : summary.index(" above 10)") + len(" above 10)")] in table_row(
        index, "[published.md]"
    )

    v = validation()
    judged = f"{v['judged']} of {v['points']} points judged"
    said = f"median absolute error {v['median']}, worst {v['worst']}"
    winners = f"the predicted winner right at {v['right']} of {v['significant']} significant differences"
    assert f"{judged}: {said}; {winners}" in table_row(index, "[projection.md]")
    row = table_row(README.read_text(), "At 8 to 1,024 workers?")
    assert f"{judged}, {said}, {winners}" in row, row
    named = {
        r["case"]["workload"]: {f["workers"]: f["backend"] for f in r["fastest"]}
        for r in predict(CPU_PROJECTION)["results"]
    }
    assert set(named["mnist_mlp"].values()) == {None}
    resnet = named["resnet18"]
    overlap = [n for n, b in resnet.items() if b is None and min(resnet) < n]
    faster = [n for n, b in resnet.items() if b == "horovod"]
    assert len(overlap) == 1 and set(faster) == set(resnet) - set(overlap) - {min(resnet)}
    ahead = (
        f"Horovod is named faster on ResNet18 at {min(faster)} to {max(faster):,} workers but {overlap[0]}, where the "
        "intervals overlap, as on the MLP at every count"
    )
    assert ahead in row, row


@pytest.mark.slow  # every figure the tests above check, computed (seconds)
def test_every_figure_of_the_readme_and_the_studies_index_is_one_the_tests_check():
    """A figure (a share, a time, a factor, points) in README.md's own text or the studies index is one computed above
    from a committed store or record, or the main job's settings (noxfile.py); anything else is retyped by hand and
    would drift: state it on its study page and link there."""
    sample = scorecard_of(ROOT / "reports" / "sample" / "bench.sqlite")
    main_job = scorecard_of(MAIN_JOB / "bench.sqlite")
    checked = {
        outcome_figure(r)
        for r in sample + main_job
        if r.measure == "training throughput" and r.standing in ("within", "ahead")
    }
    timings = main_job_timings()
    sweeps = [s["seconds"] / 60 for s in timings["sweeps"]]
    first_page = timings["sweeps"][0]["first_page_seconds"] / 60
    checked |= {
        f"{timings['set_up_seconds'] / 60:.1f} minutes",
        f"{max(sweeps):.1f} minutes",
        f"{first_page:.1f} minutes",
    }
    checked |= set(main_job_resolution(timings))
    sequential = next(
        ast.literal_eval(node.value)
        for node in ast.parse((ROOT / "noxfile.py").read_text()).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "MAIN_JOB_SEQUENTIAL"
    )
    args = build_parser().parse_args(["sweep", *sequential])
    checked |= {f"{normalised(args.resolution_timeout)} s", f"±{normalised(args.resolution)}%"}
    gpu = gpu_projection()
    checked |= {f for backend in ("elastic", "horovod") for f in re.findall(r"\d+%", gpu[backend])}
    v = validation()
    checked |= {v["median"], v["worst"], f"{v['points']} points", f"{track_record()[1].group(1)} points"}
    # the fit set's median, which the track record the README quotes gives beside the held-out figures'
    checked |= {f"{m} points" for m in re.findall(r"median error ([\d.]+) points", track_record()[0])}
    found = {
        str(path.relative_to(ROOT)): FIGURE.findall(text)
        for path, text in ((README, readme_prose()), (STUDIES_INDEX, STUDIES_INDEX.read_text()))
    }
    unchecked = {name: sorted(set(figures) - checked) for name, figures in found.items()}
    assert not any(unchecked.values()), f"figures no test computes from the data: {unchecked}"
