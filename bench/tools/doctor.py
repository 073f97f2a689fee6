"""`bench doctor`: what this machine offers, and whether each backend can run here."""

from __future__ import annotations

from bench.core.environment import fingerprint
from bench.core.registry import BACKEND_MODULES, get_backend
from bench.core.spec import cpu_count


def mpirun_version() -> str:
    import shutil
    import subprocess

    path = shutil.which("mpirun")
    if path is None:
        return "not found (apt-get install openmpi-bin libopenmpi-dev)"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{path} (version unknown)"
    first = out.strip().splitlines()[0] if out.strip() else "version unknown"
    return f"{path} ({first})"


def doctor_lines() -> list[str]:
    env = fingerprint()
    lines = [
        f"python      {env['python']} ({env['python_executable']})",
        f"machine     {env['hostname']}: {env['cpu_model']}, {cpu_count()} usable cores, "
        f"{(env['memory_bytes'] or 0) / 2**30:.1f} GiB",
        f"torch       {env['torch']} (CUDA build: {env['torch_cuda_build'] or 'none'}, "
        f"cuDNN: {env['cudnn'] or 'none'})",
        f"torchvision {env['packages']['torchvision'] or 'not installed'}",
        f"CUDA        {len(env['cuda_devices'])} device(s)" +
        (": " + ", ".join(env["cuda_devices"]) if env["cuda_devices"] else ""),
        f"gloo        {'yes' if env['gloo'] else 'no'}",
        f"NCCL        {'yes' if env['nccl'] else 'no'}" +
        (f" ({env['nccl_version']})" if env["nccl_version"] else "") +
        ("" if env["cuda_devices"] else " (no CUDA device to use it)"),
        f"MPI         torch.distributed: {'yes' if env['mpi'] else 'no'}; mpirun: {mpirun_version()}",
        "backends:",
    ]
    devices = ["cpu"] + (["cuda"] if env["cuda_devices"] else [])
    for name in BACKEND_MODULES:
        backend = get_backend(name)
        states = []
        for device in devices:
            problem = backend.unavailable_reason(device)
            states.append(f"{device}: {'usable' if problem is None else 'not usable: ' + problem}")
        lines.append(f"  {name:<9} {backend.summary}")
        lines.append(f"  {'':<9} " + "; ".join(states))
        lines += [f"  {'':<9} {extra}" for extra in backend.doctor_lines()]
    return lines
