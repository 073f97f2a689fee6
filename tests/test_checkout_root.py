"""The checkout (bench.core.environment.PROJECT_ROOT: the folder that holds the bench and workloads packages) is what a
process started on another host runs in and imports bench from. `ssh` is replaced by a stand-in that runs the
remote command line with bash here, from a home folder of its own, as sshd runs it through the login shell; the
command is `python -S`, which sees no installed package, so bench imports only by the folder and PYTHONPATH given."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from bench.cluster import fanout, hosts
from bench.core.environment import PROJECT_ROOT
from conftest import ROOT

WHERE = "import os, sys, bench; print(os.getcwd()); print(bench.__file__); print(os.environ.get('PYTHONPATH'))"


def test_the_project_root_is_the_checkout():
    assert PROJECT_ROOT == ROOT
    assert (PROJECT_ROOT / "bench" / "__init__.py").is_file() and (PROJECT_ROOT / "workloads" / "__init__.py").is_file()


def stand_in_ssh(tmp_path, monkeypatch) -> Path:
    """`ssh [OPTIONS] HOST LINE` runs LINE with bash in tmp_path/home; the remote line is also kept in tmp_path/line."""
    folder, home = tmp_path / "bin", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    ssh = folder / "ssh"
    ssh.write_text(
        "#!/bin/bash\n"
        f'printf "%s" "${{@: -1}}" > {shlex.quote(str(tmp_path / "line"))}\n'
        f'cd {shlex.quote(str(home))} && exec env -u PYTHONPATH bash -c "${{@: -1}}"\n'
    )
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return home


def test_a_check_on_another_host_runs_in_the_checkout_with_it_importable(tmp_path, monkeypatch):
    stand_in_ssh(tmp_path, monkeypatch)
    proc = hosts.run_on("h1", [sys.executable, "-S", "-c", WHERE])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(ROOT), str(ROOT / "bench" / "__init__.py"), str(ROOT)]


def test_a_launcher_on_another_host_starts_in_the_checkout(tmp_path, monkeypatch):
    """fanout carries the environment it is given (a run's, PYTHONPATH included) and starts in the checkout."""
    stand_in_ssh(tmp_path, monkeypatch)
    out = tmp_path / "where.txt"
    argv = [sys.executable, "-S", "-c", f"import sys; sys.stdout = open({str(out)!r}, 'w'); {WHERE}"]
    proc = fanout.start({"host": "h1", "argv": argv}, {"PYTHONPATH": str(ROOT)})
    assert proc.wait(timeout=60) == 0
    assert out.read_text().splitlines() == [str(ROOT), str(ROOT / "bench" / "__init__.py"), str(ROOT)]
    assert (tmp_path / "line").read_text().startswith(f"cd {shlex.quote(str(ROOT))} && exec env ")
