"""Keep freed host memory in the process, so that a training step's buffers are reused.

A DI step allocates and frees the same few ``B x J`` and ``J x J`` buffers every time.
With glibc's default settings, blocks that large are handed back to the kernel when
freed (``munmap``, or trimming the top of the heap), and the next step faults every page
back in. :func:`keep_freed_host_memory` raises glibc's thresholds through ``mallopt`` so
that the blocks stay in the process and are reused (the effect PyTorch's performance
guide obtains with jemalloc or tcmalloc); see benchmarks/di_step.py ``--host-memory``.

The cost: memory freed inside the process is kept for later allocations instead of
being returned to the system, so the resident size stays near its peak (the peak itself
does not grow). Nothing here runs on import: the ``kernel-layers`` console script calls
it once at start-up (:mod:`kernel_layers.cli.entry`; ``--host_memory default`` opts
out, and so does configuring glibc's allocator through its own environment variables);
in a script of your own, call it once before training.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

from kernel_layers._validation import check_int

__all__ = [
    "ALLOCATOR_ENV_VARIABLES",
    "DEFAULT_MMAP_THRESHOLD",
    "DEFAULT_TRIM_THRESHOLD",
    "allocator_configured_by_user",
    "keep_freed_host_memory",
]

#: glibc's ``mallopt`` parameters (``<malloc.h>``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks up to this size come from the heap (and are reused) rather than from ``mmap``.
DEFAULT_MMAP_THRESHOLD = 1 << 30
#: The top of the heap is handed back to the system only beyond this much free memory.
DEFAULT_TRIM_THRESHOLD = (1 << 31) - 1

#: Environment variables through which a user configures glibc's allocator directly.
ALLOCATOR_ENV_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")

_INT_MAX = (1 << 31) - 1


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or ``None`` off Linux or with another C library (musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        version = libc.gnu_get_libc_version  # glibc only
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def keep_freed_host_memory(
    *,
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD,
    trim_threshold: int = DEFAULT_TRIM_THRESHOLD,
) -> bool:
    """Make glibc keep freed memory for reuse instead of returning it to the system.

    Process-wide; call it once, before training (the ``kernel-layers`` console script does).

    Args:
        mmap_threshold: blocks at most this many bytes come from the heap, and are reused
            once freed (glibc's default starts at 128 KiB and grows to at most 32 MiB).
        trim_threshold: free memory at the top of the heap is handed back to the system
            only beyond this many bytes (glibc's default: twice the mmap threshold).

    Returns:
        bool: whether the settings were applied (``False`` off glibc: macOS, Windows,
        musl; there the system allocator is left as it is).

    Raises:
        TypeError: a threshold is not an integer.
        ValueError: a threshold is negative or above ``2**31 - 1``.
    """
    owner = "keep_freed_host_memory"
    thresholds = {"mmap_threshold": mmap_threshold, "trim_threshold": trim_threshold}
    for name, value in thresholds.items():
        if check_int(owner, name, value, minimum=0) > _INT_MAX:
            raise ValueError(
                f"{owner}: argument '{name}' must be an integer <= {_INT_MAX} (a C int, "
                f"as mallopt takes), got {value!r}"
            )
    mallopt = _mallopt()
    if mallopt is None:
        return False
    applied = mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    return mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1 and applied


def allocator_configured_by_user(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: the process's) configures glibc's allocator itself
    (then ``kernel-layers`` leaves it alone)."""
    env = os.environ if environ is None else environ
    return any(name in env for name in ALLOCATOR_ENV_VARIABLES)
