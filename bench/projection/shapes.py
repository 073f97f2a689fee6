"""A model's step shape for the scaling model without a sweep of it (`bench predict --model`): its gradient tensors'
sizes and the order (and shares of the backward pass) in which they become ready, from a short profile on this
machine's CPU in a process of its own (bench.rank.model_profile: torch and the user's code never run in bench's
process), kept in a cache keyed by the model, its code and the torch and torchvision versions, and reused.

A model is named three ways:
- a torchvision classification model: `resnet50`, `vgg16`, `inception_v3` (built without weights, 1,000 classes);
  one whose profile is committed (published/shapes/MODEL.json: the one docs/studies/published.md's tables use) takes
  that profile, so that a projection of it is the same on every machine and reproduces the study's rows; a fresh
  profile on this machine is asked for (`bench predict --fresh-profile`), since a CPU's profile moves between
  machines and loads (VGG-16's 411 MB fc6 gradient ready at 16% of the backward pass in one, 27% in the other);
- a user's workload: `path/to/file.py:NAME` or `PKG.MODULE:NAME`, checked as a run checks it
  (bench.harness.workload_check) and profiled at its CPU size;
- a parameter list, `params:ITEM,ITEM,...`: each ITEM one gradient tensor's elements (`4096x4096`, `25.6M`, `1000`;
  k and M multiply by 10^3 and 10^6), float32, in the order they become ready (the layer nearest the loss first).
  Nothing is profiled: the tensors are taken ready in proportion to the bytes before them, and the step's shares
  are the usual ones of a network's FLOPs (backward twice the forward; the optimizer's share 0), said beside the
  figures."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

from bench.core.errors import UsageError
from bench.core.registry import get_backend
from bench.core.rundir import write_atomic
from bench.harness.workload_check import CHECK_TIMEOUT_S, child_answer, workload_of
from bench.projection.model import Inputs, Shape, Value, assume
from workloads.external import is_address

PARAMS = "params:"
COMMITTED = Path(__file__).resolve().parent / "published" / "shapes"  # the study's profiles, by model name
ITEM = re.compile(r"(\d+(?:\.\d+)?)([km]?)((?:x\d+)*)", re.IGNORECASE)
# an import of torch, a build and 4 steps at batch 2: seconds on an idle core, minutes on a busy machine
PROFILE_TIMEOUT_S = 5 * CHECK_TIMEOUT_S
LIST_SHARES = (1 / 3, 2 / 3, 0.0)  # forward, backward, optimizer of a parameter list: backward = 2 x forward


def cache_dir() -> Path:
    """Where profiles are kept: $BENCH_CACHE_DIR/profiles (or ~/.cache/elastic-vs-horovod-bench/profiles)."""
    base = os.environ.get("BENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "elastic-vs-horovod-bench"
    )
    return Path(base) / "profiles"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def parse_params(text: str) -> list[float]:
    """`params:ITEM,...` -> each tensor's elements; UsageError, one line, for anything else."""
    items = [i.strip() for i in text[len(PARAMS) :].split(",")]
    sizes = []
    for item in items:
        match = ITEM.fullmatch(item)
        if not match:
            raise UsageError(
                f"--model {text!r}: {item!r} is not a tensor's elements; give params:ITEM,... with each ITEM such as "
                "4096x4096, 25.6M or 1000, the layer nearest the loss first"
            )
        count = float(match[1]) * {"": 1, "k": 1e3, "m": 1e6}[match[2].lower()]
        for dim in match[3].split("x")[1:]:
            count *= int(dim)
        if count < 1:
            raise UsageError(f"--model {text!r}: a tensor of {item} has no elements")
        sizes.append(count)
    return sizes


def params_profile(text: str) -> dict:
    """A parameter list as a profile (Shape.of_profile's form): float32 tensors, each ready once the bytes before
    it and its own are through (the backward pass spread over the bytes)."""
    sizes = parse_params(text)
    total = sum(sizes)
    forward, backward, optimizer = LIST_SHARES
    grads, done = [], 0.0
    for index, count in enumerate(sizes):
        done += count
        grads.append([index, int(count), 4, backward * done / total])
    return {
        "forward_s": forward,
        "gradients_s": backward,
        "optimizer_s": optimizer,
        "grads": grads,
        "model": text,
        "parameters": int(total),
    }


def _key(model: str, code: str | None) -> str:
    facts = [model, code, _version("torch"), _version("torchvision")]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:24]


def check_model(model: str) -> None:
    """--model's form, refused in one line before anything is read or started."""
    if model.startswith(PARAMS):
        parse_params(model)
        return
    where = model.rpartition(":")[0]
    if is_address(model):
        if where.endswith(".py") and not Path(where).is_file():
            raise UsageError(f"--model {model}: no file {where}")
    elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", model):
        raise UsageError(
            f"--model {model!r}: give a torchvision model name (such as resnet50), path/to/file.py:NAME or "
            "params:ITEM,..."
        )


def committed_profile(model: str) -> dict | None:
    """The committed profile of a torchvision model name (published/shapes/MODEL.json), marked as such; None when
    there is none."""
    path = COMMITTED / f"{model}.json"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", model) or not path.is_file():
        return None
    return {**json.loads(path.read_text()), "committed": f"bench/projection/published/shapes/{model}.json"}


def model_profile(model: str, fresh: bool = False) -> dict:
    """The profile of MODEL (module docstring): the committed one where there is one (unless `fresh`), else from the
    cache when this model, its code and the installed torch and torchvision were profiled before, else from a child
    process (then kept)."""
    if model.startswith(PARAMS):
        return params_profile(model)
    check_model(model)
    committed = None if fresh else committed_profile(model)
    if committed is not None:
        return committed
    code = None
    where = model.rpartition(":")[0]
    if is_address(model):
        address, _, source = workload_of(model)  # checked in a process of its own, as a run's workload is
        code, target = (source or {}).get("sha256"), address
        if where.endswith(".py"):  # the file as it is now (a check earlier in this process may have read it)
            code = hashlib.sha256(Path(where).read_bytes()).hexdigest()
    else:
        target = f"torchvision:{model}"
    path = cache_dir() / f"{_key(target, code)}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass  # a damaged entry is profiled again and replaced
    answer = child_answer(
        [sys.executable, "-m", "bench.rank.model_profile", target],
        f"--model {model}",
        "profiling it (a few CPU steps at batch 2)",
        PROFILE_TIMEOUT_S,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(answer, indent=1) + "\n")
    return answer


def shape_of(profile: dict) -> Shape:
    if profile.get("committed"):
        return Shape.of_profile(profile, run=f"profile of {profile['model']} ({profile['committed']})")
    return Shape.of_profile(profile, run=f"profile of {profile['model']}")


def model_inputs(
    model: str,
    profile: dict,
    backend: str,
    batch: int,
    step_s: float,
    device: str,
    how: str,
    options: dict | None = None,
    rule: object | None = None,
) -> Inputs:
    """The scaling model's inputs for a named model under `backend` (its default options, updated by `options`;
    `rule`: the rules of a system that is not one of the suite's backends, bench.projection.model.Inputs.rule): the
    given one-worker step as the compute, the profile's shape, no processing of the backend's own (the cluster's
    links carry the collectives) and the per-step overhead and slowdown as stated ranges
    (bench.projection.model.GPU_ASSUMPTIONS)."""
    chosen = {} if rule is not None else {o.name: o.default for o in get_backend(backend).options}
    chosen.update(options or {})
    zero = Value(0.0)
    notes = [how, f"shape: {profile.get('parameters', 0):,} parameters in {len(profile['grads'])} tensors"]
    if model.startswith(PARAMS):
        notes.append(
            "shape: a parameter list: tensors ready in proportion to the bytes before them; forward 1/3, "
            "backward 2/3 of the step"
        )
    elif profile.get("committed"):
        notes.append(
            f"shape: the committed profile {profile['committed']} (a CPU's, at batch {profile.get('batch', 2)}, "
            f"torch {profile.get('torch', '?')}; the one docs/studies/published.md uses); --fresh-profile "
            "profiles the model on this machine instead; a GPU's parts may be in other proportions"
        )
    else:
        notes.append(
            f"shape: profiled on this machine's CPU at batch {profile.get('batch', 2)} (torch "
            f"{profile.get('torch', '?')}); a GPU's parts may be in other proportions"
        )
    inputs = Inputs(
        model,
        backend,
        chosen,
        batch,
        1,
        device,
        Value(step_s),
        shape_of(profile),
        zero,
        zero,
        zero,
        zero,
        zero,
        1,
        notes=tuple(notes),
        rule=rule,
    )
    return assume(inputs)
