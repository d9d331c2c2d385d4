"""Deferred checks: failures recorded on the device and read by the host once.

Every check of the library (finite inputs, label ranges, Cholesky success, a finite
objective) normally reads a device value on the host, which on a GPU waits for the
queued kernels: a synchronisation per check. Inside :func:`deferred_checks` the checks
instead record a boolean tensor in a :class:`DeferredChecks`, computed on the device and
not read; :meth:`DeferredChecks.first_failure` reads them all at once (one
synchronisation), e.g. at the end of a training epoch (``KernelClassifier`` on a GPU
by default, or with ``check_every="epoch"``; read by
:class:`kernel_layers.training.deferred.EpochChecks`). Torch only: the numerics and
objectives record into it without importing the training package.

What deferral gives up: a failure is reported when the flags are read, not at the
step that caused it, and a Cholesky factorisation that fails is reported instead of
retried with a growing jitter (the retry needs the host to see the failure).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch
from torch import Tensor

__all__ = ["DeferredChecks", "active_checks", "deferred_checks"]

_ACTIVE: contextvars.ContextVar[DeferredChecks | None] = contextvars.ContextVar(
    "kernel_layers_deferred_checks", default=None
)


#: The record number of a check that has not failed (larger than any record's).
_NEVER = 2**62


class DeferredChecks:
    """Failure flags kept on the device until :meth:`first_failure` reads them.

    Each distinct ``(error type, message)`` holds one int64 scalar tensor: the number of
    the first record in which that check failed (:data:`_NEVER` while it has not), updated with
    every later record of the same check, so memory stays constant over an epoch and
    the failure reported is the earliest one, the cause (a NaN input) before its
    consequences (landmarks made NaN by the step that read it).
    """

    def __init__(self) -> None:
        self._first: dict[tuple[type[Exception], str], Tensor] = {}
        self._records = 0

    def record(self, error: type[Exception], message: str, failed: Tensor) -> None:
        """Add a check's outcome without reading it.

        Args:
            error: the exception type to report it with.
            message: the message naming the argument, the expectation and the context.
            failed (Tensor[]): ``True`` where the check failed (any shape with one
                element, any device).
        """
        key = (error, message)
        flag = failed.detach().reshape(()).to(torch.bool)
        # Python integers go to the kernel as arguments (int64: exact at any count, in
        # any default dtype): nothing is copied to the device or read from it
        at = torch.where(flag, self._records, _NEVER)
        self._records += 1
        previous = self._first.get(key)
        self._first[key] = (
            at if previous is None else torch.minimum(previous, at.to(previous.device))
        )

    def first_failure(self) -> Exception | None:
        """Read every check at once; the one that failed first as an exception, or
        ``None``."""
        if not self._first:
            return None
        keys = list(self._first)
        device = self._first[keys[0]].device
        firsts = torch.stack([self._first[key].to(device) for key in keys]).tolist()
        failed = [(at, index) for index, at in enumerate(firsts) if at != _NEVER]
        if not failed:
            return None
        error, message = keys[min(failed)[1]]
        return error(message)

    def reset(self) -> None:
        """Forget every recorded check."""
        self._first.clear()
        self._records = 0

    def __len__(self) -> int:
        return len(self._first)


def active_checks() -> DeferredChecks | None:
    """The :class:`DeferredChecks` that checks record into now, or ``None`` (checks
    read their values at once)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def deferred_checks(checks: DeferredChecks) -> Iterator[DeferredChecks]:
    """Within the block, the library's checks record into ``checks`` instead of reading
    device values (no host synchronisation); read them with
    :meth:`DeferredChecks.first_failure`."""
    token = _ACTIVE.set(checks)
    try:
        yield checks
    finally:
        _ACTIVE.reset(token)
