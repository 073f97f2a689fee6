"""The child side of bench.harness.workload_check.child_answer: a process that runs a user's code or torch away from
bench's own answers on one line of JSON on the stdout it was started with, {"answer": ...} or {"error": the one-line
refusal}; what the code it runs prints goes to stderr, never into the answer."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def answer_parent(work: Callable[[], Any], refusals: tuple[type[Exception], ...]) -> int:
    """Run `work` and write its answer, or the message of one of `refusals`, as the parent reads it."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        reply = {"answer": work()}
    except refusals as exc:
        reply = {"error": str(exc)}
    answer.write(json.dumps(reply) + "\n")
    answer.close()
    return 0
