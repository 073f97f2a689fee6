"""The ray backend's driver: `python -m bench.backends.ray.driver RUN_DIR RUN_ID [--max-failures N] [--join]`, started
by the supervisor as the run's launcher (a fault run's by the elastic mode, RayTrainElastic, which adds the options).

1. Start a local Ray runtime sized to the run (CPUs: workers x threads, plus one to spare but in a join),
   on ports Ray chooses (two runs at once never collide), with no dashboard, its temporary files in the run
   directory (or, when that path is too long for the unix sockets Ray makes there, in /tmp/bench-RUN_ID-ray);
   or connect to `--ray-address`.
2. Run a TorchTrainer of spec.world_size workers (one CPU thread count each, a GPU each on CUDA) whose
   train_loop_per_worker is the suite's per-rank code (bench.backends.ray.group.rank_main), with no retries (in a
   fault run, --max-failures of them: the fault's --max-restarts); in a join, an elastic worker count that grows
   by one when a node joins.
3. However it ended, write the exit file of every rank that started and could not write its own (Ray ended it,
   or it died), stop the runtime, and remove a temporary folder under /tmp. Exit 0 when training succeeded.

It writes its timings to the run directory's ray.json (RayLauncher.startup_phases reads them). Ray is imported once
the signal handlers are set, and that import is timed: it is the driver's start-up phase.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from bench.backends.ray.launcher import scaling
from bench.backends.ray.times import write_times
from bench.core.rundir import SHORT_TEMP_DIR, RunDir, run_temp_prefix, tail
from bench.core.spec import RunSpec

SOCKET_PATH_MAX = 107  # sun_path of a unix socket, less its terminating NUL
# what Ray adds below its temporary folder for its longest socket: /session_YYYY-MM-DD_HH-MM-SS_FFFFFF_PID/sockets/
# plasma_store (a pid of up to 7 digits)
SOCKET_SUFFIX = len("/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store")


def temp_dir(run_dir, run_id: str) -> tuple[Path, bool]:
    """(Ray's temporary folder, whether it is outside the run directory and to be removed afterwards). Outside it,
    in /tmp, which every user may write, the folder is made here, exclusively and private, before Ray is given it:
    Ray makes what it is given as it finds it, so a folder or a link another user put under the name (the run's id
    shows in the process list) would have had Ray's sockets and logs written where that user chose."""
    inside = run_dir.path / "ray"
    if len(str(inside)) + SOCKET_SUFFIX <= SOCKET_PATH_MAX:
        return inside, False
    outside = SHORT_TEMP_DIR / f"{run_temp_prefix(run_id)}ray"
    try:
        outside.mkdir(mode=0o700)  # mkdir makes nothing where any entry, a link included, has the name
    except FileExistsError:
        raise SystemExit(
            f"ray driver: {outside} exists already, made by someone else before this run; Ray's folder must be the "
            "run's own: give --store a folder with a shorter path, so that Ray's folder is in the run directory"
        ) from None
    return outside, True


# what bench.harness.runner.worker_environment sets for every rank, passed to the workers of a cluster given by
# --ray-address
# (a local runtime's workers inherit them from the driver): to every process of the job ...
JOB_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONUNBUFFERED",
    "PYTHONPATH",
    "CUDA_VISIBLE_DEVICES",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
)
# ... but the run's tag to the Train workers only: a job's runtime_env also reaches the cluster-wide detached actors
# the job happens to create (Ray Train's AutoscalingCoordinator, made by the first Train run on a cluster and kept
# for every later one, restarted whenever it ends), which are the cluster's, not the run's, and must not be
# reaped as the run's. Ray itself ends the job's other processes (its controller) when the driver ends.
WORKER_VARIABLES = ("BENCH_RUN_TAG",)


def passed_on(names) -> dict[str, str]:
    return {k: os.environ[k] for k in names if k in os.environ}


class Ended(Exception):
    """SIGTERM or SIGHUP reached the driver (the supervisor's teardown, a deadline, Ctrl-C)."""


def _ended(signum, _frame):
    raise Ended(signal.Signals(signum).name)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.backends.ray.driver")
    parser.add_argument("run_dir")
    parser.add_argument("run_id")
    parser.add_argument("--max-failures", type=int, default=0, help="worker group failures Ray Train recovers from")
    parser.add_argument("--join", action="store_true", help="grow the worker group by one when a node joins")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # absolute: Ray Train's storage path must be (pyarrow refuses a relative one), and Ray's workers need not
    # share this process's working directory (the run directory is relative when the store's path is)
    run_dir, run_id = RunDir(os.path.abspath(args.run_dir)), args.run_id
    spec = RunSpec.from_dict(json.loads(run_dir.spec_file.read_text()))
    launched = json.loads(run_dir.launch_file.read_text())["launched_at"] if run_dir.launch_file.exists() else None
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _ended)

    import ray  # here, after the handlers: a SIGTERM during its seconds-long import still ends the driver cleanly

    write_times(run_dir, launched_at=launched, ray_imported=time.time())
    address = spec.backend_options.get("ray_address")
    folder, remove = temp_dir(run_dir, run_id) if not address else (None, False)
    storage = run_dir.path / "ray_train"
    code, ended = 1, False
    try:
        started = time.time()
        if address:
            # the cluster's workers get what the harness gives every rank (threads, the run's tag, this checkout on
            # the path); they write the run directory, so they must see it at the same path
            try:
                ray.init(
                    address=address,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env={"env_vars": passed_on(JOB_VARIABLES)},
                )
            except ConnectionError as exc:  # Ray's own ConnectionError carries the cause (say, a missing token)
                cause = exc.__cause__ or exc.__context__
                print(
                    f"ray driver: could not join the Ray cluster at {address}: {exc}"
                    + (f" ({type(cause).__name__}: {str(cause)[:300]})" if cause else "")
                    + "; a cluster with token authentication needs RAY_AUTH_MODE=token and its token here",
                    flush=True,
                )
                return 1
        else:
            # a CPU to spare beside the workers' (Ray Train's controller takes none); none in a join, whose next
            # worker must find room only on the node that joins
            cpus = spec.world_size * spec.threads + (0 if args.join else 1)
            gpus = spec.world_size if spec.device == "cuda" else 0
            context = ray.init(
                num_cpus=cpus,
                num_gpus=gpus,
                _temp_dir=str(folder),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            write_times(run_dir, gcs_address=context.address_info["gcs_address"])  # where a joining node goes
        for sig in (signal.SIGTERM, signal.SIGHUP):  # ray.init installs its own (it dumps a stack and exits)
            signal.signal(sig, _ended)
        write_times(
            run_dir,
            ray_init_start=started,
            ray_init_end=time.time(),
            address=address,
            temp_dir=None if address else str(folder),
        )
        code = train(spec, run_dir, run_id, storage, address, args.max_failures, args.join)
    except Ended as exc:
        print(f"ray driver: {exc} received; stopping", flush=True)
        code, ended = 128 + getattr(signal, str(exc)).value, True
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the teardown below must not be cut short
        close_ranks(run_dir, ended_by="the Ray driver's teardown")
        # the supervisor's teardown ends the runtime too and may end this driver first; it removes the folder again
        # once every process of the run has ended (bench.harness.supervisor.remove_scratch)
        if remove and ended:
            shutil.rmtree(folder, ignore_errors=True)
        ray.shutdown()
        if remove:
            shutil.rmtree(folder, ignore_errors=True)
    return code


def train(spec, run_dir, run_id: str, storage: Path, address: str | None, max_failures: int, join: bool) -> int:
    """Run the TorchTrainer; 0 when every worker finished, 1 when training failed (each failed rank's exit file
    written)."""
    # Ray Train, and the modules that import it, once main has imported Ray (timed, after the signal handlers)
    import ray.train
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from bench.backends.ray.config import timed_torch_config  # imports Ray Train, like the lines above
    from bench.backends.ray.group import rank_main  # imports Ray Train and torch, like the lines above

    trainer = TorchTrainer(
        rank_main,
        train_loop_config={"run_dir": str(run_dir.path)},
        scaling_config=ScalingConfig(
            **scaling(spec, join),
            elastic_resize_monitor_interval_s=spec.backend_options.get("ray_resize_interval", 60.0),
        ),
        torch_config=timed_torch_config(
            backend="nccl" if spec.device == "cuda" else "gloo",
            timeout_s=int(spec.collective_timeout),
            run_dir=str(run_dir.path),
        ),
        # no retries, but in a fault run (the backend's elastic mode)
        run_config=RunConfig(
            name=run_id,
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=max_failures),
            worker_runtime_env={"env_vars": passed_on(WORKER_VARIABLES)} if address else None,
        ),
    )
    fit_start = time.time()
    write_times(run_dir, fit_start=fit_start)
    try:
        fit_in_a_thread(trainer)
    except ray.train.TrainingFailedError as exc:
        failures = getattr(exc, "worker_failures", None) or {}
        print(f"ray driver: training failed: {type(exc).__name__}: {str(exc)[:4000]}", flush=True)
        close_ranks(run_dir, ended_by="Ray Train, after another rank failed", died=failures)
        return 1
    return 0


def fit_in_a_thread(trainer) -> None:
    """trainer.fit() in a thread of its own (Ray Train allows it, as Ray Tune runs it so), while this main thread
    waits in short joins: fit() blocks in Ray's C++ get, where Python's signal handlers never run, so a SIGTERM
    from the teardown would otherwise find the driver unable to clean up before it is killed."""
    outcome = {}

    def fit():
        try:
            trainer.fit()
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if "error" in outcome:
        raise outcome["error"]


def close_ranks(run_dir, ended_by: str, died: dict | None = None) -> None:
    """Write the exit file of every rank process that started and wrote none: it died by itself when Ray Train
    says it failed and it wrote no error (its process vanished: a signal), otherwise Ray ended it (a
    consequence of another rank's failure, or of the teardown)."""
    exits = run_dir.read_all("exit")
    errors = run_dir.read_all("error")
    for (rank, attempt), start in sorted(run_dir.read_all("start").items()):
        if (rank, attempt) in exits:
            continue
        by_itself = rank in (died or {}) and (rank, attempt) not in errors
        reason = f"{type(died[rank]).__name__}: {str(died[rank]).splitlines()[0][:300]}" if by_itself else ""
        log = run_dir.rank_file(rank, attempt, "log")
        run_dir.write(
            rank,
            attempt,
            "exit",
            {
                "rank": rank,
                "attempt": attempt,
                "pid": start.get("pid"),
                "time": time.time(),
                "returncode": -1,
                "exit_code": None,
                "signal": None,
                "vanished": by_itself,
                "terminated_by": None if by_itself else ended_by,
                "tail": "\n".join(
                    filter(
                        None,
                        [
                            tail(log) if log.exists() else "",
                            f"(the Ray worker process died; Ray Train: {reason})" if by_itself else "",
                        ],
                    )
                ),
            },
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
