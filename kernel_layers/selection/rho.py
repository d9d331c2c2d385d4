"""DI's ridge parameter from the number of batches in an epoch (classification), or from
the read-out's penalty shared out over them (regression).

Measured on the small-data suite (benchmarks/README.md): with few batches per epoch,
every step maximises DI on nearly the same rows. With the paper's tiny ridge
``rho = 1e-4``, DI then also grows along feature directions of tiny variance, reaches its
ceiling ``L - 1`` on the training rows, and the map fits those rows rather than the data:
test accuracy falls below the untrained map's (on 7 of the suite's 12 data sets, by up
to 7.8 points: Pima, 67.97 % against 75.76 %). A ridge of ``0.1`` keeps those
directions out of DI; with many batches per epoch it costs accuracy instead, so the
paper's value stays there.

A regressor's DI instead takes the penalty its ridge read-out will use, divided by the
batches of an epoch (:func:`rho_from_penalty`): DI is then the in-batch fit of that very
ridge regression, and noisy targets, whose read-out takes a large penalty, keep the map
from learning their noise.
"""

from __future__ import annotations

import math
from numbers import Real

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
        ValueError: ``batches`` is not a number ``>= 1`` (or ``inf``).
    """
    if not isinstance(batches, Real) or isinstance(batches, bool) or not batches >= 1:
        raise ValueError(
            f"rho_for_epoch: argument 'batches' must be a number >= 1 (or inf), got {batches!r}"
        )
    return SMALL_DATA_RHO if is_small_data(batches) else DEFAULT_RHO


def rho_from_penalty(penalty: float, batches: float) -> float:
    """DI's ridge parameter for a read-out penalty ``penalty`` (on the scatter of every
    training row) and ``batches`` batches per epoch: each batch's share,
    ``penalty / batches``, and never below the paper's ``1e-4`` (a map whose features
    barely vary gets a penalty near zero, and DI no usable ridge; an endless epoch,
    ``batches = inf``, gets ``1e-4``).

    Raises:
        ValueError: ``penalty`` is not a finite number ``>= 0``, or ``batches`` not a
            number ``>= 1`` (or ``inf``).
    """
    checks = (("penalty", penalty, 0.0, "a finite number"), ("batches", batches, 1.0, "a number"))
    for name, value, least, kind in checks:
        bad_type = not isinstance(value, Real) or isinstance(value, bool)
        if bad_type or not value >= least or (name == "penalty" and math.isinf(value)):
            raise ValueError(
                f"rho_from_penalty: argument {name!r} must be {kind} >= {least:g}, got {value!r}"
            )
    return max(float(penalty) / float(batches), DEFAULT_RHO)
