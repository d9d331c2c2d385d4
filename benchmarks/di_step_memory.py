"""The peak memory of one DI step for ``di_step.py``: measured in a fresh subprocess
(CUDA: ``max_memory_allocated`` growth; CPU: the resident-set high-water mark), and its
scaling with ``J`` at ``B = 2J`` against ``(B J + J^2) x itemsize``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from di_step_ops import make_steps

#: glibc mmap threshold (bytes) of the memory-scaling subprocesses (see :func:`peak_memory`).
MMAP_THRESHOLD = 1 << 17


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in KiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def measure_peak(layer: str, b: int, d: int, j: int, device: str, dtype: str) -> float:
    """Peak extra memory (MiB) of one ``ours`` step in this process.

    CUDA: ``max_memory_allocated`` growth. CPU: the resident-set high-water mark
    (``VmHWM``, reset through ``/proc/self/clear_refs``) above the resident set before
    the step, after one warm-up step.
    """
    dev = torch.device(device)
    steps = make_steps(layer, b, d, j, dev, getattr(torch, dtype), floor_operands=False)
    steps["ours"]()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        steps["ours"]()
        torch.cuda.synchronize(dev)
        return (torch.cuda.max_memory_allocated(dev) - base) / 2**20
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status_kib("VmRSS")
    steps["ours"]()
    return (_status_kib("VmHWM") - base) / 1024


def peak_memory(
    layer: str,
    b: int,
    d: int,
    j: int,
    device: str,
    dtype: str,
    *,
    mmap_threshold: int | None = None,
) -> float:
    """:func:`measure_peak` in a fresh subprocess (so earlier runs do not pollute it).

    ``mmap_threshold`` (bytes) fixes glibc's ``MALLOC_MMAP_THRESHOLD_`` in the subprocess, so
    every larger buffer is mapped on allocation and unmapped on release: the resident-set
    high-water mark then sees each step's buffers even when a warm-up step freed same-sized
    ones (glibc's default dynamic threshold keeps such blocks resident and reuses them).
    """
    env = dict(os.environ)
    if mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    # This file's own folder, not the working directory's `benchmarks/`: the script runs
    # from any directory.
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); from di_step_memory import measure_peak;"
        f"print(measure_peak('{layer}', {b}, {d}, {j}, '{device}', '{dtype}'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return float(out.stdout.strip().splitlines()[-1])


def memory_scaling_table(
    dims: list[int], layers: list[str], device: str, dtype_name: str, d: int = 784
) -> list[dict[str, float]]:
    """Print and return peak memory of one DI step for ``B = 2J`` vs ``B J + J^2``."""
    itemsize = getattr(torch, dtype_name).itemsize
    print(
        "\n| layer | B | d | J | peak MiB | (BJ+J^2) x itemsize MiB | peak / (BJ+J^2) | "
        "growth vs previous J | (BJ+J^2) growth |"
    )
    print("|---" * 9 + "|")
    rows = []
    for layer in layers:
        prev = None
        for j in dims:
            b = 2 * j
            peak = peak_memory(layer, b, d, j, device, dtype_name, mmap_threshold=MMAP_THRESHOLD)
            theory = (b * j + j * j) * itemsize / 2**20
            growth = f"{peak / prev[0]:.2f}x" if prev and prev[0] > 0 else "-"
            tgrowth = f"{theory / prev[1]:.2f}x" if prev else "-"
            prev = (peak, theory)
            rows.append({"layer": layer, "B": b, "d": d, "J": j, "peak_mib": peak})
            print(
                f"| {layer} | {b} | {d} | {j} | {peak:.0f} | {theory:.1f} | "
                f"{peak / theory:.2f} | {growth} | {tgrowth} |",
                flush=True,
            )
    return rows
