"""The scaling model against published scaling tables (docs/studies/published.md): its inputs and its arithmetic.

Usage:
    python scripts/published_study.py                   # the study's tables and summary, as markdown, on stdout
    python scripts/published_study.py --profile-models  # first profile each table's model on this CPU (a few steps
                                                        # at batch 2, bench.rank.model_profile) and keep the shapes

The tables' figures and the model's inputs are bench/projection/published/cases.json; the models' shapes are
bench/projection/published/shapes/MODEL.json. The same code (bench.projection.published) computes what this prints
and what tests/test_published.py checks the study against, so the study's tables are this output; the test also
runs each table's `bench predict` command (the table of commands printed here) and checks the CLI gives its rows."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.projection import published  # noqa: E402  (the checkout's bench, run from anywhere)
from bench.projection.shapes import model_profile  # noqa: E402

KEPT = ("model", "torch", "batch", "input", "parameters", "steps", "forward_s", "gradients_s", "optimizer_s", "grads")


def profile_models() -> None:
    for model in sorted({t["model"] for t in published.load_cases()["tables"]}):
        profile = model_profile(model)
        path = published.DATA / "shapes" / f"{model}.json"
        path.write_text(json.dumps({k: profile[k] for k in KEPT if k in profile}) + "\n")
        print(f"{model}: {profile['parameters']:,} parameters in {len(profile['grads'])} tensors -> {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile-models", action="store_true", help="profile each table's model first")
    args = parser.parse_args()
    if args.profile_models:
        profile_models()
    record = published.track_record()
    print("\n".join(published.markdown_inputs(record)))
    print()
    print("\n".join(published.markdown_rows(record)))
    print()
    print(record.summary())
    print()
    print("\n".join(published.markdown_commands(record)))
    print()
    print("\n".join(published.markdown_ablation()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
