"""Bad input, by construction: every option of every verb of the real parser (bench.cli.build_parser) declares
the values it refuses beside its definition (bench.cli.options.add; BackendOption.invalid for a backend's
own), and each is given to each verb that takes the option. Refused means: exit 2, one line on stderr that
names the option or the value, no traceback, nothing on stdout, nothing created and nothing launched. An option added
without declared values fails test_every_option_declares_what_it_refuses. Then the cases of bad data, bad
baseline files and bad stores. All in this process: seconds."""

import argparse
import json
import os

import pytest

from bench.cli.options import LONG_PATH
from bench.cli.renamed import OldSpelling
from conftest import BASELINE, assert_one_line_error, bench_in_process, cli_parser
from factories import write_mnist

# What a verb needs before it reads its other options (a bad --store of `compare` is found once it has a
# baseline to compare with; `import` needs a run directory).
IMPORTED = json.loads(BASELINE.read_text())["records"][0]  # a run directory to import is named after its run
VERB_ARGS = {"compare": ["--baseline", BASELINE], "import": ["{tmp}/" + IMPORTED["run_id"]]}


def _commands(parser, words=()):
    """(words, parser) of every command, `bench VERB` and, where a verb has its own, `bench VERB ACTION`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):  # an unknown name is argparse's own error
            for name, sub in action.choices.items():
                yield (*words, name), sub
                yield from _commands(sub, (*words, name))


def _takes_a_value(action) -> bool:
    # flags (store_true, store_false, --help) take none; a choice of subcommand is walked into instead
    return action.nargs != 0 and not isinstance(action, argparse._SubParsersAction)


PARSER = cli_parser()
# an old spelling (bench.cli.renamed) refuses what its new one refuses, after its notice: tests/test_cli_parser.py
OPTIONS = [
    (" ".join(words), action)
    for words, p in _commands(PARSER)
    for action in p._actions
    if _takes_a_value(action) and not isinstance(action, OldSpelling)
]


def _name(action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


ROWS = [
    pytest.param(
        verb,
        action.option_strings[-1] if action.option_strings else None,
        value,
        action.needs,
        id=f"{verb} {_name(action)} {value!r}"[:120],
    )
    for verb, action in OPTIONS
    for value in getattr(action, "invalid", ())
]


def test_every_option_declares_what_it_refuses():
    undeclared = [
        f"bench {verb} {_name(a)}"
        for verb, a in OPTIONS
        if not getattr(a, "invalid", None) and not getattr(a, "valid_because", None)
    ]
    assert not undeclared, (
        "declare the values these options refuse (invalid=[...]) or why every string is "
        f"valid (valid_because=...): {undeclared}"
    )
    assert len(ROWS) > 200  # the walk found the parser's options


@pytest.mark.parametrize("verb, flag, value, needs", ROWS)
def test_a_declared_bad_value_is_refused_before_anything_runs(verb, flag, value, needs, tmp_path, nothing_runs):
    if verb == "import":  # a run directory to import, so that the option under test is reached
        run = tmp_path / IMPORTED["run_id"]
        run.mkdir()
        (run / "record.json").write_text(json.dumps(IMPORTED))
        (run / "spec.json").write_text(json.dumps(IMPORTED["spec"]))
        nothing_runs.snapshot()
    base = [str(a).format(tmp=tmp_path) for a in VERB_ARGS.get(verb, [])]
    line = assert_one_line_error(bench_in_process(*verb.split(), *base, *needs, *([flag] if flag else []), value))
    # the option, or the value (of a comma-separated one, its last item: the bad one, as declared)
    assert (flag and flag in line) or value.split(",")[-1] in line, f"names neither the option nor the value: {line}"


# ---------------------------------------------------------------- the cases of bad data, baselines and stores
def header_cut_short(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=200)
    (d / "train-images-idx3-ubyte").write_bytes((d / "train-images-idx3-ubyte").read_bytes()[:8])
    return ["--data-dir", d], [f"{d}/train-images-idx3-ubyte is too short", "header is cut short"]


def too_few_samples(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=10)
    return ["--data-dir", d, "--nproc", "2", "--batch-size", "64"], ["10 samples: too few for 2 worker(s) x batch 64"]


def label_out_of_range(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=200, label=255)
    return ["--data-dir", d], [f"{d}/train-labels-idx1-ubyte holds label 255", "labels 0..9"]


def corrupt_gzip(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=200, gz=True)
    raw = (d / "train-images-idx3-ubyte.gz").read_bytes()
    (d / "train-images-idx3-ubyte.gz").write_bytes(raw[:20] + bytes(len(raw) - 40) + raw[-20:])
    return ["--data-dir", d], [f"cannot read {d}/train-images-idx3-ubyte.gz"]


@pytest.mark.parametrize("make", [header_cut_short, too_few_samples, label_out_of_range, corrupt_gzip])
def test_bad_mnist_data_is_refused_before_launch(make, tmp_path, nothing_runs):
    args, fragments = make(tmp_path)
    nothing_runs.snapshot()
    assert_one_line_error(bench_in_process("run", "--data", "mnist", *args), *fragments)


def _baseline_with(change) -> dict:
    data = json.loads(BASELINE.read_text())
    change(data)
    return data


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d.pop("machine"), "'machine' must be an object"),
        (lambda d: d.update(machine="vm"), "'machine' must be an object"),
        (lambda d: d["machine"].update(calibration="fast"), "'machine.calibration' must be null or hold positive"),
        (
            lambda d: d["records"].append(3),
            f"run record {len(json.loads(BASELINE.read_text())['records'])} is "
            "malformed (a record must be a JSON object)",
        ),
        (lambda d: d["records"][0].update(created_at="yesterday"), "created_at: expected float, found str"),
        (lambda d: d["records"][1].pop("status"), "run record 1 is malformed (record"),
        (lambda d: d["records"][0].update(metrics=[1]), "metrics: expected an object, found list"),
    ],
)
def test_a_malformed_baseline_is_refused_naming_the_file(change, says, tmp_path, nothing_runs):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(_baseline_with(change)))
    nothing_runs.snapshot()
    for args in (["--baseline", path, "--current", BASELINE], ["--baseline", BASELINE, "--current", path]):
        assert_one_line_error(bench_in_process("compare", *args), f"file {path}: ", says)


def test_a_directory_given_as_the_baseline_says_so(tmp_path, nothing_runs):
    assert_one_line_error(
        bench_in_process("compare", "--baseline", tmp_path),
        f"baseline file {tmp_path} is a directory",
        f"{tmp_path}/cpu-gloo.json",
    )


@pytest.mark.parametrize("verb", ["list", "report", "agreement", "compare"])
def test_an_empty_bench_store_variable_means_the_default_store(verb, tmp_path, monkeypatch, nothing_runs):
    monkeypatch.setenv("BENCH_STORE", "")
    monkeypatch.chdir(tmp_path)
    args = ["--baseline", BASELINE] if verb == "compare" else []
    assert_one_line_error(bench_in_process(verb, *args), "no results store at results/bench.sqlite")


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["report"],
        ["agreement"],
        ["compare", "--aa"],
        ["run"],
        ["allreduce"],
        ["sweep"],
        ["regress"],
        ["baseline"],
    ],
)
def test_a_store_path_too_long_for_the_file_system(argv, nothing_runs):
    assert_one_line_error(
        bench_in_process(*argv, "--store", LONG_PATH), "cannot be used (File name too long)", "--store"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["report", "-o", "{tmp}/r.html"],
        ["agreement"],
        ["compare", "--aa"],
        ["compare", "--baseline", BASELINE],
    ],
)
def test_reading_an_empty_file_leaves_it_as_it_was(argv, tmp_path, nothing_runs):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    os.utime(empty, ns=(10**18, 10**18))
    nothing_runs.snapshot()
    argv = [str(a).format(tmp=tmp_path) for a in argv]
    assert_one_line_error(
        bench_in_process(*argv, "--store", empty), f"results store {empty} is an empty file, not a bench store"
    )
    assert empty.read_bytes() == b"" and empty.stat().st_mtime_ns == 10**18


def test_a_run_directory_that_cannot_be_written_is_refused_before_launch(tmp_path, nothing_runs):
    (tmp_path / "runs").write_text("a file where the run directories go")
    nothing_runs.snapshot()
    for verb in ("run", "sweep", "allreduce", "regress"):
        assert_one_line_error(
            bench_in_process(verb, "--store", tmp_path / "bench.sqlite"),
            f"run directory {tmp_path}/runs cannot be written (it is a file, not a folder)",
        )


RUNNING_VERBS = ["run", "sweep", "allreduce", "converge", "fault", "selfcheck", "regress", "baseline"]


@pytest.mark.parametrize("verb", RUNNING_VERBS)
@pytest.mark.parametrize(
    "variable, value, named",
    [
        ("GLOO_SOCKET_IFNAME", "nonexist0", "nonexist0"),
        ("GLOO_SOCKET_IFNAME", "lo,nonexist0", "nonexist0"),
        ("NCCL_SOCKET_IFNAME", "nonexist", "nonexist*"),
        ("TP_SOCKET_IFNAME", "nonexist0", "nonexist0"),
        ("HOROVOD_GLOO_IFACE", "nonexist0", "nonexist0"),
    ],
)
def test_an_interface_variable_naming_no_interface_is_refused_like_iface(
    verb, variable, value, named, monkeypatch, nothing_runs
):
    """Set in the environment, it would break one backend and not another: refused before anything, as --iface."""
    monkeypatch.setenv(variable, value)
    assert_one_line_error(
        bench_in_process(verb),
        f"{variable}={value} in the environment: no interface {named} on this machine (it has lo",
        f"unset {variable}",
    )


def test_interface_variables_that_name_an_interface_or_exclude_some_pass():
    from bench.cluster.hosts import check_interface_variables
    from bench.core.errors import UsageError

    for env in (
        {"GLOO_SOCKET_IFNAME": "lo"},
        {"NCCL_SOCKET_IFNAME": "^docker,nonexist"},
        {"NCCL_SOCKET_IFNAME": "l"},
        {"NCCL_SOCKET_IFNAME": "=lo"},
        {"OMPI_MCA_btl_tcp_if_include": "lo,10.0.0.0/8"},
        {"GLOO_SOCKET_IFNAME": ""},
    ):
        check_interface_variables(env)
    with pytest.raises(UsageError, match="no interface l on this machine"):
        check_interface_variables({"NCCL_SOCKET_IFNAME": "=l"})  # "=": the exact name, not a prefix
    # across hosts the ones bench sets from --iface are replaced; the others must name it
    check_interface_variables({"GLOO_SOCKET_IFNAME": "nonexist0"}, iface="eth0")
    with pytest.raises(UsageError, match="across hosts every backend uses --iface eth0; unset HOROVOD_GLOO_IFACE"):
        check_interface_variables({"HOROVOD_GLOO_IFACE": "eth1"}, iface="eth0")
