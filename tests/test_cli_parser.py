"""The command line without running anything: every verb's help, defaults shown and used as the code that owns
them sets them, each shared option declared once, bad numbers refused while parsing, sweeps planned from
plain values, and the one loop that runs a list of specs."""

import argparse
import ast
import functools
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.cli.sweep
import bench.workflows.regress
from bench.cli import VERB_GROUPS, build_parser, options, slurm_launcher_alias
from bench.cli.common import HelpFormatter, comma_list
from bench.cli.docs import _commands
from bench.cli.renamed import RENAMED
from bench.core.errors import UsageError
from bench.core.registry import PRIMARY, get_task
from bench.core.spec import DEFAULTS, default_threads
from bench.harness.runner import run_specs
from bench.rank.collectives import COMM_DEFAULTS, parse_bytes
from bench.tasks.fault.spec import FAULT_DEFAULTS
from bench.workflows.plan import (
    SWEEP_DEFAULTS,
    SWEEP_FAULTS,
    comm_options,
    fault_specs,
    faults_missing,
    plan_sweep,
    sweep_world_sizes,
)
from bench.workflows.sweep import benchmark_sweep_plan
from conftest import bench as bench_process
from factories import fault_spec
from workloads import WORKLOADS

CLI = Path(__file__).resolve().parent.parent / "bench" / "cli"
VERBS = [
    "run",
    "sweep",
    "allreduce",
    "converge",
    "list",
    "report",
    "compare",
    "agreement",
    "predict",
    "regress",
    "baseline",
    "fault",
    "selfcheck",
    "import",
    "doctor",
    "slurm-script",
    "k8s",
    "testhosts",
    "testslurm",
    "testray",
]


def verb_names() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


def help_of(verb: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([verb, "--help"])
    assert exit.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # one line: help wraps wherever it likes


def test_every_verb_is_registered_and_has_help(capsys):
    assert verb_names() == VERBS
    for verb in VERBS:
        assert f"usage: bench {verb}" in help_of(verb, capsys)


def test_help_shows_the_defaults_of_the_code_that_owns_them(monkeypatch, capsys):
    monkeypatch.setitem(DEFAULTS, "windows", 17)
    monkeypatch.setitem(DEFAULTS, "warmup_steps", 13)
    monkeypatch.setitem(DEFAULTS, "timeout", 321.0)
    monkeypatch.setitem(COMM_DEFAULTS, "max_bytes", "32M")
    monkeypatch.setitem(SWEEP_DEFAULTS, "max_bytes", "2M")
    monkeypatch.setitem(SWEEP_DEFAULTS, "windows", 4)
    monkeypatch.setitem(SWEEP_DEFAULTS, "repeats", 6)
    monkeypatch.setitem(COMM_DEFAULTS, "iters", 33)
    monkeypatch.setitem(FAULT_DEFAULTS, "kill_rank", 7)
    monkeypatch.setitem(FAULT_DEFAULTS, "recovery_timeout", 55.0)
    monkeypatch.setattr(bench.workflows.regress, "REGRESS_REPEATS", 9)
    monkeypatch.setattr(bench.workflows.regress, "BASELINE_REPEATS", 11)

    run = help_of("run", capsys)
    assert "timed windows (default 17, at least 2)" in run
    assert "untimed steps first (default 13, at least 1)" in run
    assert "deadline per run in seconds (default 321, at most 604800 s, 7 days)" in run
    assert "timed ops per size (default 33)" in help_of("allreduce", capsys)
    assert "largest message (default 32M)" in help_of("allreduce", capsys)
    sweep = help_of("sweep", capsys)
    # a sweep's own defaults for its launches, said as the sweep's, beside the run's
    assert "largest message (default 2M in a sweep," in sweep and "32M for `bench allreduce`" in sweep
    assert "timed windows (default 4 in a sweep, whose replicates are launches" in sweep
    assert "17 for `bench run`; at least 2)" in sweep
    assert "untimed steps first (default 2 in a sweep" in sweep and "13 for `bench run`" in sweep
    assert "in rounds" in sweep and "default 6" in sweep
    fault = help_of("fault", capsys)
    assert "rank that receives the signal (7)" in fault and "hung (55.0; at most 604800 s, 7 days)" in fault
    assert "default 9" in help_of("regress", capsys)
    assert "default 11" in help_of("baseline", capsys)

    parse = build_parser().parse_args
    assert parse(["allreduce"]).max_bytes == parse_bytes("32M")
    assert parse(["sweep"]).max_bytes == parse_bytes("2M")
    assert parse(["fault"]).kill_rank == 7
    assert parse(["regress"]).repeats == 9 and parse(["baseline"]).repeats == 11 and parse(["sweep"]).repeats == 6


def test_names_in_help_come_from_the_registries(capsys):
    from bench.core.registry import BACKEND_MODULES, COMPARED, DEFAULT_BACKEND, elastic_backends
    from workloads import WORKLOADS

    run = help_of("run", capsys)
    backend = build_parser()._subparsers._group_actions[0].choices["run"]._option_string_actions["--backend"]
    assert f"all: every compared backend that takes training runs ({', '.join(COMPARED)})" in backend.help
    assert f"default {DEFAULT_BACKEND}: a run measures one backend" in run
    assert f"comma-separated workloads, or all ({', '.join(WORKLOADS)})" in run
    fault = help_of("fault", capsys)
    assert f"elastic mode: {', '.join(elastic_backends())}." in fault
    assert f"and has an elastic mode ({', '.join(elastic_backends())})" in fault
    assert build_parser().parse_args(["run"]).backend == DEFAULT_BACKEND
    # every backend bench knows is a valid name (whether a verb takes it is the verb's to say)
    for name in BACKEND_MODULES:
        assert options.backend_names(name) == name


# The fault runs' time limits, each declared by the two verbs that make fault runs (bench fault's own defaults, a
# sweep's shorter ones for its fault runs) with the other fault flags, which the fault scenarios' plug-ins declare
DECLARED_BY_EACH_FAULT_VERB = {
    "--comm-timeout": {"fault.py", "sweep.py"},
    "--recovery-timeout": {"fault.py", "sweep.py"},
}


def declared_in_source() -> dict[str, list[str]]:
    """flag -> where bench/cli's source declares it (file:line): each Flag record of the table, and each call that
    adds an option of its own (add, add_argument) with the flag written out; `declare` adds a declared one."""
    found: dict[str, list[str]] = {}
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in ("Flag", "add", "add_argument"):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                        found.setdefault(arg.value, []).append(f"{path.name}:{node.lineno}")
    return found


def test_every_flag_is_declared_once():
    """A flag is declared in one place: the table's one Flag record for a flag several verbs take (a verb may give it
    its own help or default, never its own declaration), else the one call that adds it (a flag of one verb, or of a
    helper several verbs call)."""
    declared = declared_in_source()
    twice = {
        flag: where
        for flag, where in declared.items()
        if len(where) > 1 and {w.split(":")[0] for w in where} != DECLARED_BY_EACH_FAULT_VERB.get(flag)
    }
    assert not twice, f"declared more than once: {twice}"
    table = [f.flag for f in options.FLAGS]
    assert len(table) == len(set(table)), "a flag with two records in the table"
    for flag in table:
        assert [where.split(":")[0] for where in declared[flag]] == ["options.py"], f"{flag}: {declared[flag]}"


def test_defaults_are_read_from_their_owners():
    """Never typed in the parser as literals."""
    for path in CLI.glob("*.py"):
        assert not re.search(r"default=[\"'\d]", path.read_text()), f"a literal default in {path.name}"


def test_hidden_option_is_parsed_but_not_shown():
    parser = argparse.ArgumentParser(parents=[options.placement(("--nproc", "--gpus"), hidden=("--gpus",))])
    assert "--gpus" not in parser.format_help() and "--nproc" in parser.format_help()
    assert parser.parse_args(["--gpus", "1"]).gpus == 1  # refused by the verb, with a reason


def test_fault_takes_gpus(capsys):
    assert "--gpus" in help_of("fault", capsys)
    assert build_parser().parse_args(["fault", "--gpus", "1"]).gpus == 1


def test_test_only_options_are_accepted_but_not_shown(capsys):
    parse = build_parser().parse_args
    for verb in ("run", "sweep"):
        shown = help_of(verb, capsys)
        assert "--inject" not in shown and "--ray-resize-interval" not in shown, verb
        args = parse([verb, "--inject", "crash:1:3", "--inject-delay", "20%", "--ray-resize-interval", "5"])
        assert (args.inject, args.inject_delay) == ("crash:1:3", "20%")
        assert vars(args)[options.BACKEND_OPTION + "ray_resize_interval"] == 5.0
    assert "--ray-resize-interval" in help_of("fault", capsys)  # an option of fault runs: shown where it applies
    assert "--inject-delay" in help_of("regress", capsys)  # the gate's documented way to see it fail


def commands_and_help():
    """(`bench VERB [ACTION]`, its help as one line) of every command."""
    out = []
    for words, sub in _commands(build_parser()):
        sub.formatter_class = functools.partial(HelpFormatter, width=10_000)  # one line per paragraph
        out.append((" ".join(words), sub.format_help()))
    return out


def test_no_help_says_none():
    said = [
        f"{command}: {line.strip()}"
        for command, text in commands_and_help()
        for line in text.splitlines()
        if re.search(r"\bNone\b", line)
    ]
    assert not said, "say the default in words: " + "; ".join(said)


def test_the_top_level_help_lists_every_verb_once_in_its_group(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["--help"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    listed = []
    for group, names in VERB_GROUPS:
        block = text.split(f"\n{group}:\n", 1)[1].split("\n\n", 1)[0]
        listed += [line.split()[0] for line in block.splitlines() if not line.startswith(" " * 4)]
        assert [line.split()[0] for line in block.splitlines() if not line.startswith(" " * 4)] == list(names)
    assert sorted(listed) == sorted(VERBS)
    assert "positional arguments" not in text  # argparse's flat list is replaced by the groups


def test_version_and_no_verb():
    version = bench_process("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"bench {bench.__version__}"
    bare = bench_process()
    assert bare.returncode == 2 and bare.stdout == ""  # no verb is bad input, as argparse has it; the help says what
    assert bare.stderr.startswith("usage: bench") and all(f"\n{group}:\n" in bare.stderr for group, _ in VERB_GROUPS)


def test_every_verb_has_examples_that_parse(capsys):
    parser = build_parser()
    for verb in VERBS:
        text = build_parser()._subparsers._group_actions[0].choices[verb].format_help()
        assert "\nexamples:\n" in text, f"bench {verb} --help has no examples"
        commands = [line.strip() for line in text.split("\nexamples:\n", 1)[1].splitlines() if line.strip()]
        assert commands and all(c.startswith(f"bench {verb}") for c in commands), commands
        for command in commands:
            argv = shlex.split(command, comments=True)[1:]
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                raise AssertionError(f"the example does not parse: {command}\n{capsys.readouterr().err}") from None
            assert args.verb == verb


# old spelling -> (the value it is given, the value the new spelling takes for it); none for a flag
RENAMED_VALUES = {
    "--report": ("r.html", "r.html"),
    "--launcher": ("mpi", "mpi"),
    "--no-allreduce": (),
    "--no-baseline": (),
    "--wait-for-cores": ("5", "5"),
    "--max-minutes": ("2.5", "150"),
    "--nproc": ("3", "3"),
    "--gpus": ("1", "1"),
    "--signal": ("stop", "hang"),
    "--join": (),
    "--tasks-per-node": ("2", "2"),
    "--gpus-per-pod": ("2", "2"),
}


def test_every_renamed_option_keeps_its_old_spelling_with_a_notice(capsys):
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices
    checked = 0
    for r in RENAMED:
        for verb, sub in verbs.items():
            if r.new not in sub._option_string_actions or (r.verbs is not None and verb not in r.verbs):
                continue
            given, taken = RENAMED_VALUES[r.old] or ((), (r.value,) if r.value else ())
            given, taken = (
                ([given] if isinstance(given, str) else list(given)),
                ([taken] if isinstance(taken, str) else list(taken)),
            )
            new = parser.parse_args([verb, r.new, *taken])
            assert capsys.readouterr().err == ""
            old = parser.parse_args([verb, r.old, *given])
            assert vars(old) == vars(new), (verb, r.old)
            err = capsys.readouterr().err.splitlines()
            # the notice names the new spelling (with the value it takes, where the value changed unit or words)
            said = (
                f"{r.old} {given[0]} is now {r.new} {taken[0]}"
                if r.convert
                else f"{r.old} is now {r.new} {r.value}"
                if r.value
                else f"{r.old} is now {r.new}"
            )
            assert err == [f"bench {verb}: {said} ({r.why}); the old name still works for now"]
            assert not re.search(rf"{r.old}\b(?!-)", sub.format_help()), f"bench {verb} --help shows {r.old}"
            checked += 1
    # --launcher on every verb that takes Horovod's options, --wait-for-cores on every verb that runs something;
    # --report on sweep and converge; one verb each else
    assert checked == sum(len(r.verbs) for r in RENAMED if r.verbs) + sum(
        "--hvd-launcher" in sub._option_string_actions for sub in verbs.values()
    ) + sum("--cores-timeout" in sub._option_string_actions for sub in verbs.values())
    # the old spelling refuses what the new one refuses (in the old spelling's words, where its value changed)
    for argv, said in (
        (["run", "--launcher", "ssh"], "invalid choice: 'ssh'"),
        (["fault", "--signal", "HUP"], "argument --signal: invalid choice: 'HUP'"),
        (["selfcheck", "--max-minutes", "-1"], "argument --max-minutes: '-1': expected a finite number"),
        (["sweep", "--nproc", "0"], "argument --nproc: '0': expected an integer of at least 1"),
    ):
        with pytest.raises(SystemExit) as exit:
            parser.parse_args(argv)
        err = capsys.readouterr().err.splitlines()
        assert exit.value.code == 2 and len(err) == 1 and said in err[0], err  # no notice before the refusal
    # and `--launcher slurm`, as people write it for a Slurm launch, is still --scheduler slurm
    assert slurm_launcher_alias(["run", "--launcher", "slurm"]) == ["run", "--scheduler", "slurm"]


def test_each_backend_option_says_its_default_and_why_it_differs(capsys):
    helps = {}
    for verb in VERBS:
        sub = build_parser()._subparsers._group_actions[0].choices[verb]
        action = sub._option_string_actions.get("--backend")
        if action is not None:
            helps[verb] = " ".join(action.help.split()) % {"default": action.default}
    assert set(helps) == {"run", "sweep", "allreduce", "converge", "fault", "selfcheck", "predict"}
    for verb, text in helps.items():
        assert re.search(r"default[ :]", text), (verb, text)
        # the default, then why: after it, a colon or a comma and the reason
        assert re.search(r"default[^)]*[:,] [a-z]", text), (verb, text)
    assert f"default {','.join(PRIMARY)}: the question's pair, since a sweep takes long and compares" in helps["sweep"]
    assert "default all:" in helps["allreduce"] and "default all:" in helps["converge"]
    assert len(set(helps.values())) == len(helps)  # each verb's own words
    for verb, text in helps.items():  # one meaning: a comma-separated list, or all, which each verb says
        assert text.startswith("comma-separated backends, or all") and "all:" in text, (verb, text)


def test_the_regression_gate_and_nox_use_one_store():
    """`bench regress` and `bench baseline` default to the gate's store, and nox's sessions leave it to them."""
    from bench.cli.regress import gate_store
    from bench.workflows.regress import REGRESS_STORE

    parse = build_parser().parse_args
    assert gate_store(parse(["regress"])) == gate_store(parse(["baseline"])) == str(REGRESS_STORE)
    assert gate_store(parse(["regress", "--store", "x.sqlite"])) == "x.sqlite"
    tree = ast.parse((CLI.parent.parent / "noxfile.py").read_text())
    sessions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name in ("regress", "baseline"):
        runs = [
            call
            for call in ast.walk(sessions[name])
            if isinstance(call, ast.Call)
            and getattr(call.func, "attr", "") == "run"
            and call.args
            and getattr(call.args[0], "value", None) == "bench"
        ]
        assert [a.value for a in runs[0].args[:2]] == ["bench", name]
        assert not any(getattr(a, "value", None) == "--store" for a in runs[0].args), f"nox -s {name} passes --store"


def test_the_command_line_reference_is_printed_from_the_parser():
    """`python -m bench.cli.docs`, as a user runs it, prints every command's help as the parser lays it out, and the
    tables of old spellings, fault words and launchers' flags: the reference is printed, so it cannot go stale."""
    import subprocess
    import sys

    from bench.cli import docs
    from bench.cli.hints import FOREIGN
    from bench.cli.options import FAULT_WORDS

    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli.docs"], cwd=CLI.parent.parent, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    printed = proc.stdout
    for words, sub in _commands(build_parser()):
        sub.formatter_class = functools.partial(HelpFormatter, width=docs.WIDTH)
        section = f"## {' '.join(words)}\n\n```text\n{sub.format_help().rstrip()}\n```\n"
        assert section in printed, f"{' '.join(words)}: its help is not printed as the parser gives it"
    rows = set(printed.splitlines())
    assert all(any(line.startswith(f"| `{r.old}` |") for line in rows) for r in RENAMED)
    assert all(any(line.startswith(f"| `{word}` |") for line in rows) for word in FAULT_WORDS)
    assert all(f"`{flag}`" in printed for flag in FOREIGN)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run", "--timeout", "nan"], "--timeout"),
        (["run", "--timeout", "inf"], "--timeout"),
        (["run", "--timeout", "-1"], "--timeout"),
        (["run", "--timeout", "0"], "--timeout"),
        (["run", "--lr", "nan"], "--lr"),
        (["run", "--nproc", "0"], "--nproc"),
        (["run", "--gpus", "-2"], "--gpus"),
        (["run", "--threads", "0"], "--threads"),
        (["run", "--windows", "0"], "--windows"),
        (["run", "--batch-size", "-1"], "--batch-size"),
        (["run", "--ddp-bucket-mb", "inf"], "--ddp-bucket-mb"),
        (["sweep", "--repeats", "0"], "--repeats"),
        (["sweep", "--world-sizes", "0,2"], "--world-sizes"),
        (["regress", "--repeats", "-3"], "--repeats"),
        (["baseline", "--timeout", "inf"], "--timeout"),
        (["allreduce", "--iters", "0"], "--iters"),
        (["allreduce", "--warmup-iters", "-1"], "--warmup-iters"),
        (["allreduce", "--max-bytes", "lots"], "--max-bytes"),
        (["fault", "--comm-timeout", "nan"], "--comm-timeout"),
        (["fault", "--kill-rank", "-1"], "--kill-rank"),
        (["list", "--last", "0"], "--last"),
        (["run", "--nproc", "two"], "invalid int value"),
    ],
)
def test_bad_numbers_are_refused_while_parsing(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and f"(see bench {argv[0]} --help)" in err[0], err


def test_sweep_world_sizes():
    assert sweep_world_sizes(1) == [1]
    assert sweep_world_sizes(4) == [1, 2, 4]
    assert sweep_world_sizes(6) == [1, 2, 4, 6]


def test_comm_options_take_text_or_values_and_fill_in_defaults():
    comm = comm_options({"max_bytes": "16M", "ops": "allreduce,allgather", "iters": None})
    assert comm == {
        "ops": ["allreduce", "allgather"],
        "dtype": COMM_DEFAULTS["dtype"],
        "min_bytes": parse_bytes(COMM_DEFAULTS["min_bytes"]),
        "max_bytes": 16 * 2**20,
        "warmup_iters": COMM_DEFAULTS["warmup_iters"],
        "iters": COMM_DEFAULTS["iters"],
    }
    assert comm_options({"max_bytes": 1024})["max_bytes"] == 1024
    with pytest.raises(UsageError, match="not a size"):
        comm_options({"min_bytes": "lots"})


def test_plan_sweep_from_plain_values_in_rounds():
    comm = comm_options({"max_bytes": "1K"})
    plan = plan_sweep(
        ["elastic"],
        ["mnist_mlp"],
        "cpu",
        [1, 2],
        sweep_id="s1",
        repeats=2,
        comm=comm,
        options={"windows": 3, "step_delay": "20%", "oversubscribe": True, "backend_options": {}},
    )
    cases = [(s.task, s.backend, s.workload, s.world_size) for s in plan]
    one_round = [
        ("train", "single", "mnist_mlp", 1),
        ("train", "elastic", "mnist_mlp", 1),
        ("train", "elastic", "mnist_mlp", 2),
        ("comm", "elastic", None, 2),
    ]
    # every case once a round, each round in its own (seeded, so repeatable) order
    assert sorted(cases[:4]) == sorted(cases[4:]) == sorted(one_round)
    assert [s.repeat for s in plan] == [0] * 4 + [1] * 4
    again = plan_sweep(
        ["elastic"],
        ["mnist_mlp"],
        "cpu",
        [1, 2],
        sweep_id="s1",
        repeats=2,
        comm=comm,
        options={"windows": 3, "step_delay": "20%", "oversubscribe": True, "backend_options": {}},
    )
    assert [(s.task, s.backend, s.world_size) for s in again] == [(s.task, s.backend, s.world_size) for s in plan]
    orders = {
        tuple(
            (s.backend, s.world_size, s.task)
            for s in plan_sweep(
                ["elastic"], ["mnist_mlp"], "cpu", [1, 2], sweep_id=f"s{i}", repeats=1, comm=comm, options={}
            )
        )
        for i in range(20)
    }
    assert len(orders) > 1
    assert {s.sweep_id for s in plan} == {"s1"}
    train = [s for s in plan if s.task == "train"]
    assert {s.threads for s in train} == {default_threads("cpu", 2)}  # one thread count for the whole sweep
    assert {s.windows for s in train} == {3}
    plain = [s for s in train if s.backend == "single"]
    slowed = [s for s in train if s.backend != "single"]
    comm = [s for s in plan if s.task == "comm"]
    assert plain and slowed and comm
    assert all(s.step_delay is None for s in plain)  # the yardstick is never slowed
    assert all(s.step_delay == {"fraction": 0.2} for s in slowed)
    assert all(s.comm.max_bytes == 1024 and s.comm.ops == ["allreduce"] for s in comm)

    # a companion backend (the parameter server) trains only where it is distributed, unless that is nowhere
    both = plan_sweep(["elastic", "ps"], ["mnist_mlp"], "cpu", [1, 2], options={}, comm=None, sweep_id=None)
    assert sorted((s.backend, s.world_size) for s in both) == [("elastic", 1), ("elastic", 2), ("ps", 2), ("single", 1)]
    # the regression matrix's companion backend trains only the workloads given for it
    limited = plan_sweep(
        ["elastic", "ray"],
        ["mnist_mlp", "resnet18"],
        "cpu",
        [1, 2],
        options={},
        comm=None,
        sweep_id=None,
        workloads_of={"ray": ["mnist_mlp"]},
    )
    assert sorted((s.backend, s.workload, s.world_size) for s in limited if s.backend == "ray") == [
        ("ray", "mnist_mlp", 2)
    ]
    assert sum(s.backend == "elastic" for s in limited) == 4
    alone = plan_sweep(["ps"], ["mnist_mlp"], "cpu", [1], options={}, comm=None, sweep_id=None)
    assert sorted((s.backend, s.world_size) for s in alone) == [("ps", 1), ("single", 1)]

    bare = plan_sweep(
        ["elastic"], ["mnist_mlp"], "cpu", [1], options={}, comm=None, sweep_id=None, with_plain_loop=False
    )
    assert [(s.backend, s.world_size, s.repeat) for s in bare] == [("elastic", 1, 0)]
    with pytest.raises(UsageError):
        plan_sweep(["elastic"], ["mnist_mlp"], "cpu", [1], options={}, comm=None, sweep_id=None, repeats=0)


def test_the_default_sweep_plans_a_killed_and_a_hung_worker_under_each_elastic_backend(monkeypatch):
    import bench.backends.horovod

    # planning checks that each backend can run here; Horovod's build probe (a child process) is this machine's
    monkeypatch.setattr(bench.backends.horovod, "check_build", lambda: (None, {}))
    args = build_parser().parse_args(["sweep"])
    assert not args.no_faults and args.faults is None and args.fault_repeats is None  # SWEEP_FAULTS, as below
    plan = plan_sweep(
        list(PRIMARY),
        list(WORKLOADS),
        "cpu",
        [1, 2],
        sweep_id="s1",
        repeats=SWEEP_DEFAULTS["repeats"],
        comm=None,
        options={"windows": SWEEP_DEFAULTS["windows"], "backend_options": {}},
        faults=list(SWEEP_FAULTS["kinds"]),
    )
    fault = get_task("fault")
    faults = [s for s in plan if s.task == "fault"]
    # each case twice (SWEEP_FAULTS repeats: one run a side decides nothing), in the first two rounds
    assert sorted((s.backend, fault.kind(s), s.repeat) for s in faults) == [
        (backend, kind, r) for backend in ("elastic", "horovod") for kind in ("hang", "kill") for r in (0, 1)
    ]
    assert {(s.workload, s.world_size, s.sweep_id, s.device) for s in faults} == {("mnist_mlp", 2, "s1", "cpu")}
    window = WORKLOADS["mnist_mlp"].size("cpu").window_steps
    for s in faults:  # short: the fault between two checkpoints, then training on
        f = s.fault
        assert f.checkpoint_every == window < f.at_step < 2 * window < f.total_steps
        assert (f.comm_timeout, f.recovery_timeout) == (SWEEP_FAULTS["comm_timeout"], SWEEP_FAULTS["recovery_timeout"])
    # the rest of the sweep as it was: every training case in each round, with the fault runs' thread count
    assert sum(s.task == "train" for s in plan) == SWEEP_DEFAULTS["repeats"] * len(WORKLOADS) * (1 + 2 * 2)
    assert {s.threads for s in plan} == {default_threads("cpu", 2)}
    # the sweep's own time limits given, both or one: every fault run takes them, the other one staying the sweep's
    longer = {"comm_timeout": 20.0, "recovery_timeout": 300.0}
    short_comm = SWEEP_FAULTS["comm_timeout"]
    for given, argv, expected in (
        (longer, ["--comm-timeout", "20", "--recovery-timeout", "300"], (20.0, 300.0)),
        ({"recovery_timeout": 300.0}, ["--recovery-timeout", "300"], (short_comm, 300.0)),
    ):
        specs = plan_sweep(
            ["elastic"],
            ["mnist_mlp"],
            "cpu",
            [2],
            sweep_id="s3",
            comm=None,
            options={},
            faults=["hang"],
            fault_timeouts=given,
        )
        assert [(s.fault.comm_timeout, s.fault.recovery_timeout) for s in specs if s.task == "fault"] == [expected] * 2
        on_the_line = bench.cli.sweep.fault_timeouts(build_parser().parse_args(["sweep", *argv]))
        assert on_the_line == dict(zip(("comm_timeout", "recovery_timeout"), expected, strict=True))
    assert bench.cli.sweep.fault_timeouts(build_parser().parse_args(["sweep"])) == {
        key: SWEEP_FAULTS[key] for key in longer
    }
    # and the plan's description says them
    _, description = benchmark_sweep_plan(
        None,
        backends=["elastic"],
        workloads=["mnist_mlp"],
        device="cpu",
        world_sizes=[2],
        options={},
        comm=None,
        faults=["hang"],
        fault_timeouts=longer,
    )
    assert "a stopped peer noticed after 20 s, hung with no step 300 s after the fault" in description
    # threads not given (a sweep of GPUs): those that fit the fault's workers on this machine's cores
    alone = fault_specs(["elastic", "ps"], "mnist_mlp", 2, kinds=["kill"], options={"lr": 0.5, "step_delay": "20%"})
    assert [(s.backend, s.device, s.threads, s.lr, s.step_delay) for s in alone] == [
        ("elastic", "cpu", default_threads("cpu", 2), 0.5, None)
    ]

    # more fault launches than rounds: the extra rounds hold fault runs only; a join starts one worker short
    plan = plan_sweep(
        ["elastic"],
        ["mnist_mlp"],
        "cpu",
        [1, 2],
        sweep_id="s2",
        repeats=1,
        comm=None,
        options={},
        faults=["join", "kill"],
        fault_repeats=2,
    )
    assert sorted((s.repeat, s.task, fault.kind(s) if s.task == "fault" else None, s.world_size) for s in plan) == [
        (0, "fault", "join", 1),
        (0, "fault", "kill", 2),
        (0, "train", None, 1),
        (0, "train", None, 1),
        (0, "train", None, 2),
        (1, "fault", "join", 1),
        (1, "fault", "kill", 2),
    ]
    # what has no fault to make says why, and plans none
    assert "across hosts" in faults_missing(["elastic"], [1, 2], {"hosts": []})
    assert "elastic mode" in faults_missing(["ps"], [1, 2], None)
    assert "2 workers" in faults_missing(["elastic"], [1], None)
    assert faults_missing(["elastic", "ps"], [1, 2], None) is None
    bare = plan_sweep(["ps"], ["mnist_mlp"], "cpu", [1, 2], sweep_id=None, comm=None, options={}, faults=["kill"])
    assert {s.task for s in bare} == {"train"}


def test_the_regression_matrix_command_line_means_the_matrix():
    m = bench.workflows.regress.REGRESS_MATRIX
    argv = bench.workflows.regress.regress_command(5, timeout=60.0)
    assert argv[:2] == ["bench", "sweep"]
    args = build_parser().parse_args(argv[1:])
    assert args.max_nproc == m["nproc"] and args.world_sizes == m["world_sizes"] and args.windows == m["windows"]
    assert comma_list(args.workload) == m["workloads"] and args.max_bytes == parse_bytes(m["comm_max_bytes"])
    assert args.warmup_steps == m["warmup_steps"]
    # the matrix is the default sweep: a default sweep of a 2-core machine can serve as a baseline
    default = build_parser().parse_args(["sweep"])
    assert args.backend == default.backend == ",".join(PRIMARY)  # the question's pair
    assert default.max_bytes == args.max_bytes and SWEEP_DEFAULTS["windows"] == m["windows"]
    assert args.repeats == 5 and args.timeout == 60.0


def test_run_specs_prints_progress_and_stops_after_an_interrupted_run(monkeypatch, capsys):
    import bench.harness.runner

    statuses = iter(["ok", "failed", "interrupted", "ok"])
    ran = []

    def execute(spec, store, show_progress=True):
        ran.append(spec)
        return SimpleNamespace(spec=spec, status=next(statuses), task=SimpleNamespace(one_line=lambda r: r.status))

    monkeypatch.setattr(bench.harness.runner, "execute", execute)
    specs = [SimpleNamespace(task="train", backend="elastic", workload="mnist_mlp", world_size=n) for n in (1, 2, 4, 8)]
    seen = []
    records = run_specs(specs, SimpleNamespace(path="x.sqlite"), "bench test", on_record=seen.append)
    assert [r.status for r in records] == ["ok", "failed", "interrupted"] and seen == records
    assert len(ran) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "bench test: 4 run(s) -> x.sqlite"
    assert "[2/4] elastic mnist_mlp world 2 ..." in err
    # each finished run says how it ended, the time so far and, once a run has ended, the time left
    assert re.fullmatch(r"\[2/4\] elastic mnist_mlp world 2: failed \[\d+s so far, about \d+s left\]", err[4])
    assert "bench test: interrupted; 1 run(s) not started" in err
    assert err[-1].startswith("bench test: 1 ok, 2 not ok in ")


def test_run_specs_stops_after_a_run_a_slurm_time_limit_ended(monkeypatch, capsys):
    """A Slurm job's time-limit warning ends the run it reaches (stored `timeout`) and the sweep with it."""
    import bench.harness.runner
    from bench.cluster import slurm

    ran = []

    def execute(spec, store, show_progress=True):
        ran.append(spec)
        slurm._judged["5"] = ("timeout", "the Slurm job 5 reached its time limit (00:30:00)")
        return SimpleNamespace(spec=spec, status="timeout", task=SimpleNamespace(one_line=lambda r: r.status))

    monkeypatch.setattr(bench.harness.runner, "execute", execute)
    monkeypatch.setattr(slurm, "_judged", {})
    specs = [SimpleNamespace(task="train", backend="elastic", workload="mnist_mlp", world_size=n) for n in (1, 2)]
    records = run_specs(specs, SimpleNamespace(path="x.sqlite"), "bench test")
    assert [r.status for r in records] == ["timeout"] and len(ran) == 1
    assert "bench test: interrupted; 1 run(s) not started" in capsys.readouterr().err


def test_time_left_counts_each_remaining_run_by_its_own_case():
    from bench.harness.runner import time_left

    def spec(backend, n, task="train"):
        return SimpleNamespace(task=task, backend=backend, workload="mnist_mlp", world_size=n)

    assert time_left([spec("elastic", 2)], {}) is None
    done = {("train", "elastic", "mnist_mlp", 1): [10.0, 12.0], ("train", "horovod", "mnist_mlp", 1): [20.0]}
    # a case already seen counts at its own mean; a new one at the mean of every run so far (14 s)
    assert time_left([spec("elastic", 1), spec("horovod", 1), spec("ps", 2)], done) == 11.0 + 20.0 + 14.0
    # a new case of a task seen before counts at that task's mean: a fault run is no training run
    killed, stopped = fault_spec("elastic"), fault_spec("horovod", signal="STOP")
    done[("fault", "elastic", get_task("fault").case(killed), 2)] = [40.0]
    assert time_left([stopped, spec("ps", 2)], done) == 40.0 + 14.0
