"""The house's layout, read from the source: imports run down the layers only, and no module imports itself back.

Every `import` and `from ... import` of a bench module counts, at the top of a file or inside a function,
because a function-local import is still a dependency. A layer may import its own layer and the ones below.
A plug-in folder spans layers: a task's report view (`bench/tasks/<task>/report.py`) sits with the report and
its results (`bench/tasks/<task>/results.py`: gate figures, comparisons) with the results, each reached through the
registry by name (bench.core.registry.task_part).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.backends.base import Backend, CommSchedule, ElasticState, Launcher
from bench.core.registry import BACKEND_MODULES, TASK_PARTS, get_backend
from bench.rank import hooks
from bench.tasks.fault.scenarios import FAULT_FLAG, SCENARIOS

BENCH = Path(__file__).resolve().parent.parent / "bench"

# lowest first
LAYERS = [
    "core",
    "rank",
    "cluster",
    "backends",
    "harness",
    "tasks",
    "results",
    "projection",
    "report",
    "workflows",
    "testbed",
    "tools",
    "cli",
]
# The parts of a task (bench.core.registry.TASK_PARTS) that sit in a higher layer than the task; its rank program
# is the task's own (the rank entry reaches it through the registry, as the harness reaches the task).
VIEW_PARTS = ("results", "report")
HEAVY = (
    "torch",
    "horovod",
    "ray",
    "workloads",
    "numpy",
    "pandas",
    "matplotlib",
    "scipy",
    "jinja2",
    "tensorflow",
    "tf_keras",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(BENCH.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in BENCH.rglob("*.py")}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module == "bench":  # the package itself: its version and nothing else, which any layer may read
        return "core"
    if module == "bench.__main__":
        return "cli"
    if parts[1] == "tasks" and len(parts) >= 4 and parts[3] in VIEW_PARTS:
        return parts[3]  # a task's results and report views sit with the results and the report
    return parts[1]


def imports_of(path: Path, name: str, known: dict) -> list[tuple[str, int, bool]]:
    """(imported bench module, line, at top level) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("bench"):
                found.append((target, node.lineno, id(node) in top_level))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {name: set() for name in known}
    for name, path in known.items():
        for target, _, _ in imports_of(path, name, known):
            edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as a sorted list."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_view_part_is_a_layer_and_a_part():
    assert set(VIEW_PARTS) <= set(LAYERS) and set(VIEW_PARTS) <= set(TASK_PARTS)


def test_every_module_has_a_known_layer():
    unknown = sorted(m for m in modules() if layer_of(m) not in LAYERS)
    assert not unknown, f"modules outside the layers {LAYERS}: {unknown}"


def test_no_import_circle():
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_run_down_the_layers():
    """Importing `a.b.c` imports the packages `a.b` and `a` first: a module depends on its packages too (a task's
    report view on its task's `__init__`), so those count here (not as circles: a package's `__init__` may import
    its own modules, as the CLI's does)."""
    upward = []
    known = modules()
    for name, targets in graph().items():
        packages = {name.rsplit(".", k)[0] for k in range(1, name.count("."))} & set(known)
        for target in targets | packages:
            if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(name)):
                upward.append(f"{name} ({layer_of(name)}) -> {target} ({layer_of(target)})")
    assert not upward, "imports up the layers:\n" + "\n".join(sorted(upward))


def test_a_function_local_import_of_bench_keeps_a_heavy_dependency_out():
    """A bench module imported inside a function is one that loads torch, Horovod, Ray or the workloads, and the
    importing module runs in a process that must not load them (the CLI, the supervisor): a comment says so."""
    known = modules()
    heavy = {name for name, path in known.items() if _loads_heavy_at_import(path)}
    bad = []
    for name, path in known.items():
        lines = path.read_text().splitlines()
        for target, line, top in imports_of(path, name, known):
            if top:
                continue
            where = f"{path.relative_to(BENCH.parent)}:{line}"
            if not _loads_heavy(target, known, heavy):
                bad.append(f"{where}: {target} is light: import it at the top")
            elif "#" not in lines[line - 1] and not lines[line - 2].strip().startswith("#"):
                bad.append(f"{where}: say in a comment why {target} is imported here (what it keeps out)")
    assert not bad, "\n".join(bad)


def _loads_heavy_at_import(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        if any(n.split(".")[0] in HEAVY for n in names):
            return True
    return False


def _loads_heavy(target: str, known: dict, heavy: set, seen=None) -> bool:
    """Whether importing `target` loads a heavy dependency, through its own top-level imports."""
    seen = set() if seen is None else seen
    if target in heavy:
        return True
    if target in seen:
        return False
    seen.add(target)
    path = known[target]
    return any(_loads_heavy(t, known, heavy, seen) for t, _, top in imports_of(path, target, known) if top)


@pytest.mark.parametrize("layer", [name for name in LAYERS if name not in ("backends", "tasks")])
def test_every_layer_says_what_it_is_for(layer):
    doc = ast.get_docstring(ast.parse((BENCH / layer / "__init__.py").read_text()))
    assert doc and "import" in doc, f"bench/{layer}/__init__.py: a docstring saying what it holds and may import"


def test_nothing_outside_the_tasks_compares_a_runs_task_with_a_name():
    """Docs/architecture.md, "Two rules": what differs between kinds of run is a property of the task plug-in
    (Task.model_input, Task.measured, ...), never a test of `spec.task` against a task's name elsewhere."""
    found = [
        f"{path.relative_to(BENCH.parent)}:{n}"
        for name, path in modules().items()
        if layer_of(name) != "tasks"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""\.task\s*(==|!=)\s*["']|\.task\s+(not\s+)?in\s+\(["']""", line)
    ]
    assert not found, found


# ---------------------------------------------------------------- a backend is its folder
# Where a backend may be named outside its folder (bench/backends/<its folder>/; docs/architecture.md, "Adding a
# backend"): the registry (bench/core/registry.py: its line, and how the backends are compared), its bare loop
# (bench/workflows/bare_loops/: `bench selfcheck` holds the suite against it, so it must not go through the plug-in),
# and docs. Today's other places, each for its reason:
NAMED_ELSEWHERE = {
    "horovod": {
        "bench/core/environment.py": "the Python package horovod, whose version the run's fingerprint records",
        "bench/tools/horovod_build.py": "builds and installs the Python package horovod (for both frameworks)",
    },
    "ray": {
        "bench/testbed/ray.py": "the Ray test cluster: it asks the backend whether Ray is installed and starts its "
        "nodes with the backend's `ray` program, rather than a copy of either",
        "bench/workflows/regress.py": "the gate's matrix gates the Ray backend on one workload only (its runtime's "
        "start-up is slow)",
    },
    "ps": {
        "bench/cli/selfcheck.py": "--backend's declared bad values: a backend with no bare loop is refused",
        "bench/cli/fault.py": "--backend's declared bad value: a backend with no elastic mode is refused",
    },
    "single": {"bench/cli/selfcheck.py": "--backend's declared bad values: a backend with no bare loop is refused"},
}
ANYWHERE = ("bench/core/registry.py", "bench/workflows/bare_loops/")


def backend_folder(package: str) -> str:
    return package.replace(".", "/") + "/"


@functools.cache
def names_in(path: Path) -> tuple[frozenset, frozenset]:
    """(the strings the module holds, the modules it imports: `from a import b` as both a and a.b)."""
    strings, imported = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return frozenset(strings), frozenset(imported)


def names_backend(path: Path, name: str, package: str) -> bool:
    """Whether the module names backend `name`: its registry name as a string, or an import of its package."""
    strings, imported = names_in(path)
    return name in strings or any(m == package or m.startswith(package + ".") for m in imported)


@pytest.mark.parametrize("name", list(BACKEND_MODULES))
def test_a_backend_is_named_outside_its_folder_only_by_the_registry_its_bare_loop_and_the_listed(name):
    package = BACKEND_MODULES[name]
    assert (BENCH.parent / backend_folder(package) / "__init__.py").is_file(), f"{name}: a folder, {package}"
    sources = sorted([*BENCH.rglob("*.py"), *(BENCH.parent / "workloads").rglob("*.py")])
    naming = {
        str(p.relative_to(BENCH.parent))
        for p in sources
        if not str(p.relative_to(BENCH.parent)).startswith(backend_folder(package)) and names_backend(p, name, package)
    }
    allowed = NAMED_ELSEWHERE.get(name, {})
    unexpected = sorted(p for p in naming if p not in allowed and not p.startswith(ANYWHERE))
    assert not unexpected, (
        f"{name} is named outside {backend_folder(package)} in {unexpected}: move what differs "
        "into the backend (or what several share into bench/backends/shared/)"
    )
    stale = sorted(set(allowed) - naming)
    assert not stale, f"{name} is no longer named in {stale}: drop them from NAMED_ELSEWHERE"


# ---------------------------------------------------------------- a fault scenario is its entry
# Where a fault scenario's name, or its own flag, may stand as a string outside the fault task (bench/tasks/fault/;
# docs/architecture.md, "Adding a fault scenario"): the CLI, the sweep and the elastic modes read its entry
# (bench.tasks.fault.scenarios). At most two modules a scenario, each for its reason:
FAULT_TASK = "bench/tasks/fault/"
SCENARIO_NAMED_ELSEWHERE = {
    "kill": {
        "bench/rank/inject.py": "--inject's own word, a rank that SIGKILLs itself (its vocabulary, inside the rank)",
        "bench/harness/supervisor.py": "its verb `kill` (another meaning): the run's processes on a host ended",
    },
    "hang": {"bench/rank/inject.py": "--inject's own word, a rank that blocks"},
    "term": {"bench/cli/sweep.py": "--faults' declared bad value: a fault word bench fault takes and a sweep does not"},
    "kill-host": {"bench/cli/k8s.py": "the flags a --drop-worker job's manifest sets, refused after --"},
    "partition-host": {"bench/cli/k8s.py": "the flags a --drop-worker job's manifest sets, refused after --"},
    "drop-host": {
        "bench/cli/k8s.py": "the flags a --drop-worker job's manifest sets, refused after --",
        "bench/cluster/k8s.py": "the MPIJob launcher's command line, `bench fault --drop-host`, a layer below the task",
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_fault_scenario_is_named_outside_the_fault_task_only_by_the_listed(name):
    scenario = SCENARIOS[name]
    names = {name} | ({scenario.flag} if scenario.flag != FAULT_FLAG else set())
    sources = sorted([*BENCH.rglob("*.py"), *(BENCH.parent / "workloads").rglob("*.py")])
    naming = {
        str(p.relative_to(BENCH.parent))
        for p in sources
        if not str(p.relative_to(BENCH.parent)).startswith(FAULT_TASK) and names & names_in(p)[0]
    }
    allowed = SCENARIO_NAMED_ELSEWHERE.get(name, {})
    assert len(allowed) <= 2, f"{name}: at most two modules outside its entry name it"
    unexpected = sorted(naming - set(allowed))
    assert not unexpected, (
        f"the fault scenario {name} is named outside {FAULT_TASK} in {unexpected}: read its entry "
        "(bench.tasks.fault.scenarios) instead"
    )
    stale = sorted(set(allowed) - naming)
    assert not stale, f"{name} is no longer named in {stale}: drop them from SCENARIO_NAMED_ELSEWHERE"


def test_the_parent_loads_no_framework_with_the_backends():
    """Every backend's parent side (its package, launcher and elastic mode) imports no framework: the CLI, the
    harness and the supervisor load all of them."""
    code = (
        "import sys; from bench.core.registry import BACKEND_MODULES, get_backend; "
        "[get_backend(n).elastic for n in BACKEND_MODULES]; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parent,
        env={**os.environ, "PYTHONPATH": str(BENCH.parent)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"loaded with the backends: {out.stdout.strip()}"


# What each of ProcessGroup's hooks returns: the protocol (bench.rank.hooks) or class its object must give.
HOOKS = {
    "training": hooks.Training,
    "elastic_training": hooks.ElasticTraining,
    "buffers": hooks.Buffers,
    "server": hooks.Server,
    "elastic_state": ElasticState,
}
SCHEDULES = ("buckets", "cycles", "after_backward", "none")  # bench.projection.model's replay


@pytest.mark.parametrize("name", list(BACKEND_MODULES))
def test_a_backend_gives_what_base_requires(name):
    """bench.backends.base's required parts: a name (its registry name), a summary, a launcher, and a group: a
    module of its folder or of bench/backends/shared/ that ends with GROUP (read, not imported: it loads the
    framework); a communication schedule for the scaling model, or why it cannot be projected (and a schedule of no
    communication only for a backend of one process); and every object its group's hooks return gives every member
    of the hook's protocol (bench.rank.hooks), read from the source too."""
    backend = get_backend(name)
    assert backend.name == name and backend.summary
    assert isinstance(backend.launcher, Launcher)
    assert backend.group.startswith((BACKEND_MODULES[name] + ".", "bench.backends.shared.")), backend.group
    tree = ast.parse(Path(importlib.util.find_spec(backend.group).origin).read_text())
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert "GROUP" in assigned, f"{backend.group}: end it with GROUP = its ProcessGroup class"
    problem = backend.projection_problem()
    if problem is None:
        schedule = backend.comm_schedule(backend.resolve_options({}, 2))
        assert isinstance(schedule, CommSchedule) and schedule.kind in SCHEDULES, schedule
        assert schedule.kind != "none" or backend.max_world_size == 1, f"{name}: a step that exchanges nothing"
    else:
        assert isinstance(problem, str) and problem
    classes = source_classes()
    chain = class_chain(assigned["GROUP"].id, classes)
    assert "ProcessGroup" in chain, f"{backend.group}: GROUP is no ProcessGroup ({chain})"
    for hook, protocol in HOOKS.items():
        owner = next(c for c in chain if hook in classes[c].methods)
        for returned in classes[owner].methods[hook]:
            given = class_chain(returned, classes)
            assert protocol.__name__ in given, f"{owner}.{hook} returns {returned}, which is no {protocol.__name__}"
            below = given[: given.index(protocol.__name__)]  # what the implementation's own classes define
            lacking = protocol_members(protocol) - set().union(*(classes[c].members for c in below if c in classes))
            assert not lacking, f"{returned} ({owner}.{hook}) lacks {sorted(lacking)} of {protocol.__name__}"


def test_a_backend_class_without_a_communication_schedule_is_refused_unless_it_says_why_it_is_not_projected():
    """The scaling model replays a backend's comm_schedule; a backend that forgot one would be projected as a step
    that exchanges nothing. Such a class is refused as it is defined; one that says why it is not projected is not."""
    with pytest.raises(TypeError, match="gives no comm_schedule"):

        class Forgetful(Backend):
            name, summary, group = "forgetful", "no schedule", "bench.backends.single.group"
            launcher = get_backend("single").launcher

    class NotProjected(Backend):
        name, summary, group = "not-projected", "says why", "bench.backends.single.group"
        launcher = get_backend("single").launcher

        def projection_problem(self):
            return "its runs have no step profile"

    assert NotProjected().projection_problem() == "its runs have no step profile"


def test_a_backend_without_a_required_part_cannot_be_made():
    class NoGroup(Backend):
        name, summary = "no-group", "forgot its group"
        launcher = get_backend("single").launcher

        def comm_schedule(self, options):
            return CommSchedule("after_backward")

    with pytest.raises(TypeError, match="abstract.*group"):
        NoGroup()


def test_a_backend_of_another_framework_than_pytorch_cannot_take_converge_runs():
    """The converge task's rank program is PyTorch's (its own loop over ProcessGroup.wrap and optimizer_step)."""
    with pytest.raises(TypeError, match="converge"):

        class KerasConverging(Backend):
            name, summary, group = "keras-converging", "converges with Keras", "bench.backends.tf_mwms.group"
            launcher = get_backend("single").launcher
            framework = "tensorflow"
            tasks = ("train", "converge")

            def projection_problem(self):
                return "not profiled"


@dataclass
class SourceClass:
    bases: list[str]
    members: set[str]  # the names its body defines and the attributes its methods set on self
    methods: dict[str, list[str]]  # method -> the classes whose instances it returns (`return Name(...)`)


@functools.cache
def source_classes() -> dict[str, SourceClass | None]:
    """Every class of bench/, by name, as its source says (no module is imported: a group's loads its framework)."""
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            members, methods = set(), {}
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                    methods[item.name] = [
                        r.value.func.id
                        for r in ast.walk(item)
                        if isinstance(r, ast.Return)
                        and isinstance(r.value, ast.Call)
                        and isinstance(r.value.func, ast.Name)
                    ]
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    members.update(t.id for t in targets if isinstance(t, ast.Name))
            members.update(
                t.attr
                for t in ast.walk(node)
                if isinstance(t, ast.Attribute)
                and isinstance(t.ctx, ast.Store)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            )
            bases = [
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, (ast.Name, ast.Attribute))
            ]
            # a name two modules give their classes is read as none: a chain that reaches it fails (class_chain)
            found[node.name] = None if node.name in found else SourceClass(bases, members, methods)
    return found


def class_chain(name: str, classes: dict) -> list[str]:
    """`name` and its bases among the classes of bench/, nearest first (depth first, as the MRO of one line)."""
    assert classes.get(name, True) is not None, f"two classes of bench/ are named {name}: rename one"
    chain = [name]
    for base in classes[name].bases if name in classes else []:
        chain += [c for c in class_chain(base, classes) if c not in chain]
    return chain


def protocol_members(protocol: type) -> set[str]:
    """What an implementation of a hook's protocol must define itself: its abstract methods and properties, and the
    attributes it declares without a value."""
    return set(protocol.__abstractmethods__) | {n for n in protocol.__annotations__ if n not in vars(protocol)}


# Words retired because they named several things (docs/architecture.md, "Words: one per thing"), each with the
# uses that are not ours: a linker's message, Python's garbage collector, and the key records store an address under.
RETIRED_WORDS = {"reference": re.compile(r"undefined reference|reference cycle|\"reference\"")}


def test_a_retired_word_does_not_come_back_into_the_code():
    found = []
    for path in sorted([*BENCH.rglob("*.py"), *(BENCH.parent / "workloads").rglob("*.py")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for word, allowed in RETIRED_WORDS.items():
                if re.search(rf"\b{word}s?\b", line, re.I) and not allowed.search(line):
                    found.append(f"{path.relative_to(BENCH.parent)}:{number}: {line.strip()}")
    assert not found, "a retired word is back (docs/architecture.md, 'Words: one per thing'):\n" + "\n".join(found)


def test_the_groups_of_files_a_worker_runs_together_name_every_file_that_shares_their_resource():
    """tests/conftest.py's SHARED_BY_GROUP, by what the files do: every file that brings the test hosts up (or flocks
    them), and every one that asks for the session's two-worker runs, is in its group, and no other."""
    from conftest import SHARED_BY_GROUP, unit_of_work

    tests = Path(__file__).resolve().parent
    uses = {
        "test hosts": re.compile(r"testhosts\.up\(|fcntl\.flock\(lock|held_test_hosts\("),
        "two-worker runs": re.compile(r"\btwo_worker_run\b"),
    }
    for group, pattern in uses.items():
        files = {p.stem for p in tests.glob("test_*.py") if pattern.search(p.read_text())}
        assert files == set(SHARED_BY_GROUP[group]), group
        assert {unit_of_work(f"tests/{f}.py::test_x") for f in files} == {group}
    assert unit_of_work("tests/test_store.py::test_x[1]") == "tests/test_store.py"


# Where the machine's whole count of CPUs is the right figure, not the CPUs a run can keep busy (usable_cpus: its
# affinity, fewer under a CPU quota): usable_cpus' own fallback, every CPU of the machine for test hosts that are its
# namespaces, the environment's record of the machine, and a build's make jobs. A module that sizes runs or clusters
# from os.cpu_count() would give a pod on a large node a node's share of threads to be throttled on.
MACHINE_CPU_COUNT = {"core/cgroups.py", "core/environment.py", "harness/cores.py", "tools/horovod_build.py"}


def test_runs_and_test_clusters_are_sized_from_the_cpus_a_run_can_keep_busy():
    found = {
        str(path.relative_to(BENCH))
        for path in BENCH.rglob("*.py")
        if re.search(r"\bos\.cpu_count\(", path.read_text(encoding="utf-8"))
    }
    assert found <= MACHINE_CPU_COUNT, (
        f"sized from os.cpu_count(), not usable_cpus(): {sorted(found - MACHINE_CPU_COUNT)}"
    )
