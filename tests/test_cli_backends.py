"""--backend on every verb that takes it: what `all` means is one rule (every compared backend that takes runs of the
verb's task and has what the verb needs of it: bench.core.registry.all_backends), each verb's help says it and lists
its backends, and what a verb runs with `all` is that list, less those said not to run here; its default is one of
a few, each with its reason, declared in one place (bench.cli.options.BACKENDS). Nothing here runs a benchmark."""

from __future__ import annotations

import argparse
import re

import pytest

import bench.cli.converge
import bench.cli.selfcheck
from bench.cli import options
from bench.core.registry import COMPARED, PLAIN_LOOP, get_backend, get_task
from bench.workflows.bare_loops import BARE_LOOPS
from conftest import bench_in_process, cli_parser

# What each capability a verb may need means, read from the backends (not through the code under test)
HAS = {
    "an elastic mode": lambda name: get_backend(name).elastic is not None,
    "a bare loop": lambda name: name in BARE_LOOPS,
}


def backend_actions() -> dict[str, argparse.Action]:
    """verb -> its --backend."""
    verbs = cli_parser()._subparsers._group_actions[0].choices
    return {
        verb: sub._option_string_actions["--backend"]
        for verb, sub in verbs.items()
        if "--backend" in sub._option_string_actions
    }


def test_all_is_one_rule_on_every_verb_and_each_help_says_it():
    actions = backend_actions()
    assert (
        set(actions)
        == set(options.BACKENDS)
        == {"run", "fault", "sweep", "allreduce", "converge", "selfcheck", "predict"}
    )
    by_rule: dict[tuple, set] = {}
    for verb, action in actions.items():
        b = options.BACKENDS[verb]
        every = options.every_backend(verb)
        # the rule, from the backends themselves: compared, taking the verb's runs, with what the verb needs
        assert list(every) == [
            name for name in COMPARED if b.task in get_backend(name).tasks and (b.needs is None or HAS[b.needs](name))
        ], verb
        has = f" and has {b.needs}" if b.needs else ""
        said = f"; all: every compared backend that takes {get_task(b.task).label} runs{has} ({', '.join(every)})"
        assert said in " ".join(action.help.split()), (verb, action.help)
        by_rule.setdefault((b.task, b.needs), set()).add(every)
    # one rule: verbs of the same runs and needs mean the same set (run, sweep and predict: every training backend)
    assert all(len(sets) == 1 for sets in by_rule.values()), by_rule
    assert by_rule[("train", None)] == {tuple(COMPARED)}


def test_each_default_is_one_of_a_few_and_its_help_says_why():
    actions = backend_actions()
    reasons = {}
    for verb, action in actions.items():
        value, why = options.BACKEND_DEFAULTS[options.BACKENDS[verb].default]
        assert action.default == value == options.default_backends(verb), verb
        assert " ".join(action.help.split()).endswith(f"; default {value}: {why}"), (verb, action.help)
        reasons.setdefault(value, set()).add(why)
    # one reason per default, and the defaults: one backend for a verb that measures one, all of them where the
    # verb's answer is read across them, the question's pair for a sweep, the validated ones for a projection
    assert all(len(whys) == 1 for whys in reasons.values()), reasons
    assert [options.BACKENDS[v].default for v in ("run", "fault")] == ["one", "one"]
    assert {options.BACKENDS[v].default for v in ("allreduce", "converge", "selfcheck")} == {"all"}
    parse = cli_parser().parse_args
    assert parse(["sweep"]).backend == options.default_backends("sweep")


def planned_and_skipped(proc, verb: str) -> list[str]:
    """The backends a dry run planned a launch of (the plain loop left out), then those it said cannot run here."""
    planned = dict.fromkeys(re.findall(r"^launch \d+/\d+: (\S+) ", proc.stdout, re.M))
    planned.pop(PLAIN_LOOP, None)
    return [*planned, *re.findall(rf"^bench {verb}: skipping (\S+):", proc.stderr, re.M)]


@pytest.mark.parametrize(
    "verb, size", [("run", "--nproc"), ("allreduce", "--nproc"), ("fault", "--nproc"), ("sweep", "--max-nproc")]
)
def test_all_plans_every_backend_of_the_rule_or_says_why_not(verb, size):
    proc = bench_in_process(verb, "--backend", "all", size, "2", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert sorted(planned_and_skipped(proc, verb)) == sorted(options.every_backend(verb)), (proc.stdout, proc.stderr)


def test_converge_and_selfcheck_take_every_backend_of_the_rule_or_say_why_not(monkeypatch, tmp_path):
    """Two verbs without a dry run: what they would run, the runs themselves left out."""
    taken = {}

    def run_specs(specs, *args, **kwargs):
        taken["converge"] = [s.backend for s in specs]
        return []

    def selfcheck(plans, **kwargs):
        taken["selfcheck"] = [p.backend for p in plans]
        return 0

    monkeypatch.setattr(bench.cli.converge, "run_specs", run_specs)
    monkeypatch.setattr(bench.cli.selfcheck, "selfcheck", selfcheck)
    said = {}
    for verb in ("converge", "selfcheck"):
        said[verb] = bench_in_process(verb, "--backend", "all", "--nproc", "2", "--store", tmp_path / f"{verb}.sqlite")
        skipped = re.findall(rf"^bench {verb}: skipping (\S+):", said[verb].stderr, re.M)
        assert verb in taken, said[verb].stderr
        assert sorted([*dict.fromkeys(taken[verb]), *skipped]) == sorted(options.every_backend(verb)), said[verb].stderr
