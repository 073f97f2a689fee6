"""`bench slurm-script`: what the script carries reaches its reader exactly as given, or is refused in one line with
nothing written; the job runs in the folder the script was written in, with this checkout importable; writing the
script creates nothing but the script. No Slurm is needed: the #SBATCH lines are read by the rules sbatch reads them
by, and the shell part is run by bash with the job's bench command replaced by a recorder of its argv, its folder and
its PYTHONPATH."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench.cli
from bench.cluster.slurm import shell_word
from bench.core.errors import UsageError
from conftest import ROOT, assert_one_line_error, bench_in_process
from needs import needs

PARSER = bench.cli.build_parser()
SBATCH = shutil.which("sbatch")  # Slurm's own, where installed: it lists the options it reads from a script
JOB_ID = "4242"
CANARY = "INJECTED"  # the file an injected command would make, in the test's own folder
# the #SBATCH lines of a script written with slurm-script's defaults, in their order
DEFAULT_DIRECTIVES = {
    "job-name": "bench",
    "nodes": "2",
    "ntasks-per-node": "1",
    "cpus-per-task": "1",
    "time": "30",
    "signal": "B:TERM@45",
    "open-mode": "append",
}
# the shell part of every script, line by line: what each line starts with (`source` only where the environment
# has an activate script, as a virtual environment has)
SHELL_LINES = [
    "set -euo pipefail",
    "mkdir -p -- ",
    "exec >>",
    "cd -- ",
    *(["source "] if (Path(sys.prefix) / "bin" / "activate").exists() else []),
    "export PYTHONPATH=",
    "exec ",
]


def hostile(canary: Path) -> list[str]:
    """Values that break a line, a word or a directive, or run a command (making a file named CANARY, at `canary`
    or in the folder it runs in), where written unquoted."""
    return [
        "a\nb",
        "a\rb",
        "a\tb",
        "a\x7fb",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"x;touch {canary}",
        f"$(touch {canary.name})",
        f"`touch {canary.name}`",
        f"x;touch {canary.name}",
        f"x && touch {canary} #",
        f"x|touch {canary}",
        "a b",
        " lead",
        "'",
        '"',
        "it's \"quoted\"",
        "-x",
        "--help",
        "\\",
        "\\n",
        "#",
        "a # b",
        "%j",
        "$HOME",
        "${IFS}",
        "*",
        "~",
        "!!",
        "hetjob",
        "HeTjOb2",
        "packjob",
        "x" * 5000,
        "caf\u00e9",
        "\udcff\udcfe",
        "\n3",
        "3 ",
        "",
    ]


@pytest.fixture(autouse=True)
def one_parser(monkeypatch):
    """The parser built once (parsing is the same each time), no store from the environment."""
    monkeypatch.setattr(bench.cli, "build_parser", lambda: PARSER)
    monkeypatch.delenv("BENCH_STORE", raising=False)


def tree(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


# ---------------------------------------------------------------- reading the script as sbatch and bash read it
def sbatch_words(text: str) -> list[str]:
    """The words sbatch takes from what follows `#SBATCH` on a line: split at white space, quotes (single or double)
    grouping, a backslash quoting the next character, an unquoted '#' ending the line (sbatch's own parser)."""
    words, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return words
        word, quote, escaped = None, None, False
        while i < len(text) and (quote or not text[i].isspace()):
            char = text[i]
            i += 1
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
                continue
            elif quote:
                if char == quote:
                    quote = None
                    continue
            elif char in "'\"":
                quote = char
                continue
            elif char == "#":
                i = len(text)
                break
            word = (word or "") + char
        assert quote is None, f"sbatch refuses an unmatched quote: {text!r}"
        if word is not None:
            words.append(word)


def directives(script: str) -> dict[str, str]:
    """The #SBATCH options of the script as sbatch reads them: each line one option `--NAME=VALUE`, its value
    exactly the line's text, none naming a heterogeneous job's part; read up to the first command, as sbatch does."""
    found = {}
    for line in script.split("\n")[1:]:
        if line.startswith("#SBATCH"):
            (word,) = sbatch_words(line[len("#SBATCH") :])
            assert line == f"#SBATCH {word}", f"sbatch reads {line!r} as {word!r}"
            assert "hetjob" not in line.lower() and "packjob" not in line.lower(), line
            name, _, value = word.removeprefix("--").partition("=")
            assert word.startswith("--") and name not in found, line
            found[name] = value
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return found


def assert_script_shape(script: str) -> None:
    """ASCII only, so that every value stays on its line; the shebang, the directives, a blank line, then the shell
    part's lines and nothing else: no value started a line of its own (a line sbatch could read as a directive)."""
    assert script.isascii(), script
    lines = script.split("\n")
    assert lines[0] == "#!/bin/bash" and lines[-1] == ""
    shell = lines[lines.index("") + 1 : -1]
    directives = lines[1 : lines.index("")]
    assert directives and all(line.startswith("#SBATCH ") for line in directives), script
    assert len(shell) == len(SHELL_LINES) and all(line.startswith(start) for line, start in zip(shell, SHELL_LINES)), (
        script
    )


def sbatch_reads(script: str, folder: Path) -> dict[str, str] | None:
    """The options Slurm's sbatch reads from the script (`sbatch -vv` lists them before it submits), under a
    configuration of its own whose controller nothing answers (port 1): nothing is submitted. None without sbatch."""
    if SBATCH is None:
        return None
    folder.mkdir()
    conf = folder / "slurm.conf"
    conf.write_text("ClusterName=bench-parse-only\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")
    (folder / "job.sh").write_text(script)
    proc = subprocess.run(
        [SBATCH, "-vv", "job.sh"],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=60,
        env={"PATH": os.environ["PATH"], "SLURM_CONF": str(conf)},
    )
    lines = [line.removeprefix("sbatch: ") for line in proc.stderr.splitlines()]
    assert proc.returncode != 0 and "defined options" in lines, proc.stderr
    listed = lines[lines.index("defined options") + 1 : lines.index("end of defined options")]
    return dict((part.strip() for part in line.split(" : ", 1)) for line in listed if not line.startswith("-"))


# how `sbatch -vv` lists an option whose value it shows in its own words: --exclusive, --mem=0 (every MB of the node)
SBATCH_SAYS = {("exclusive", ""): "exclusive", ("mem", "0"): "0?"}


def assert_sbatch_reads(script: str, folder: Path, expected: dict[str, str]) -> None:
    """Where sbatch is installed, it reads exactly the expected options (its time and open mode in its own words)."""
    read = sbatch_reads(script, folder)
    if read is None:
        return
    assert set(read) == {*expected, "verbose"}, read
    assert {k: v for k, v in read.items() if k not in ("time", "open-mode", "verbose")} == {
        k: SBATCH_SAYS.get((k, v), v) for k, v in expected.items() if k not in ("time", "open-mode")
    }
    assert read["open-mode"] == "a"


def recorder(folder: Path) -> Path:
    """An executable that writes its folder, its PYTHONPATH and its arguments, each ended by a NUL, to `record`."""
    path = folder / "record-argv"
    path.write_text(
        "#!/bin/bash\n"
        f"printf '%s\\0' \"$(pwd -P)\" \"${{PYTHONPATH-}}\" \"$@\" > {shlex.quote(str(folder / 'record'))}\n"
    )
    path.chmod(0o755)
    return path


def dry_run(script: str, folder: Path) -> list[bytes]:
    """The script's shell part run by bash as the job's first node runs it, but with the job's bench command (this
    Python's `-m bench`) replaced by the recorder: (its folder, its PYTHONPATH, *its arguments), as bytes."""
    folder.mkdir()
    command = f"exec {shlex.quote(sys.executable)} -m bench "
    assert script.count(command) == 1, script
    stand_in = folder / "job.sh"
    stand_in.write_text(script.replace(command, f"exec {shlex.quote(str(recorder(folder)))} "))
    syntax = subprocess.run(["bash", "-n", str(stand_in)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    proc = subprocess.run(
        ["bash", str(stand_in)],
        capture_output=True,
        cwd=folder,
        timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(folder), "SLURM_JOB_ID": JOB_ID},
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return (folder / "record").read_bytes().split(b"\0")[:-1]


# ---------------------------------------------------------------- every option against every hostile value
def options_for(name: str, value: str, tmp: Path) -> tuple[list[str], Path, dict]:
    """(slurm-script's arguments, the folder it runs in, what the script must then carry: the directives it adds,
    and the store, the job's arguments and the script's file where not the defaults) for `value` given to `name`."""
    work, store = tmp / "work", tmp / "store" / "b.sqlite"
    work.mkdir()
    expect = {"directives": {}, "store": store, "rest": [], "output": None}
    base = [f"--store={store}"]
    if name in ("job-name", "partition", "account", "time"):
        expect["directives"] = {name: value}
        return [*base, f"--{name}={value}"], work, expect
    if name in ("nodes", "nproc-per-node", "gpus-per-node", "cpus-per-worker"):
        directive = {"nproc-per-node": "ntasks-per-node", "cpus-per-worker": "cpus-per-task"}.get(name, name)
        try:
            expect["directives"] = {directive: str(int(value))}
            if name == "gpus-per-node":  # the job's sweep runs on the GPUs it asked for, a task (a worker) each
                expect["directives"]["ntasks-per-node"] = str(int(value))
                expect["rest"] = ["--max-gpus", str(int(value))]
        except ValueError:
            pass
        return [*base, f"--{name}={value}"], work, expect
    if name == "verb":
        return [*base, f"--verb={value}"], work, expect
    if name == "store":  # a file of the current folder (none given: the default, results/bench.sqlite there)
        expect["store"] = work / (value or "results/bench.sqlite")
        return [f"--store={value}"], work, expect
    if name == "store folder":
        expect["store"] = tmp / value / "b.sqlite"
        return [f"--store={tmp}/{value}/b.sqlite"], work, expect
    if name == "store link":  # a store that is a symbolic link into the folder
        os.symlink(tmp / value / "b.sqlite", work / "link.sqlite")
        expect["store"] = tmp / value / "b.sqlite"
        return ["--store=link.sqlite"], work, expect
    if name == "output":
        expect["output"] = work / value
        return [*base, f"--output={value}"], work, expect
    if name == "current folder":  # the job's folder, and the default store's (results/ there)
        (work / value).mkdir(parents=True)
        expect["store"] = work / value / "results" / "bench.sqlite"
        return [], work / value, expect
    flag = {"workload": "--workload=", "data-dir": "--data-dir=", "argument": ""}[name]
    expect["rest"] = [flag + value]
    return [*base, "--", flag + value], work, expect


OPTIONS = [
    "job-name",
    "partition",
    "account",
    "time",
    "nodes",
    "nproc-per-node",
    "gpus-per-node",
    "cpus-per-worker",
    "verb",
    "store",
    "store folder",
    "store link",
    "output",
    "current folder",
    "workload",
    "data-dir",
    "argument",
]
NOT_A_NAME_HERE = {"store link": {"x" * 5000}, "current folder": {"x" * 5000, ""}}  # (no such link or folder)


@pytest.mark.parametrize("name", OPTIONS)
@pytest.mark.parametrize("index", range(len(hostile(Path("/c")))))
def test_a_hostile_value_is_refused_or_reaches_its_reader_exactly(name, index, tmp_path, monkeypatch):
    """Refused: exit 2, one line, nothing written. Written: the script alone is made, bash takes it, each #SBATCH line
    is one option with the value given, and run, the job's command gets every value exactly and nothing else runs."""
    value = hostile(tmp_path / CANARY)[index]
    if value in NOT_A_NAME_HERE.get(name, ()):
        pytest.skip(f"{value[:10]!r} cannot name a {name} on this file system")
    args, cwd, expect = options_for(name, value, tmp_path)
    monkeypatch.chdir(cwd)
    before = tree(tmp_path)
    proc = bench_in_process("slurm-script", *args)
    if proc.returncode != 0:
        assert_one_line_error(proc)
        assert tree(tmp_path) == before, "a refused script must leave nothing behind"
        return
    output = expect["output"]
    assert tree(tmp_path) == sorted([*before, *([output] if output else [])]), "only the script may be written"
    script = output.read_text() if output else proc.stdout
    assert_script_shape(script)
    assert directives(script) == {**DEFAULT_DIRECTIVES, **expect["directives"]}
    assert_sbatch_reads(script, tmp_path / "sbatch", {**DEFAULT_DIRECTIVES, **expect["directives"]})
    store = os.path.realpath(expect["store"])
    record = dry_run(script, tmp_path / "job")
    assert not any(p.name == CANARY and p.is_file() for p in tmp_path.rglob("*")), "the value ran as a command"
    assert record == [
        os.fsencode(v)
        for v in (os.path.realpath(cwd), str(ROOT), "sweep", "--scheduler", "slurm", "--store", store, *expect["rest"])
    ]
    assert os.path.isfile(os.path.join(os.path.dirname(store), f"slurm-{JOB_ID}.out"))  # the job's output file


@needs("sbatch")
def test_sbatch_reads_every_option_as_written(tmp_path, monkeypatch):
    """Slurm's own sbatch, given the script, reads each option with the value given (names at their longest)."""
    monkeypatch.chdir(tmp_path)
    name = "N" + "a._-9" * 25 + "xx"  # 128 characters
    proc = bench_in_process(
        "slurm-script",
        "--nodes",
        3,
        "--gpus-per-node",
        4,
        "--cpus-per-worker",
        6,
        "--exclusive",
        "--time",
        "1-02:03",
        "--partition",
        "gpu.a_b-c",
        "--account",
        name,
        "--job-name",
        "job.1",
        "--store",
        tmp_path / "s" / "b.sqlite",
    )
    assert proc.returncode == 0, proc.stderr
    expected = {
        **DEFAULT_DIRECTIVES,
        "nodes": "3",
        "ntasks-per-node": "4",
        "cpus-per-task": "6",
        "exclusive": "",
        "mem": "0",
        "gpus-per-node": "4",
        "time": "1-02:03",
        "partition": "gpu.a_b-c",
        "account": name,
        "job-name": "job.1",
    }
    assert len(name) == 128 and directives(proc.stdout) == expected
    assert_sbatch_reads(proc.stdout, tmp_path / "sbatch", expected)
    assert sbatch_reads(proc.stdout, tmp_path / "again")["time"] == "1-02:03:00"


# ---------------------------------------------------------------- the quoting itself
def test_every_byte_and_hostile_value_reaches_bash_as_one_word(tmp_path):
    values = [
        *hostile(tmp_path / CANARY),
        "".join(map(chr, range(1, 128))),
        os.fsdecode(bytes(range(1, 256))),
        *(os.fsdecode(bytes([b])) for b in range(1, 256)),
    ]
    words = [shell_word(v) for v in values]
    assert all(w.isascii() and "\n" not in w and "\r" not in w for w in words)
    proc = subprocess.run(["bash", "-c", "printf '%s\\0' " + " ".join(words)], capture_output=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(b"\0")[:-1] == [os.fsencode(v) for v in values]
    assert not (tmp_path / CANARY).exists()
    with pytest.raises(UsageError, match="NUL"):
        shell_word("a\0b")


# ---------------------------------------------------------------- where the job runs, and what writing it creates
def test_the_job_runs_where_the_script_was_written_with_this_checkout_importable(tmp_path, monkeypatch):
    """A relative workload file means the file of the folder slurm-script ran in; bench and workloads come from this
    checkout by the PYTHONPATH the script sets alone (no installed package: python -S)."""
    work = tmp_path / "project"
    (work / "examples").mkdir(parents=True)
    (work / "examples" / "mine.py").write_text("")
    monkeypatch.chdir(work)
    proc = bench_in_process(
        "slurm-script",
        "--store",
        tmp_path / "s" / "b.sqlite",
        "--",
        "--workload",
        "examples/mine.py:W",
        "--data-dir",
        "data",
    )
    assert proc.returncode == 0, proc.stderr
    folder, pythonpath, *argv = dry_run(proc.stdout, tmp_path / "job")
    assert Path(os.fsdecode(folder)) == work.resolve()
    assert argv[-4:] == [b"--workload", b"examples/mine.py:W", b"--data-dir", b"data"]
    assert (Path(os.fsdecode(folder)) / "examples" / "mine.py").is_file()  # the job finds the workload's file
    assert os.fsdecode(pythonpath).split(os.pathsep)[0] == str(ROOT)
    imported = subprocess.run(
        [sys.executable, "-S", "-c", "import bench, workloads; print(bench.__file__); print(workloads.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.fsdecode(pythonpath)},
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == [str(ROOT / "bench" / "__init__.py"), str(ROOT / "workloads" / "__init__.py")]


def test_writing_the_script_to_stdout_creates_nothing(tmp_path):
    """As a user runs it, in an empty folder, with the default store (results/bench.sqlite there): the script is
    printed and the folder stays empty; the job makes results/ when it runs."""
    env = {k: v for k, v in os.environ.items() if k != "BENCH_STORE"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "slurm-script", "--", "--workload", "mnist_mlp"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**env, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash\n") and os.listdir(tmp_path) == []
    assert dry_run(proc.stdout, tmp_path / "job")[0] == os.fsencode(tmp_path.resolve())
    assert (tmp_path / "results" / f"slurm-{JOB_ID}.out").is_file()


def test_a_script_for_a_missing_folder_is_refused_and_nothing_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = assert_one_line_error(
        bench_in_process(
            "slurm-script", "--store", tmp_path / "new" / "b.sqlite", "--output", tmp_path / "new" / "job.sh"
        ),
        "its folder does not exist",
    )
    assert "--output" in line and os.listdir(tmp_path) == []


def test_the_help_of_the_jobs_command_is_not_a_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(bench_in_process("slurm-script", "--verb", "run", "--", "--help"), "help of bench run")
    assert os.listdir(tmp_path) == []
