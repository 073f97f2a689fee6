"""What torchrun takes to run (bench.report.setup): it ships with torch, so nothing is built; its version is the
runs' torch, which the fingerprint records."""

from __future__ import annotations

from bench.backends.shared.setup import NO_RECORD, Fact

FACTS = (
    Fact(
        "how it ships",
        "torchrun is a console script of torch itself, declared in torch's entry points (python -m "
        "torch.distributed.run): each torch release carries its own",
        "https://docs.pytorch.org/docs/stable/elastic/run.html",
    ),
)


def installed(env: dict) -> dict:
    torch = env.get("torch")
    if not torch:
        return {"installed": NO_RECORD, "took": "not recorded", "changes": "not recorded", "short": NO_RECORD}
    return {
        "installed": f"with torch {torch} (pip's wheel, a dependency of this project): torchrun is part of it",
        "took": "not recorded apart from torch's own install",
        "changes": "none: nothing is built",
        "short": f"ships with torch {torch}; nothing built",
    }
