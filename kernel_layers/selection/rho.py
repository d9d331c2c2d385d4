"""DI's ridge parameter from the number of batches in an epoch (classification), or from
the read-out's penalty shared out over them (regression).

With few batches per epoch, every step maximises DI on nearly the same rows. With the
paper's tiny ridge ``rho = 1e-4``, DI then also grows along feature directions of tiny
variance, reaches its ceiling ``L - 1`` on the training rows, and the map fits those rows
rather than the data, below the untrained map on held-out rows. A ridge of ``0.1`` keeps
those directions out of DI; with many batches per epoch it costs accuracy instead, so the
paper's value stays there. The small-data suite measures both (benchmarks/README.md,
"Small-data suite").

A regressor's DI instead takes the penalty its ridge read-out will use, divided by the
batches of an epoch (:func:`rho_from_penalty`): DI is then the in-batch fit of that very
ridge regression, and noisy targets, whose read-out takes a large penalty, keep the map
from learning their noise.
"""

from __future__ import annotations

from numbers import Real

from kernel_layers._validation import check_nonnegative
from kernel_layers.objectives import DEFAULT_RHO

__all__ = [
    "SMALL_DATA_BATCHES",
    "SMALL_DATA_RHO",
    "is_small_data",
    "rho_for_epoch",
    "rho_from_penalty",
]

#: An epoch of fewer batches than this is small data ...
SMALL_DATA_BATCHES = 8
#: ... and gets this ridge parameter instead of the paper's.
SMALL_DATA_RHO = 0.1


def is_small_data(batches: float) -> bool:
    """Whether an epoch of ``batches`` batches is small data (fewer than
    ``SMALL_DATA_BATCHES``; an endless epoch, ``inf``, is not)."""
    return batches < SMALL_DATA_BATCHES


def rho_for_epoch(batches: float) -> float:
    """DI's ridge parameter for an epoch of ``batches`` batches: the paper's ``1e-4``
    from ``SMALL_DATA_BATCHES`` batches on (an endless epoch included), ``SMALL_DATA_RHO``
    below.

    Raises:
        TypeError: ``batches`` is not a real number.
        ValueError: ``batches`` is not ``>= 1`` (or ``inf``).
    """
    _check_batches("rho_for_epoch", batches)
    return SMALL_DATA_RHO if is_small_data(batches) else DEFAULT_RHO


def rho_from_penalty(penalty: float, batches: float) -> float:
    """DI's ridge parameter for a read-out penalty ``penalty`` (on the scatter of every
    training row) and ``batches`` batches per epoch: each batch's share,
    ``penalty / batches``, and never below the paper's ``1e-4`` (a map whose features
    barely vary gets a penalty near zero, and DI no usable ridge; an endless epoch,
    ``batches = inf``, gets ``1e-4``).

    Raises:
        TypeError: ``penalty`` or ``batches`` is not a real number.
        ValueError: ``penalty`` is not finite and ``>= 0``, or ``batches`` not ``>= 1``
            (or ``inf``).
    """
    check_nonnegative("rho_from_penalty", "penalty", penalty)
    _check_batches("rho_from_penalty", batches)
    return max(float(penalty) / float(batches), DEFAULT_RHO)


def _check_batches(owner: str, batches: object) -> None:
    """Refuse ``batches`` unless it is a real number ``>= 1`` (``inf`` included)."""
    message = f"{owner}: argument 'batches' must be a number >= 1 (or inf), got {batches!r}"
    if isinstance(batches, bool) or not isinstance(batches, Real):
        raise TypeError(message)
    if not float(batches) >= 1:
        raise ValueError(message)
