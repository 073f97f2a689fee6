"""What Horovod takes to run (bench.report.setup): how the run's environment got it, from the record its set-up
kept (bench.tools.horovod_build, held by the fingerprint as "horovod_setup"), and its latest release, cited."""

from __future__ import annotations

from bench.backends.shared.setup import NO_RECORD, Fact, minutes

FACTS = (
    Fact(
        "latest release",
        "0.28.1, released 2023-06-12; no release since",
        "https://github.com/horovod/horovod/blob/v0.28.1/CHANGELOG.md",
    ),
    Fact(
        "frameworks that release was tested with",
        "PyTorch 1.5.0 to 2.0.0 and TensorFlow 1.15 to 2.12.0 (its test matrix at v0.28.1)",
        "https://github.com/horovod/horovod/blob/v0.28.1/docker-compose.test.yml",
    ),
)


def installed(env: dict) -> dict:
    """How the environment got Horovod, in how long, and what its build changed, from the set-up's record; each
    said plainly as not recorded where the environment kept none."""
    record = env.get("horovod_setup")
    if not isinstance(record, dict):
        return {
            "installed": f"{NO_RECORD}: the runs' environment kept none (set up before its set-up recorded its "
            "Horovod build, or by other means)",
            "took": "not recorded",
            "changes": "not recorded",
            "short": NO_RECORD,
        }
    build = record.get("build") if isinstance(record.get("build"), dict) else {}
    version = build.get("horovod") or (env.get("packages") or {}).get("horovod") or "?"
    installed = f"Horovod {version} {record.get('how', 'installed')}, {record.get('installed', 'undated')}"
    took = []
    if build.get("build_seconds") is not None:
        against = f"torch {build.get('torch') or '?'}" + (
            f" and TensorFlow {build['tensorflow']}" if build.get("tensorflow") else ""
        )
        took.append(f"its build {minutes(build['build_seconds'])} ({build.get('built', 'undated')}, against {against})")
    else:
        took.append("its build's time not recorded")
    if record.get("install_seconds") is not None:
        took.append(f"this install {minutes(record['install_seconds'])}")
    changes = build.get("changes")
    changed = "; ".join(changes) if changes else ("none" if isinstance(changes, list) else "not recorded")
    short = (
        f"built from source in {minutes(build['build_seconds'])}, {len(changes or [])} change(s) to build"
        if build.get("build_seconds") is not None
        else f"Horovod {version}; its build not recorded"
    )
    return {"installed": installed, "took": "; ".join(took), "changes": changed, "short": short}
