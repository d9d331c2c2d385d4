"""What every benchmark writes with a record: the commit, the machine, the command, the
date, and the record file itself (records replaced by name, written atomically).

A record file is ``{"description": ..., "records": [...], "tables": {...}}`` as
``benchmarks/report.py`` reads it; :func:`store` replaces the record of the same name and
keeps the others, so a re-run replaces its figure and a resumable run appends.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["ROOT", "command", "commit", "load_records", "machine", "record", "store"]

ROOT = Path(__file__).resolve().parents[1]


def commit(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD`` of the code measured (``"unknown"`` outside git),
    followed by ``+uncommitted`` when a tracked file outside ``benchmarks/results/`` (the
    records themselves) differs from that commit: the code measured is then not the
    commit's."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown"
    name = head.stdout.strip()
    if not name:
        return "unknown"
    changed = [line[3:] for line in status.stdout.splitlines()]
    if any(not path.startswith("benchmarks/results/") for path in changed):
        return name + "+uncommitted"
    return name


def machine(device: torch.device | None = None) -> str:
    """``"<cores>-core <arch> CPU, torch <version> with <n> thread(s)"``; with a CUDA
    ``device``, ``"<GPU name>, <cores> CPU cores, torch <version>"``."""
    if device is not None and device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return f"{name}, {os.cpu_count()} CPU cores, torch {torch.__version__}"
    return (
        f"{os.cpu_count()}-core {platform.machine()} CPU, torch {torch.__version__} with "
        f"{torch.get_num_threads()} thread(s)"
    )


def command(script: str, argv: list[str] | None = None) -> str:
    """The command line that reproduces a run of ``benchmarks/<script>`` with ``argv``
    (default ``sys.argv[1:]``), ``OMP_NUM_THREADS`` included when it is set."""
    args = list(sys.argv[1:] if argv is None else argv)
    threads = os.environ.get("OMP_NUM_THREADS")
    prefix = [f"OMP_NUM_THREADS={threads}"] if threads else []
    return " ".join([*prefix, "python", f"benchmarks/{script}", *args])


def record(
    name: str, figures: dict[str, Any], script: str, argv: list[str] | None
) -> dict[str, Any]:
    """A record: ``name``, ``figures`` and where they come from (command, commit,
    machine, date)."""
    return {
        "name": name,
        "figures": figures,
        "command": command(script, argv),
        "commit": commit(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records of ``path`` (none when it does not exist yet)."""
    return list(json.loads(path.read_text())["records"]) if path.exists() else []


Tables = dict[str, Any] | Callable[[list[dict[str, Any]]], dict[str, Any]]


def store(
    path: Path, new: dict[str, Any], description: str, tables: Tables
) -> list[dict[str, Any]]:
    """Put ``new`` into the record file ``path`` in place of the record of its name, with
    the file's ``description`` and ``tables`` (a callable ``tables(records)`` may build
    them from the records); written atomically. Returns the records."""
    records = [r for r in load_records(path) if r["name"] != new["name"]] + [new]
    built = tables(records) if callable(tables) else tables
    data = {"description": description, "records": records, "tables": built}
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(temporary, path)
    return records
