"""The cores' lock folder is shared by every user of the machine (bench.harness.cores), so another local user must not
be able to use it against a bench run: no symbolic link followed, no file made world-writable that bench did not just
make, no id read from a claim used as a path, no forged claim that blocks, no FIFO that hangs. Each probe plants what
a second user could plant, as that user (uid 65534 through setpriv), then runs bench as root."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from bench.core.errors import CoresInUse
from bench.harness import cores
from bench.harness.cores import CoreClaim, LockFolderRefused, Sharing, open_folder
from conftest import ROOT, assert_untouched, bench_in_process

OTHER_UID = 65534  # nobody


def _interpreter_for_another_user() -> str | None:
    """A Python the second user may run (this one may sit in root's home, which nobody else may enter)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(
            ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", python, "-c", "import fcntl"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return python
    return None


OTHER_PYTHON = _interpreter_for_another_user()
pytestmark = pytest.mark.skipif(
    OTHER_PYTHON is None,
    reason="needs root, setpriv (util-linux) and a Python that uid 65534 may run, to act as a second local user",
)


def as_other_user(code: str, *args, background=False, env=None):
    """Run Python code as the second user (PYTHONPATH: this checkout, which it may read)."""
    command = [
        "setpriv",
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_UID}",
        "--clear-groups",
        OTHER_PYTHON,
        "-c",
        code,
        *map(str, args),
    ]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **(env or {})}
    if background:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        return proc
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def claim(folder, run_id="root-run", resources=("cpu0", "cpu1"), **rule):
    os.environ[cores.LOCK_DIR_VARIABLE] = str(folder)
    return CoreClaim(run_id, "a root run", None, list(resources), Sharing(**{"wait_s": 0, **rule}))


@pytest.fixture(autouse=True)
def _restore_lock_dir():
    before = os.environ.get(cores.LOCK_DIR_VARIABLE)
    yield
    if before is None:
        os.environ.pop(cores.LOCK_DIR_VARIABLE, None)
    else:
        os.environ[cores.LOCK_DIR_VARIABLE] = before


def test_a_folder_another_user_made_first_is_refused_and_its_planted_link_never_followed(shared_tmp, secret):
    locks = shared_tmp / "bench-locks"
    as_other_user(
        "import os, sys; os.mkdir(sys.argv[1], 0o755); os.symlink(sys.argv[2], sys.argv[1] + '/registry.lock')",
        locks,
        secret,
    )
    with pytest.raises(LockFolderRefused) as refused:
        with claim(locks):
            pass
    said = str(refused.value)
    assert "\n" not in said and f"{locks} belongs to" in said and "uid 65534" in said and "install -d -m 1777" in said
    assert_untouched(secret)
    # as a user meets it: one line, exit 2, nothing run
    os.environ[cores.LOCK_DIR_VARIABLE] = str(locks)
    done = bench_in_process("run", "--backend", "single", "--nproc", "1", "--store", shared_tmp / "s.sqlite")
    last = done.stderr.strip().splitlines()[-1]
    assert (
        done.returncode == 2 and last.startswith("bench run: error: the cores' lock folder") and "belongs to" in last
    ), done.stderr
    assert not (shared_tmp / "s.sqlite").exists()
    assert_untouched(secret)


def test_a_folder_others_may_write_that_is_not_sticky_is_refused(shared_tmp):
    locks = shared_tmp / "open"
    locks.mkdir()
    os.chmod(locks, 0o777)
    with pytest.raises(LockFolderRefused, match="mode 777.* not sticky"):
        with claim(locks):
            pass
    link = shared_tmp / "link"
    link.symlink_to(shared_tmp)
    with pytest.raises(LockFolderRefused, match="symbolic link"):
        with claim(link):
            pass


def test_a_lock_folder_past_another_users_link_is_neither_made_nor_used_there(shared_tmp, tmp_path):
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    as_other_user("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", shared_tmp / "elsewhere", victim)
    with pytest.raises(LockFolderRefused) as refused:
        with claim(shared_tmp / "elsewhere" / "bench-locks"):
            pass
    said = str(refused.value)
    assert "\n" not in said and "lies past a part another user chose" in said and "symbolic link of nobody" in said
    assert list(victim.iterdir()) == []


def test_a_made_folder_is_sticky_and_shared_and_an_existing_one_keeps_its_mode(shared_tmp):
    locks = shared_tmp / "made"
    with claim(locks):
        assert stat.S_IMODE(locks.stat().st_mode) == 0o1777
        assert stat.S_IMODE((locks / "root-run.claim").stat().st_mode) == 0o644
        assert stat.S_IMODE((locks / "root-run.shared").stat().st_mode) == 0o622
        assert stat.S_IMODE((locks / "registry.lock").stat().st_mode) == 0o644
    private = shared_tmp / "private"
    private.mkdir(mode=0o700)
    with claim(private):
        pass
    assert stat.S_IMODE(private.stat().st_mode) == 0o700  # bench never opens up a folder it did not make


def test_links_and_files_planted_in_a_shared_folder_are_never_followed_nor_opened_up(shared_tmp, secret):
    locks = shared_tmp / "bench-locks"
    os.close(open_folder(locks))  # made by root, as on a GPU node
    as_other_user("import os, sys; os.symlink(sys.argv[2], sys.argv[1] + '/registry.lock')", locks, secret)
    with pytest.raises(LockFolderRefused, match="registry.lock that bench cannot use"):
        with claim(locks):
            pass
    assert_untouched(secret)
    os.unlink(locks / "registry.lock")
    # a link planted under the name of the run's own claim: the run is refused, the link not followed
    as_other_user("import os, sys; os.symlink(sys.argv[2], sys.argv[1] + '/next-run.claim')", locks, secret)
    with pytest.raises(LockFolderRefused, match="already holds a file named next-run.claim"):
        with claim(locks, run_id="next-run"):
            pass
    assert_untouched(secret)
    # links, a FIFO and a hard-to-read file under claim names of their own: passed over, nothing hangs
    as_other_user(
        "import os, sys; d = sys.argv[1]; os.symlink(sys.argv[2], d + '/linked.claim'); "
        "os.mkfifo(d + '/fifo.claim'); os.symlink(sys.argv[2], d + '/linked.shared')",
        locks,
        secret,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bench.harness.cores import CoreClaim, Sharing\n"
            "with CoreClaim('third-run', 'x', None, ['cpu0'], Sharing(wait_s=0)): pass",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), cores.LOCK_DIR_VARIABLE: str(locks)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert_untouched(secret)


FORGER = """
import fcntl, json, os, sys, time
folder, name, run_id = sys.argv[1:4]
fd = os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o644)
claim = {"run_id": run_id, "label": "forged\\x1b[2J\\nsecond line", "store": None, "pid": int(sys.argv[4]),
         "resources": ["cpu0", "cpu1"], "since": 0, "state": "running", "seen": []}
os.write(fd, json.dumps(claim).encode())
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


def test_forged_claims_neither_block_nor_name_files(shared_tmp):
    locks = shared_tmp / "bench-locks"
    os.close(open_folder(locks))
    before = sorted(p.name for p in shared_tmp.iterdir())
    forgers = [
        # its run id is a path out of the folder: never a file name
        as_other_user(FORGER, locks, "evil.claim", "../../escaped", 1, background=True),
        # a live process, but not bench's (a sleeping Python of the second user's; pid 1 is not even theirs)
        as_other_user(FORGER, locks, "fake.claim", "fake", 1, background=True),
    ]
    sleeper = subprocess.Popen(
        ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "sleep", "120"]
    )
    forgers.append(as_other_user(FORGER, locks, "sleeper.claim", "sleeper", sleeper.pid, background=True))
    try:
        started = time.monotonic()
        with claim(locks, run_id="not-blocked") as mine:  # wait_s 0: any claim that blocked would refuse it
            assert mine.finish() == []
        with claim(locks, run_id="shares", allow=True) as sharer:
            assert sharer.seen == [] and sharer.finish() == []
        assert time.monotonic() - started < 10
    finally:
        for proc in forgers + [sleeper]:
            proc.kill()
            proc.wait()
    assert sorted(p.name for p in shared_tmp.iterdir()) == before  # nothing made outside the folder
    assert not (locks / "escaped.shared").exists() and not (locks / "fake.shared").exists()


HOLDER = """
import json, sys
from bench.harness.cores import CoreClaim
with CoreClaim(sys.argv[1], "the second user's run", None, ["cpu0", "cpu1"]) as claim:
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(claim.finish()), flush=True)
"""


def test_another_users_live_bench_run_still_blocks_and_is_marked_across_users(shared_tmp):
    locks = shared_tmp / "bench-locks"
    os.close(open_folder(locks))
    holder = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={OTHER_UID}",
            f"--regid={OTHER_UID}",
            "--clear-groups",
            OTHER_PYTHON,
            "-c",
            HOLDER,
            "their-run",
        ],
        env={"PYTHONPATH": str(ROOT), cores.LOCK_DIR_VARIABLE: str(locks)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(CoresInUse, match="in use by run their-run"):
            with claim(locks, run_id="waits", wait_s=0.3):
                pass
        with claim(locks, run_id="alongside", allow=True) as sharer:
            assert [c["run_id"] for c in sharer.seen] == ["their-run"]
            holder.stdin.write("\n")
            holder.stdin.flush()
            theirs = json.loads(holder.stdout.readline())
        assert [r["run_id"] for r in theirs] == ["alongside"]  # marked in the file the second user made
    finally:
        holder.kill()
        holder.wait()


def test_a_registry_held_for_ever_is_refused_in_one_line(shared_tmp, monkeypatch):
    locks = shared_tmp / "bench-locks"
    os.close(open_folder(locks))
    squatter = as_other_user(
        "import fcntl, os, sys, time\nfd = os.open(sys.argv[1] + '/registry.lock', "
        "os.O_RDONLY | os.O_CREAT, 0o644)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('ready', "
        "flush=True)\ntime.sleep(120)",
        locks,
        background=True,
    )
    monkeypatch.setattr(cores, "REGISTRY_WAIT_S", 0.5)
    try:
        with pytest.raises(CoresInUse) as refused:
            with claim(locks):
                pass
        said = str(refused.value)
        assert "\n" not in said and "uid 65534" in said and "has been locked for 0.5 s" in said
    finally:
        squatter.send_signal(signal.SIGKILL)
        squatter.wait()
    assert not (locks / "root-run.claim").exists()


def test_what_a_claim_file_says_is_checked_before_it_is_shown():
    assert cores.valid_run_id("20261202-160549-a1b2c3") and cores.valid_run_id("selfcheck-20261202-160549-a1b2c3")
    for bad in ("../x", "a/b", "..", ".hidden", "x..y", "", "a\n", "a" * 200, None, 7):
        assert not cores.valid_run_id(bad)
    assert cores.printable("forged\x1b[2J\nsecond") == "forged\\x1b[2J\\nsecond"
    assert cores.names_bench(["/venv/bin/python", "/venv/bin/bench", "run"])
    assert cores.names_bench(["python3", "-m", "bench.harness.lifeline", "tag", "1"])
    assert not cores.names_bench(["sleep", "120"]) and not cores.names_bench(["python3", "-m", "benchmark"])
