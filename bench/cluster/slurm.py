"""Runs inside a Slurm allocation: its nodes as the run's hosts, srun as the way processes reach them, the job's
ending (scancel, its time limit) as the run's, and the sbatch script `bench slurm-script` writes.

Inside an allocation (SLURM_JOB_ID set, or `--scheduler slurm`), the hosts are the allocation's nodes
(`scontrol show hostnames $SLURM_JOB_NODELIST`) with its tasks per node as their slots; each backend starts as
its users start it under Slurm: elastic and ps one torchrun agent per node through one `srun` (one task per
node, each running its node's part of the plan: `python -m bench.cluster.slurm task PLAN`), with the c10d rendezvous
on the first node; horovod `horovodrun -H` built from the allocation, run where the batch script runs (the
allocation's first node). The record keeps the job id, the node list and the launcher command.

scancel and the time limit reach bench as SIGTERM (the script asks for it before the limit: `--signal`); bench
then asks Slurm which it was: a cancelled job is `interrupted`, one at (or warned of) its limit `timeout`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from bench.core.dryrun import planning
from bench.core.environment import PROJECT_ROOT
from bench.core.errors import UsageError
from bench.core.hostlist import MAX_HOSTS, _host, too_many_hosts
from bench.core.inputs import shown

SCONTROL_TIMEOUT_S = 10
# the script asks Slurm for SIGTERM this long before the time limit, so that bench records the run as
# `timeout` and ends its processes before Slurm's SIGKILL
WARN_BEFORE_LIMIT_S = 45
# sbatch(1), --signal: "the signal may be sent up to 60 seconds earlier than specified" (slurmctld checks
# limits periodically): the warning can come at any moment from WARN + 60 s before the limit, even as the job
# starts when its limit is shorter than that
SIGNAL_EARLY_S = 60
TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
# `bench slurm-script`'s defaults: the 2-node job the suite's tests submit, a half-hour limit
SCRIPT_DEFAULTS = dict(nodes=2, tasks_per_node=1, cpus_per_worker=1, time_limit="30", job_name="bench", verb="sweep")


def in_allocation(env=None) -> bool:
    return bool((env or os.environ).get("SLURM_JOB_ID"))


def tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE ("2(x3),1") as a count per node, in node order."""
    return per_node(text, "SLURM_TASKS_PER_NODE")


def per_node(text: str, variable: str) -> list[int]:
    """A count per node in Slurm's N(xM),... form (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE), in node order."""
    counts: list[int] = []
    for item in text.split(","):
        match = TASKS.match(item.strip())
        if not match:
            raise UsageError(f"{variable}={shown(text)} is not Slurm's N(xM),... form")
        times = int(match.group(2) or 1)
        if len(counts) + times > MAX_HOSTS:  # before the list is made: "2(x999999999)" would fill the memory
            raise too_many_hosts(f"{variable}={shown(text)}")
        counts += [int(match.group(1))] * times
    return counts


# what a plan shows for --cpus-per-task where the job's nodes are whole (--exclusive): the CPUs Slurm finds there
NODE_CPUS = "NODE_CPUS"


def cpus_per_task(env=None) -> str | None:
    """srun's --cpus-per-task for the one task per node that starts a node's workers: every CPU the allocation holds
    on a node (the fewest over its nodes, SLURM_JOB_CPUS_PER_NODE; SLURM_CPUS_ON_NODE, this node's, where Slurm sets
    only that). srun since Slurm 22.05 no longer takes --cpus-per-task from the job (SLURM_CPUS_PER_TASK), so a task
    of its own gets one CPU, and one core where the site binds tasks to cores: the agent and all its workers on it.
    NODE_CPUS in a plan that cannot know it; None where Slurm says nothing (srun's default then)."""
    env = os.environ if env is None else env
    text = (env.get("SLURM_JOB_CPUS_PER_NODE") or "").strip()
    if text:
        return str(min(per_node(text, "SLURM_JOB_CPUS_PER_NODE")))
    on_node = (env.get("SLURM_CPUS_ON_NODE") or "").strip()
    if on_node.isascii() and on_node.isdigit() and int(on_node) > 0:
        return on_node
    return NODE_CPUS if planning() else None


GPUS = re.compile(r"^(?:[A-Za-z0-9_.-]+:)?(\d+)$")  # "4" or "a100:4", as Slurm writes a per-node GPU count


def gpus_per_node(env) -> int | None:
    """The GPUs the allocation gives each node, from what Slurm sets in a job that asked for them: SLURM_GPUS_ON_NODE
    (this node's), SLURM_GPUS_PER_NODE (--gpus-per-node, "4" or "a100:4"), or a gres of gpu in SLURM_JOB_GRES or
    SLURM_GRES ("gpu:4", "gpu:a100:4"); None when it gave none."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        match = GPUS.match((env.get(name) or "").strip())
        if match:
            return int(match.group(1)) or None
    for name in ("SLURM_JOB_GRES", "SLURM_GRES"):
        for item in (env.get(name) or "").split(","):
            kind, _, count = item.strip().partition(":")
            match = GPUS.match(count)
            if kind == "gpu" and match:
                return int(match.group(1)) or None
    return None


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed node list ("node[01-03,07],login1", "r[1-2]n[1-4]") as its names, for a dry run, which does
    not ask scontrol; a form it does not know is refused in one line."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):  # the commas outside brackets separate the names
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise UsageError(f"SLURM_JOB_NODELIST={shown(text)}: its brackets do not pair")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise UsageError(f"SLURM_JOB_NODELIST={shown(text)}: its brackets do not pair")
    names: list[str] = []
    for item in items:
        if item:
            names += _expand_name(item, text)
            if len(names) > MAX_HOSTS:
                raise too_many_hosts(f"SLURM_JOB_NODELIST={shown(text)}")
    return names


NODE_NUMBER = re.compile(r"[0-9]{1,18}")  # ASCII digits, few enough for int() (str.isdigit takes "²" too)


def _expand_name(item: str, text: str) -> list[str]:
    """One name's bracket groups expanded left to right (the first varies slowest), counted before each is made:
    "n[1-999999999]" would fill the memory, and a group per level of recursion would overflow the stack."""
    names, at = [""], 0
    for group in re.finditer(r"\[([^\]]+)\]", item):
        numbers: list[tuple[int, int, int]] = []  # (first, last, width)
        count = 0
        for part in group.group(1).split(","):
            low, _, high = part.partition("-")
            if not NODE_NUMBER.fullmatch(low) or (high and not NODE_NUMBER.fullmatch(high)):
                raise UsageError(f"SLURM_JOB_NODELIST={shown(text)}: {shown(part)} is not a number or a range")
            numbers.append((int(low), int(high or low), len(low)))
            count += max(0, int(high or low) - int(low) + 1)
        if len(names) * count > MAX_HOSTS:
            raise too_many_hosts(f"SLURM_JOB_NODELIST={shown(text)}")
        head = item[at : group.start()]
        parts = [f"{head}{i:0{width}d}" for first, last, width in numbers for i in range(first, last + 1)]
        names = [name + part for name in names for part in parts]
        at = group.end()
    return [name + item[at:] for name in names]


def _scontrol(*args: str) -> str:
    try:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"scontrol {' '.join(args)} failed ({exc}); is Slurm's client installed here?") from None
    if proc.returncode != 0:
        raise UsageError(f"scontrol {' '.join(args)} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout


def of_allocation(scheduler: dict | None) -> bool:
    """Whether a spec's scheduler is a Slurm allocation (allocation's "name"), not a Kubeflow job's."""
    return bool(scheduler) and scheduler.get("name") == "slurm"


def allocation(env=None) -> dict:
    """The allocation bench runs in: {"name": "slurm", "job_id", "nodelist", "hosts": [{"name", "slots"}],
    "gpus_per_node", "cpus_per_task"}."""
    env = env or os.environ
    if not in_allocation(env):
        raise UsageError(
            "--scheduler slurm: not inside a Slurm allocation (no SLURM_JOB_ID); submit the script "
            "`bench slurm-script` writes, or run inside `salloc`"
        )
    variable = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    nodelist = env.get(variable)
    if not nodelist:
        raise UsageError("inside a Slurm job without SLURM_JOB_NODELIST; run bench from the batch script or salloc")
    # `--`: a list that starts with "-" is scontrol's to expand, not an option of its own
    nodes = expand_nodelist(nodelist) if planning() else _scontrol("show", "hostnames", "--", nodelist).split()
    tasks = env.get("SLURM_TASKS_PER_NODE")
    counts = tasks_per_node(tasks) if tasks else [1] * len(nodes)
    if len(counts) != len(nodes):
        raise UsageError(f"SLURM_TASKS_PER_NODE={tasks} names {len(counts)} nodes, the node list {len(nodes)}")
    # each node checked as a --hosts name is: the names reach ssh's argv and the hosts file horovodrun reads
    hosts = [_host(node, str(n), f"{variable}={shown(nodelist)}") for node, n in zip(nodes, counts)]
    if not planning():
        remember_limit(env)
    return {
        "name": "slurm",
        "job_id": env["SLURM_JOB_ID"],
        "nodelist": nodelist,
        "hosts": [host.to_dict() for host in hosts],
        "gpus_per_node": gpus_per_node(env),
        # what srun_command gives each node's task, read now so that a value Slurm did not write is refused first
        "cpus_per_task": cpus_per_task(env),
    }


# the job's start and time limit as Slurm gave them when bench read its allocation: how a SIGTERM is judged when
# scontrol cannot answer at that moment
_known_limit: dict[str, tuple[str, str]] = {}


def _job_fields(job: str, attempts: int = 3) -> dict:
    """`scontrol show job -o JOB` as a dict; tried `attempts` times (a busy slurmctld); UsageError if never."""
    import time

    for _ in range(attempts - 1):
        try:
            return _fields(_scontrol("show", "job", "-o", job))
        except UsageError:
            time.sleep(1.0)
    return _fields(_scontrol("show", "job", "-o", job))  # the last try: its error is the caller's


def _fields(text: str) -> dict:
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def remember_limit(env=None) -> None:
    env = env or os.environ
    try:
        fields = _job_fields(env["SLURM_JOB_ID"], attempts=1)
    except (UsageError, KeyError):
        return
    if "StartTime" in fields and "TimeLimit" in fields:
        _known_limit[env["SLURM_JOB_ID"]] = (fields["StartTime"], fields["TimeLimit"])


def srun_command(steps: list[tuple[str, list[str]]], env=None) -> list[str]:
    """One srun step with a task on each node of `steps` ((node, argv) pairs), each running its own argv with every
    CPU the allocation holds on the node (cpus_per_task): the task starts all of the node's workers."""
    nodes = [node for node, _ in steps]
    plan = json.dumps({node: argv for node, argv in steps})
    cpus = cpus_per_task(env)
    return [
        "srun",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        *([f"--cpus-per-task={cpus}"] if cpus else []),
        "--kill-on-bad-exit=0",
        "--overlap",
        "--export=ALL",
        sys.executable,
        "-m",
        "bench.cluster.slurm",
        "task",
        plan,
    ]


def srun_steps(command: list[str]) -> list[tuple[str, list[str]]] | None:
    """The (node, argv) steps of a command srun_command made, or None for any other command: what a dry run shows
    per node."""
    if not command or command[0] != "srun" or command[-2:-1] != ["task"]:
        return None
    return list(json.loads(command[-1]).items())


def run_task(plan_text: str) -> int:
    """The srun task on one node: exec this node's argv from the plan (by SLURMD_NODENAME)."""
    plan = json.loads(plan_text)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if node not in plan:
        print(f"bench.cluster.slurm: node {node} has no part in the plan ({', '.join(plan)})", file=sys.stderr)
        return 2
    argv = plan[node]
    os.execvp(argv[0], argv)
    return 127  # not reached


def limit_seconds(text: str) -> float:
    """Slurm's printed TimeLimit ([D-]HH:MM:SS, MM:SS, UNLIMITED) in seconds."""
    if text in ("UNLIMITED", "INFINITE"):
        return float("inf")
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def requested_seconds(text: str) -> float:
    """sbatch's --time as seconds: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS,
    DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (sbatch(1); not scontrol's printed form, limit_seconds)."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if days:  # DAYS-HOURS[:MINUTES[:SECONDS]]: the clock fills from the hours
        return limit_seconds(f"{days}-{':'.join((parts + ['0', '0'])[:3])}")
    if len(parts) == 1:  # MINUTES
        return int(parts[0]) * 60
    return limit_seconds(clock)  # MINUTES:SECONDS and HOURS:MINUTES:SECONDS read as scontrol prints them


def early_warning_note(time_limit: str) -> str | None:
    """What to tell the user of a limit so short that Slurm's warning may come as the job starts."""
    if requested_seconds(time_limit) > WARN_BEFORE_LIMIT_S + SIGNAL_EARLY_S:
        return None
    return (
        f"--time {time_limit}: Slurm sends its limit warning {WARN_BEFORE_LIMIT_S} s before the limit, or up "
        f"to {SIGNAL_EARLY_S} s earlier, so this job may get it as it starts (its run stored `timeout`); "
        "give a few minutes more than the work needs"
    )


# How scontrol shows a job that still holds its nodes: its base state, or a flag shown in its place. SIGNALING is the
# flag Slurm sets while it delivers a signal (the script's limit warning among them), so bench, asking at once, often
# sees it rather than RUNNING.
RUNNING_STATES = ("RUNNING", "COMPLETING", "SIGNALING", "CONFIGURING", "RESIZING")


# what job_ending last said of each job in this process: bench's closing line says it again without asking again
_judged: dict[str, tuple[str, str] | None] = {}


def job_ending(env=None, now: float | None = None) -> tuple[str, str] | None:
    """After bench got SIGTERM inside a Slurm job: ("timeout" | "interrupted", why), from the job's state and how
    close its time limit is (the script's warning comes WARN_BEFORE_LIMIT_S before it, or up to SIGNAL_EARLY_S
    earlier); None outside a job or when Slurm cannot say."""
    env = env or os.environ
    if not in_allocation(env):
        return None
    job = env["SLURM_JOB_ID"]
    _judged[job] = _judge(job, now)
    return _judged[job]


def last_ending(env=None) -> tuple[str, str] | None:
    """What job_ending last said in this process of the job bench runs in, or its answer now if it said nothing."""
    env = env or os.environ
    job = env.get("SLURM_JOB_ID")
    return _judged[job] if job in _judged else job_ending(env)


def signal_judged() -> bool:
    """Whether this process got a signal inside a Slurm job (job_ending runs only then): whatever the run it ended
    was stored as, the job is ending and no further run should start."""
    return bool(_judged)


def _judge(job: str, now: float | None) -> tuple[str, str] | None:
    import time

    try:
        fields = _job_fields(job)
    except UsageError as exc:
        if job not in _known_limit:
            print(f"bench: cannot tell how Slurm job {job} is ending: {exc}", file=sys.stderr, flush=True)
            return None
        # Slurm cannot answer now: judged by the limit read at the start (a cancel then reads as interrupted
        # only when far from the limit)
        print(f"bench: Slurm job {job}: {exc}; judged by its time limit", file=sys.stderr, flush=True)
        fields = dict(zip(("StartTime", "TimeLimit"), _known_limit[job]), JobState="RUNNING")
    state, limit = fields.get("JobState", ""), fields.get("TimeLimit", "?")
    try:  # from StartTime and TimeLimit: a cancel rewrites EndTime to its own moment
        started = time.mktime(time.strptime(fields.get("StartTime", ""), "%Y-%m-%dT%H:%M:%S"))
        left = started + limit_seconds(limit) - (now or time.time())
    except ValueError:
        left = None
    cancelled = "interrupted", f"the Slurm job {job} was cancelled (scancel)"
    timed_out = "timeout", f"the Slurm job {job} reached its time limit ({limit})"
    if state.startswith("CANCELLED"):  # (its EndTime is then the moment of the cancel)
        return cancelled
    if state.startswith("TIMEOUT"):
        return timed_out
    if state.startswith(RUNNING_STATES):  # the script's warning, or a signal Slurm has not judged yet
        # (+5 s: the scontrol call, and StartTime's whole seconds)
        return timed_out if left is not None and left <= WARN_BEFORE_LIMIT_S + SIGNAL_EARLY_S + 5 else cancelled
    print(
        f"bench: Slurm job {job} is {state or 'in no state scontrol shows'}: cannot tell scancel from its time limit",
        file=sys.stderr,
        flush=True,
    )
    return None


# ---------------------------------------------------------------- the batch script
# What an `#SBATCH --OPTION=VALUE` line may carry. sbatch reads a directive line as words: it splits at white space,
# takes quotes and backslashes as quoting, ends the line at an unquoted '#', and a line that names `hetjob` (or its
# older name `packjob`) anywhere starts the next component of a heterogeneous job; a directive cannot span lines.
# So a value is written bare, and only one made of characters none of that touches.
DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@,-]*")
HETJOB_WORDS = ("hetjob", "packjob")
PRINTABLE_ASCII = re.compile(r"[ -~]*")
# the rest of the job's output file's name, beside the store: its job id (said plainly if run outside a job)
JOB_OUTPUT_SUFFIX = '"${SLURM_JOB_ID:?submit this script with sbatch}".out'


def directive_problem(value: str) -> str | None:
    """Why `value` cannot be written as an #SBATCH option's value, or None when it can."""
    if not DIRECTIVE_VALUE.fullmatch(value):
        return "only letters, digits and . _ : @ , - are written on an #SBATCH line, starting with a letter or digit"
    word = next((w for w in HETJOB_WORDS if w in value.lower()), None)
    if word:
        return f"sbatch reads {word!r} on an #SBATCH line as the start of another job (a heterogeneous job's part)"
    return None


def directive(option: str, value) -> str:
    text = str(value)
    problem = directive_problem(text)
    if problem:
        raise UsageError(f"--{option} {shown(text)}: {problem}")
    return f"#SBATCH --{option}={text}"


def shell_word(text: str) -> str:
    """`text` as one word of a bash line, kept on that line: shlex.quote where it is printable ASCII, else bash's
    $'...' with every other byte as \\xHH (a path's bytes as the file system holds them, undecodable ones included).
    No value can then start a line of its own (which sbatch could read as a directive), and the script is ASCII."""
    if "\0" in text:
        raise UsageError(f"{shown(text)}: a NUL character cannot be passed to a command")
    if PRINTABLE_ASCII.fullmatch(text):
        return shlex.quote(text)
    out = []
    for byte in os.fsencode(text):
        char = chr(byte)
        out.append("\\" + char if char in "\\'" else char if 0x20 <= byte < 0x7F else f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


WORLD_SIZE_FLAGS = ("--nproc", "--gpus", "--max-nproc", "--max-gpus", "--world-sizes")


def job_arguments(verb: str, bench_args: list[str], gpus_per_node: int | None) -> list[str]:
    """The arguments of the job's bench command after its verb: the given ones and, in a job that asks for GPUs and
    names no world size, the GPUs of each node (--gpus, a sweep's --max-gpus), so that the job runs GPU work."""
    names_a_size = any(a == f or a.startswith(f + "=") for a in bench_args for f in WORLD_SIZE_FLAGS)
    if not gpus_per_node or names_a_size:
        return list(bench_args)
    return [*bench_args, "--max-gpus" if verb == "sweep" else "--gpus", str(gpus_per_node)]


def workers_per_node(tasks_per_node: int | None, gpus_per_node: int | None) -> int:
    """The job's tasks per node, one a worker: --nproc-per-node (SCRIPT_DEFAULTS's where not given), or with GPUs one a
    GPU, as the job runs them (a --nproc-per-node that says otherwise is refused)."""
    if gpus_per_node and tasks_per_node not in (None, gpus_per_node):
        raise UsageError(
            f"--nproc-per-node {tasks_per_node} with --gpus-per-node {gpus_per_node}: the job runs one worker per GPU, "
            f"{gpus_per_node} a node; drop --nproc-per-node"
        )
    return gpus_per_node or tasks_per_node or SCRIPT_DEFAULTS["tasks_per_node"]


def planned_allocation(
    nodes: int, tasks_per_node: int, gpus_per_node: int | None, cpus_per_task: int = 1, exclusive: bool = False
) -> dict[str, str]:
    """The variables Slurm sets in a job of this shape (its job id and node names stand in: Slurm gives them), for
    `bench slurm-script --dry-run`'s plan of the job's command. The CPUs of a node given whole (exclusive) are the
    node's, not known here: left out, the plan shows NODE_CPUS."""

    def each(count) -> str:
        return f"{count}(x{nodes})" if nodes > 1 else str(count)

    return {
        "SLURM_JOB_ID": "JOBID",
        "SLURM_JOB_NODELIST": f"node[1-{nodes}]" if nodes > 1 else "node1",
        "SLURM_TASKS_PER_NODE": each(tasks_per_node),
        **({} if exclusive else {"SLURM_JOB_CPUS_PER_NODE": each(tasks_per_node * cpus_per_task)}),
        **({"SLURM_GPUS_PER_NODE": str(gpus_per_node)} if gpus_per_node else {}),
    }


def script(
    *,
    nodes: int,
    tasks_per_node: int | None,
    time_limit: str,
    store: str,
    workdir: str,
    bench_args: list[str],
    gpus_per_node: int | None = None,
    cpus_per_worker: int = 1,
    exclusive: bool = False,
    partition: str | None = None,
    account: str | None = None,
    job_name: str = "bench",
    verb: str = "sweep",
) -> str:
    """A ready sbatch script: the allocation asked for, and one `bench VERB` inside it with --scheduler slurm and the
    store given (its records land there), run in `workdir` (where the user wrote the script: the job's arguments mean
    what they meant there) with this checkout importable and this environment activated. `store` and `workdir` are
    absolute, as the job's nodes see them. The job's output goes beside the store (slurm-JOBID.out), whose folder the
    job makes: nothing is made before it runs. Every value is written as its reader takes it: bare on the #SBATCH lines,
    and refused there unless it is of the few characters sbatch reads as they are (directive_problem); one quoted word
    of a bash line everywhere else (shell_word).

    Each node's workers get cores of their own: a task per worker (workers_per_node: with GPUs, one a GPU), each with
    `cpus_per_worker` CPUs, so that the node's share of the job holds them all, or with `exclusive` the whole nodes
    (every CPU and GPU, and all memory: --mem=0). bench starts a node's workers from one task (one srun task per node,
    or horovodrun in this script), which srun_command hands every CPU the job holds on the node."""
    if nodes < 1 or (tasks_per_node is not None and tasks_per_node < 1) or cpus_per_worker < 1:
        raise UsageError("--nodes, --nproc-per-node and --cpus-per-worker must be 1 or more")
    workers = workers_per_node(tasks_per_node, gpus_per_node)
    if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", time_limit):
        raise UsageError(f"--time {shown(time_limit)}: give Slurm's MINUTES, HH:MM:SS or D-HH:MM:SS")
    for what, path in (("--store", store), ("the job's folder", workdir)):
        if not os.path.isabs(path):
            raise UsageError(f"{what} {shown(path)}: the script needs it as an absolute path")
    lines = [
        "#!/bin/bash",
        directive("job-name", job_name),
        directive("nodes", nodes),
        directive("ntasks-per-node", workers),
        directive("cpus-per-task", cpus_per_worker),
        *(["#SBATCH --exclusive", directive("mem", 0)] if exclusive else []),
        directive("time", time_limit),
        # SIGTERM to bench (the batch shell, by exec) before the limit: it records `timeout` and ends its runs
        directive("signal", f"B:TERM@{WARN_BEFORE_LIMIT_S}"),
        # Slurm's own file (slurm-JOBID.out where sbatch ran) is the job's until the script's output goes beside
        # the store; appended to, so that where the two are one file neither writes over the other
        directive("open-mode", "append"),
    ]
    if gpus_per_node:
        lines.append(directive("gpus-per-node", gpus_per_node))
    if partition:
        lines.append(directive("partition", partition))
    if account:
        lines.append(directive("account", account))
    folder = os.path.dirname(store)
    lines += [
        "",
        "set -euo pipefail",
        f"mkdir -p -- {shell_word(folder)}",
        f"exec >>{shell_word(os.path.join(folder, 'slurm-'))}{JOB_OUTPUT_SUFFIX} 2>&1",
        f"cd -- {shell_word(workdir)}",
    ]
    activate = Path(sys.prefix) / "bin" / "activate"
    if activate.exists():
        lines.append(f"source {shell_word(str(activate))}")
    lines += [
        f"export PYTHONPATH={shell_word(str(PROJECT_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        "exec "
        + " ".join(
            shell_word(a)
            for a in [
                sys.executable,
                "-m",
                "bench",
                verb,
                "--scheduler",
                "slurm",
                "--store",
                store,
                *job_arguments(verb, bench_args, gpus_per_node),
            ]
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "task":
        return run_task(argv[1])
    print("usage: python -m bench.cluster.slurm task PLAN_JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
