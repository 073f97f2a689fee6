"""One meaning per flag: every verb's parser walked, a flag's value type, unit, choices and default the same wherever
it appears (with the differences a verb needs listed below, each with its reason); every time limit a --*-timeout in
seconds; world sizes named alike; one set of fault words; option groups part of each option's one declaration; a
verb that runs one backend running each of a list in turn; and the one-line "did you mean" of a mistyped verb, choice
or option, or a flag of torchrun, horovodrun or mpirun. Nothing here runs a benchmark but the one slow case."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.cli.fault
import bench.cli.run
import bench.cli.sweep
from bench.cli import options
from bench.cli.hints import FOREIGN
from bench.cli.renamed import OldSpelling
from bench.core.registry import DEFAULT_BACKEND, PRIMARY, elastic_backends, get_backend
from bench.rank.inject import INJECT_KINDS
from bench.tasks.fault.scenarios import ON_ONE_MACHINE, SCENARIOS, SIGNALS, SWEPT
from bench.workflows.plan import SWEEP_DEFAULTS
from bench.workflows.regress import REGRESS_MATRIX
from conftest import BASELINE, FAST, assert_one_line_error, bench_in_process, cli_parser
from conftest import bench as bench_process

CLI = Path(__file__).resolve().parent.parent / "bench" / "cli"
SHAPE = ("type", "choices", "nargs", "action", "metavar")  # what one meaning is: the same on every verb, no exception
# Flags whose default differs by verb, because what the verb does needs another value; each such verb's help says its
# default and why (checked below). flag -> the verbs whose default is not the most common one.
DEFAULTS_DIFFER = {
    # which backends (bench.cli.options.BACKENDS): all of them where the verb's answer is read across them (allreduce,
    # converge, selfcheck); one for a verb that measures one run (run, fault), the question's pair for a sweep, the
    # ones the projection's study checked (predict)
    "--backend": {"sweep", "predict", "run", "fault"},
    # a sweep measures every built-in workload, predict every one the store has; the others run the quick one
    "--workload": {"sweep", "predict", "selfcheck"},
    # a sweep's world sizes double up to its largest; converge trains to accuracy at the one world size given
    "--world-sizes": {"sweep", "converge"},
    # a sweep's launches are short, its replicates are launches (bench.workflows.plan.SWEEP_DEFAULTS; the gate's
    # baselines are measured so)
    "--warmup-steps": {"sweep"},
    "--windows": {"sweep"},
    "--max-bytes": {"sweep"},
    # a sweep's fault runs are short, one part of many (bench.workflows.plan.SWEEP_FAULTS); bench fault's are the run
    "--comm-timeout": {"sweep"},
    "--recovery-timeout": {"sweep"},
    # time to accuracy needs real data
    "--data": {"converge"},
    # the baseline every later run of the gate is judged against takes more launches
    "--repeats": {"baseline"},
    # the gate's runs go to their own store; a self-check's are not results
    "--store": {"regress", "baseline", "selfcheck"},
    # the file a verb writes: report's page always, slurm-script's script and k8s's manifest to stdout unless given
    "--output": {"report", "slurm-script", "k8s"},
    # predict picks stored runs by them; the others set them
    "--batch-size": {"predict"},
    "--threads": {"predict"},
}


def commands(parser, words=()):
    """(`VERB [ACTION]`, parser) of every command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*words, name)), sub
                yield from commands(sub, (*words, name))


def help_of(action) -> str:
    return " ".join((action.help % {"default": action.default}).split())


def stated_default(action) -> str | None:
    """The default an option's help states, up to its first `;` or `)`."""
    found = re.search(r"\bdefault:? ([^;)]+)", help_of(action))
    return found.group(1) if found else None


def shown_options():
    """flag -> [(command, action)] of every option shown in some command's help (old spellings and hidden ones out)."""
    found = defaultdict(list)
    for command, sub in commands(cli_parser()):
        for action in sub._actions:
            if (
                action.option_strings
                and action.help != argparse.SUPPRESS
                and not isinstance(action, OldSpelling)
                and action.dest != "help"
            ):
                found[action.option_strings[-1]].append((command, action))
    return found


def shape(action) -> dict:
    return {
        "type": action.type,
        "choices": tuple(action.choices) if action.choices else None,
        "nargs": action.nargs,
        "action": type(action),
        "metavar": action.metavar,
    }


def test_a_flag_has_one_type_unit_and_choices_on_every_verb():
    differ = []
    for flag, uses in shown_options().items():
        for key in SHAPE:
            seen = {repr(shape(action)[key]) for _, action in uses}
            if len(seen) > 1:
                differ.append(f"{flag} {key}: " + "; ".join(f"{c}: {shape(a)[key]!r}" for c, a in uses))
    assert not differ, differ


def test_a_default_differs_by_verb_only_where_listed_and_its_help_says_so():
    wrong = []
    for flag, uses in shown_options().items():
        defaults = {command: (repr(action.default), stated_default(action)) for command, action in uses}
        listed = DEFAULTS_DIFFER.get(flag, set())
        rest = {value for command, value in defaults.items() if command not in listed}  # one default for the others
        if len(rest) > 1:
            wrong.append(f"{flag}: its default differs by verb where not listed: {defaults}")
        for command, action in uses:  # where it differs, the help says the default and, after it, why
            if command in DEFAULTS_DIFFER.get(flag, ()) and not re.search(
                r"\bdefault[^)]*?(,|:|;) ?[a-z`]", help_of(action)
            ):
                wrong.append(f"bench {command} {flag}: its help does not say its default and why: {help_of(action)}")
    assert not wrong, wrong
    # and the ones listed do differ: an entry that no longer differs is dropped
    for flag in DEFAULTS_DIFFER:
        values = {(repr(a.default), stated_default(a)) for _, a in shown_options()[flag]}
        assert len(values) > 1, f"{flag}: no longer differs by verb; drop it from DEFAULTS_DIFFER"


def test_the_gate_and_the_default_sweep_measure_what_their_baselines_measured():
    """The sweep's own defaults are the launches the committed baselines were measured with (their record of the
    command, in the old spelling, still reads so)."""
    stored = json.loads(BASELINE.read_text())["matrix"]
    then = cli_parser().parse_args(stored[1:])
    assert (then.max_nproc, then.world_sizes, then.windows, then.warmup_steps, then.max_bytes) == (
        REGRESS_MATRIX["nproc"],
        REGRESS_MATRIX["world_sizes"],
        SWEEP_DEFAULTS["windows"],
        SWEEP_DEFAULTS["warmup_steps"],
        options.byte_size(SWEEP_DEFAULTS["max_bytes"]),
    )
    now = cli_parser().parse_args(["sweep"])
    assert now.max_bytes == then.max_bytes and now.windows is None and now.warmup_steps is None  # SWEEP_DEFAULTS
    assert (SWEEP_DEFAULTS["windows"], SWEEP_DEFAULTS["warmup_steps"], SWEEP_DEFAULTS["max_bytes"]) == (3, 2, "16M")


def test_every_time_limit_is_a_timeout_in_seconds():
    limits = {flag: uses for flag, uses in shown_options().items() if "timeout" in flag}
    assert {
        "--timeout",
        "--check-timeout",
        "--comm-timeout",
        "--recovery-timeout",
        "--cores-timeout",
        "--pairs-timeout",
    } <= set(limits)
    for flag, uses in limits.items():
        assert flag.endswith("-timeout"), flag
        for command, action in uses:
            assert action.type in options.SECONDS_TYPES and action.metavar == "SECONDS", (command, flag)
            assert "seconds" in help_of(action), (command, flag)
    # no other unit and no other spelling of a limit; slurm-script's --time is sbatch's own option, in sbatch's
    # format, as its other options (--nodes, --partition, --account ...) are sbatch's
    others = [
        f"{command} {flag}"
        for flag, uses in shown_options().items()
        for command, _ in uses
        if re.search(r"minute|wait|(^--time$)|-secs?$", flag) and (flag, command) != ("--time", "slurm-script")
    ]
    assert not others, others


def test_world_sizes_are_named_alike():
    uses = shown_options()
    one_run = {command for command, _ in uses["--nproc"]}
    largest = {command for command, _ in uses["--max-nproc"]}
    assert largest == {"sweep"} == {command for command, _ in uses["--max-gpus"]}
    assert "sweep" not in one_run and {"run", "allreduce", "converge", "fault", "selfcheck"} <= one_run
    parse = cli_parser().parse_args
    assert parse(["sweep", "--max-nproc", "4"]).max_nproc == 4
    assert {command for command, _ in uses["--world-sizes"]} == {"sweep", "converge"}


# a count of a node's processes or GPUs, on any verb: --tasks-per-node, --ranks-per-pod, --gpus-per-host ...
PER_NODE_COUNT = re.compile(r"^--(n?procs?|tasks|ranks|workers|slots|gpus)-per-(node|pod|host)$")


def test_per_node_counts_are_named_alike_on_every_verb(tmp_path):
    """A node's processes are --nproc-per-node and its GPUs --gpus-per-node, on bench k8s (a node: a pod) as on bench
    slurm-script, and no verb shows another spelling of either; the old ones still make the same job, with a note."""
    uses = shown_options()
    counts = {flag: {command for command, _ in found} for flag, found in uses.items() if PER_NODE_COUNT.match(flag)}
    assert counts == {"--nproc-per-node": {"k8s", "slurm-script"}, "--gpus-per-node": {"k8s", "slurm-script"}}
    for flag in counts:  # one declaration, so one meaning: the same type and bad values on both
        assert len({(a.type, a.invalid) for _, a in uses[flag]}) == 1, flag
    image = "nvcr.io/nvidia/pytorch:25.01-py3"  # a CUDA image, for a pod's GPUs
    store = tmp_path / "b.sqlite"
    for verb, old, new, rest in (
        ("slurm-script", "--tasks-per-node", "--nproc-per-node", ["--nodes", "2", "--store", store]),
        ("k8s", "--gpus-per-pod", "--gpus-per-node", ["--image", image, "--nodes", "1"]),
    ):
        now, then = (bench_in_process(verb, *rest, flag, "2") for flag in (new, old))
        assert now.returncode == then.returncode == 0, (now.stderr, then.stderr)
        assert then.stdout == now.stdout and old not in now.stderr
        noted = [line for line in then.stderr.splitlines() if old in line]
        assert noted == [
            f"bench {verb}: {old} is now {new} (a node's processes are --nproc-per-node and its GPUs --gpus-per-node "
            "on bench k8s and bench slurm-script); the old name still works for now"
        ], then.stderr


def test_backend_and_workload_are_lists_or_all_on_every_verb():
    uses = shown_options()
    for flag in ("--backend", "--workload"):
        for command, action in uses[flag]:
            assert action.metavar.endswith("|all") and help_of(action).startswith("comma-separated"), (command, flag)
    parse = cli_parser().parse_args
    for verb in ("run", "fault", "sweep", "allreduce", "converge", "selfcheck", "predict"):
        assert parse([verb, "--backend", "elastic,horovod"]).backend == "elastic,horovod"
        assert parse([verb, "--backend", "all"]).backend == "all"


# ---------------------------------------------------------------- the groups: part of each option's one declaration
def test_each_option_declares_its_group_once():
    declared = options.declarations()
    assert all(d["group"] in options.GROUP_TITLES for d in declared.values())
    assert [flag for flag, d in declared.items() if d["group"] == "sharing"] == list(options.group("sharing"))
    # a verb's help shows a group's flags under its title
    run = cli_parser()._subparsers._group_actions[0].choices["run"]
    titles = {g.title: [a.option_strings[-1] for a in g._group_actions] for g in run._action_groups}
    assert titles[options.GROUP_TITLES["hosts"]] == list(options.group("hosts"))
    assert titles["placement"] == [*options.group("world size"), *options.group("placement")]
    # no second list of a group's flags: options.py holds no module-level tuple of flags, the groups' old names are gone
    assert not re.search(r'^[A-Z_]+ = \("--', (CLI / "options.py").read_text(), re.M)
    assert not any(
        hasattr(options, name)
        for name in ("PLACEMENT", "HOSTS", "MEASUREMENT", "DATA", "HARNESS", "SHARING", "COMM", "TEST_ONLY")
    )


# ---------------------------------------------------------------- one set of fault words
def test_every_fault_flag_takes_words_of_one_vocabulary():
    for where, words in options.FAULTS_TAKEN.items():
        assert set(words) <= set(options.FAULT_WORDS), where
    assert options.FAULTS_TAKEN["bench run --inject"] == INJECT_KINDS
    # bench fault's words and a sweep's are the fault scenarios' (one entry each): a word means one fault everywhere
    assert options.FAULTS_TAKEN["bench fault --fault"] == tuple(s.word for s in ON_ONE_MACHINE)
    assert options.FAULTS_TAKEN["bench sweep --faults"] == SWEPT
    assert {s.signal for s in SCENARIOS.values() if s.signal} == set(SIGNALS)
    # and each verb's help names its words
    text = {command: " ".join(a.help for a in sub._actions if a.help) for command, sub in commands(cli_parser())}
    assert "kill (SIGKILL" in text["fault"] and "or join" in text["fault"]
    assert "from kill, hang, join" in text["sweep"]


@pytest.fixture
def specs_made(monkeypatch):
    """The specs `bench run` and `bench fault` would run (each spec built and checked), and nothing run."""
    made = []

    def run_each(specs, store_path, as_json, verb, show_progress=True, record_lines=False):
        made.extend(specs)
        return 0

    for module in (bench.cli.run, bench.cli.fault):
        monkeypatch.setattr(module, "run_each", run_each)
    # Horovod's build probe (child processes) is this machine's, not the input's
    monkeypatch.setattr(sys.modules[type(get_backend("horovod")).__module__], "check_build", lambda: (None, {}))
    return made


@pytest.mark.parametrize(
    "new, old",
    [
        (["--fault", "hang"], ["--signal", "STOP"]),
        (["--fault", "term"], ["--signal", "term"]),
        (["--fault", "kill"], []),
        (["--fault", "join"], ["--join"]),
    ],
)
def test_a_fault_word_makes_the_run_its_old_spelling_made(new, old, specs_made, tmp_path):
    """And a record keeps what it always kept: term and hang are the scenario kill with their signal."""
    for argv in (new, old):
        proc = bench_in_process("fault", "--nproc", "2", *argv, "--store", tmp_path / "s.sqlite")
        assert proc.returncode == 0, proc.stderr
    made, was = (spec.to_dict() for spec in specs_made)
    assert made == was
    stored = {"kill": ("kill", "KILL"), "term": ("kill", "TERM"), "hang": ("kill", "STOP"), "join": ("join", None)}
    assert (made["fault"]["scenario"], made["fault"]["signal"]) == stored[new[1]]  # a join sends none


# ---------------------------------------------------------------- a verb that runs one backend: each of a list in turn
def test_run_makes_a_run_of_each_backend_and_workload_in_turn(specs_made, tmp_path):
    proc = bench_in_process(
        "run",
        "--backend",
        "elastic,single",
        "--workload",
        "mnist_mlp,resnet18",
        "--nproc",
        "1",
        "--store",
        tmp_path / "s.sqlite",
    )
    assert proc.returncode == 0, proc.stderr
    assert [(s.backend, s.workload) for s in specs_made] == [
        ("elastic", "mnist_mlp"),
        ("single", "mnist_mlp"),
        ("elastic", "resnet18"),
        ("single", "resnet18"),
    ]
    specs_made.clear()
    assert bench_in_process("run", "--nproc", "1", "--store", tmp_path / "s.sqlite").returncode == 0
    assert [(s.backend, s.workload) for s in specs_made] == [(DEFAULT_BACKEND, "mnist_mlp")]  # as cheap as before


def test_fault_with_all_runs_every_elastic_mode_that_can_run_here(specs_made, tmp_path, monkeypatch):
    cannot = [name for name in elastic_backends() if name not in PRIMARY]
    for name in cannot:
        monkeypatch.setattr(get_backend(name), "unavailable_reason", lambda device: "not here")
    proc = bench_in_process("fault", "--backend", "all", "--nproc", "2", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert [s.backend for s in specs_made] == list(PRIMARY)
    assert all(f"bench fault: skipping {name}: not here" in proc.stderr for name in cannot)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "--backend", "elastic,single", "--save-model", "m.pt"], "--save-model keeps one run's model"),
        (["fault", "--backend", "elastic,ps"], "backend ps has no elastic mode"),
        (["run", "--backend", "all,elastic"], "all stands alone"),
        (["selfcheck", "--workload", "all"], "checks one workload at a time"),
        (["sweep", "--max-nproc", "2", "--max-gpus", "1"], "give either --max-nproc (CPU processes) or --max-gpus"),
        (["fault", "--join", "--signal", "STOP"], "--fault join and --fault hang: choose one fault a run"),
    ],
)
def test_what_a_list_cannot_mean_is_one_line(argv, says, specs_made, tmp_path):
    proc = bench_in_process(*argv, "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 2 and proc.stdout == "" and says in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not specs_made


def test_several_runs_print_each_summary_and_exit_by_all_of_them(monkeypatch, capsys, tmp_path):
    import bench.harness.runner
    from bench.cli.common import run_each

    statuses = iter(["ok", "failed"])

    def execute(spec, store, show_progress=True):
        task = SimpleNamespace(one_line=lambda r: r.status, summary_lines=lambda r: [f"summary of {r.spec.backend}"])
        return SimpleNamespace(spec=spec, status=next(statuses), task=task, to_dict=lambda: {"backend": spec.backend})

    monkeypatch.setattr(bench.harness.runner, "execute", execute)
    specs = [SimpleNamespace(task="train", backend=b, workload="mnist_mlp", world_size=1) for b in ("elastic", "ps")]
    assert run_each(specs, str(tmp_path / "s.sqlite"), False, "run", show_progress=False) == 1
    assert capsys.readouterr().out.splitlines() == ["summary of elastic", "summary of ps"]
    statuses = iter(["ok", "ok"])
    assert run_each(specs, str(tmp_path / "s.sqlite"), True, "run", show_progress=False) == 0
    assert json.loads(capsys.readouterr().out) == [{"backend": "elastic"}, {"backend": "ps"}]


def test_a_sweep_runs_the_world_sizes_up_to_its_largest(monkeypatch, tmp_path):
    planned = {}

    def run_benchmark_sweep(store, title, **kwargs):
        planned.update(kwargs)
        return "s1", []

    monkeypatch.setattr(bench.cli.sweep, "run_benchmark_sweep", run_benchmark_sweep)
    for flag in ("--max-nproc", "--nproc"):  # the old spelling still means the largest, with its notice
        proc = bench_in_process(
            "sweep",
            "--backend",
            "elastic",
            flag,
            "4",
            "--oversubscribe",
            "--no-faults",
            "--store",
            tmp_path / "s.sqlite",
        )
        assert proc.returncode == 0, proc.stderr
        assert planned["world_sizes"] == [1, 2, 4] and planned["backends"] == ["elastic"]
    assert "bench sweep: --nproc is now --max-nproc" in proc.stderr


@pytest.mark.slow
def test_a_run_of_two_backends_stores_a_run_of_each(tmp_path):
    store = tmp_path / "bench.sqlite"
    proc = bench_process("run", "--backend", "single,elastic", "--nproc", "1", *FAST, "--json", "--store", store)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert [(r["spec"]["backend"], r["status"]) for r in records] == [("single", "ok"), ("elastic", "ok")]
    listed = bench_process("list", "--store", store)
    assert all(r["run_id"] in listed.stdout for r in records)


# ---------------------------------------------------------------- did you mean
@pytest.mark.parametrize(
    "argv, says",
    [
        (["swep"], "invalid choice: 'swep'; did you mean sweep?"),
        (["run", "--cpu-bind", "core"], "invalid choice: 'core'; did you mean cores?"),
        (["run", "--backend", "horovd"], "unknown backend 'horovd'; did you mean horovod?"),
        (["run", "--workload", "mnist"], "unknown workload 'mnist'; did you mean mnist_mlp?"),
        (["run", "--windw", "3"], "unrecognized arguments: --windw 3; did you mean --windows?"),
        (["run", "--max-restarts", "3"], "(--max-restarts is an option of bench fault)"),
        (["fault", "--fault", "kil"], "unknown fault 'kil'; did you mean kill?"),
        (
            ["sweep", "--faults", "kill,crash"],
            "'crash', a rank raising an exception, is bench run --inject crash, not a fault --faults makes",
        ),
        (["run", "--inject", "term:1:3"], "'term', a worker asked to stop (SIGTERM), is bench fault --fault term"),
        (["run", "-np", "4"], "-np is horovodrun's and mpirun's process count; bench's is --nproc 4"),
        (["sweep", "-np", "4"], "bench's is --max-nproc 4"),
        (["run", "--nproc_per_node=2"], "--nproc_per_node is torchrun's processes per node; bench's is --nproc 2"),
        (["allreduce", "-H", "h1:2,h2:2"], "-H is horovodrun's and mpirun's host list; bench's is --hosts h1:2,h2:2"),
        (["run", "-hostfile", "hosts.txt"], "bench's is --hostfile hosts.txt"),
        (["run", "--gloo"], "bench's is --hvd-launcher gloo"),
        (
            ["report", "-np", "2"],
            "bench report takes no --nproc (an option of bench run, allreduce, converge, fault, selfcheck)",
        ),
        (["testhosts", "stauts"], "invalid choice: 'stauts'; did you mean status?"),
    ],
)
def test_a_mistake_gets_one_line_saying_what_was_meant(argv, says, nothing_runs):
    assert_one_line_error(
        bench_in_process(*argv), says, f"see bench {argv[0]} --help" if argv[0] != "swep" else "see bench --help"
    )


@pytest.mark.parametrize("flag", sorted(FOREIGN))
def test_every_launcher_flag_gets_bench_s_spelling(flag, nothing_runs):
    foreign = FOREIGN[flag]
    line = assert_one_line_error(
        bench_in_process("run", flag, *(["x"] if foreign.takes_value else [])), f"{flag} is {foreign.whose}"
    )
    on_run = {flag for flag, uses in shown_options().items() if any(command == "run" for command, _ in uses)}
    taken = [i for i in foreign.instead if i.split()[0] in on_run]
    if taken:
        assert f"bench's is {taken[0]}" + (" x" if foreign.takes_value else "") in line
    elif foreign.instead:  # an option of another verb
        assert f"bench run takes no {foreign.instead[0]} (an option of bench " in line
    else:
        assert foreign.advice in line


def test_what_follows_double_dash_is_another_command_s(nothing_runs):
    """slurm-script passes what follows -- to the job's bench command, which reads it with its own parser."""
    line = assert_one_line_error(bench_in_process("slurm-script", "--", "-np", "2"))
    assert "bench sweep: error: -np is" in line
