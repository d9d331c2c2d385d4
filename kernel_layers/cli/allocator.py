"""Keep freed host memory in the process, so that a training step's buffers are reused.

A DI step allocates and frees the same few ``B x J`` and ``J x J`` buffers every time.
With glibc's default settings, blocks that large are handed back to the kernel when
freed (``munmap``, or trimming the top of the heap), and the next step faults every page
back in. On the machine measured (benchmarks/README.md, "Host memory") a float32 Fourier
step at ``(B, D, J) = (1000, 54, 500)`` took 602 page faults and 13.9 ms with the default
settings against none and 9.9 ms with freed memory kept; at ``(2000, 784, 1000)`` 2734
faults cost about 6 ms a step. This is what PyTorch's performance guide obtains with
jemalloc or tcmalloc; :func:`keep_freed_host_memory` gets it from glibc itself through
``mallopt``.

The cost: memory freed inside the process is kept for later allocations instead of
being returned to the system, so the resident size stays near its peak (the peak
itself does not grow). The ``kernel-layers`` command applies it at start-up unless
``KERNEL_LAYERS_HOST_MEMORY=default`` is set or the user configured glibc's allocator
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``); in a
script of your own, call it once before training.
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
    "HOST_MEMORY_ENV",
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

#: ``KERNEL_LAYERS_HOST_MEMORY=default`` keeps glibc's defaults in ``kernel-layers``.
HOST_MEMORY_ENV = "KERNEL_LAYERS_HOST_MEMORY"
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

    Process-wide; call it once, before training (the ``kernel-layers`` command does).

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
    """Whether ``environ`` (default: the process's) opts out of
    :func:`keep_freed_host_memory` or configures glibc's allocator itself."""
    env = os.environ if environ is None else environ
    if env.get(HOST_MEMORY_ENV, "").strip().lower() == "default":
        return True
    return any(name in env for name in ALLOCATOR_ENV_VARIABLES)
