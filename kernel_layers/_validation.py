"""Argument checks: the one validation module of every public entry point (the tensor
checks live in :mod:`kernel_layers._tensor_checks` and are re-exported here).

Every message follows one format, ``"<owner>: argument '<name>' must be
<expectation>, got <value>"``, so a user sees at once which layer or function
complained, about which argument, what was expected and what arrived. One rule for the
exception type: a value of the wrong *type* raises ``TypeError``; a value of the right
type but outside the allowed set (range, shape, choices, finiteness) raises
``ValueError``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from numbers import Integral, Real
from typing import NoReturn

from kernel_layers._tensor_checks import (
    check_device,
    check_dtype,
    check_factory,
    check_features,
    check_finite,
    check_float_targets,
    check_labels,
    check_matrix,
    check_torch_device,
    is_compiling,
)

__all__ = [
    "caller_stacklevel",
    "check_bool",
    "check_choice",
    "check_device",
    "check_dtype",
    "check_factory",
    "check_features",
    "check_finite",
    "check_float_targets",
    "check_fraction",
    "check_int",
    "check_labels",
    "check_matrix",
    "check_nonnegative",
    "check_positive",
    "check_real",
    "check_torch_device",
    "is_compiling",
    "raise_not_scriptable",
]


def check_int(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    integral_float: bool = False,
) -> int:
    """Return ``value`` as an ``int`` if it is an integer ``>= minimum``, else raise.

    Args:
        owner: the layer or function name used in messages.
        name: the argument name used in messages.
        value: the value to check.
        minimum: the least value accepted.
        maximum: the largest value accepted (default :data:`INT64_MAX`, the most a torch
            size or count holds).
        integral_float: also accept floats with an integral value (``3.0``), as
            scikit-learn does for a kernel's ``degree``; ``1.5`` is still refused.

    Raises:
        TypeError: ``value`` is not an integer (``bool`` is rejected too).
        ValueError: ``value < minimum`` or ``value > maximum``.
    """
    integral = isinstance(value, Integral) or (
        integral_float and isinstance(value, Real) and float(value).is_integer()
    )
    if isinstance(value, bool) or not integral:
        raise TypeError(
            f"{owner}: argument '{name}' must be an integer >= {minimum}, got {value!r}"
        )
    number = int(value)  # type: ignore[call-overload]  # Integral or an integral Real
    if number < minimum:
        raise ValueError(f"{owner}: argument '{name}' must be an integer >= {minimum}, got {value}")
    largest = INT64_MAX if maximum is None else maximum
    if number > largest:
        raise ValueError(f"{owner}: argument '{name}' must be an integer <= {largest}, got {value}")
    return number


#: The largest integer a torch size or count can hold (:func:`check_int`'s default bound).
INT64_MAX = 2**63 - 1
#: The largest seed ``torch.Generator.manual_seed`` takes.
UINT64_MAX = 2**64 - 1


def _as_float(owner: str, name: str, value: object, expected: str) -> float:
    """``float(value)`` of a real number, its overflow refused by name."""
    try:
        return float(value)  # type: ignore[arg-type]  # a Real, checked by the caller
    except OverflowError:
        raise ValueError(f"{owner}: argument '{name}' must be {expected}, got {value!r}") from None


def raise_not_scriptable(owner: str) -> NoReturn:
    """Refuse ``torch.jit.script`` with the ways that work (called from
    ``__prepare_scriptable__``, which ``torch.jit.script`` calls first).

    Raises:
        RuntimeError: always.
    """
    raise RuntimeError(
        f"{owner}: torch.jit.script is not supported (the layer validates arguments and "
        "dispatches kernels in Python); use torch.jit.trace, torch.export.export, "
        "torch.onnx.export or torch.compile instead"
    )


def check_bool(owner: str, name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool``, else raise.

    Raises:
        TypeError: ``value`` is not a ``bool`` (``0`` / ``1`` are refused too).
    """
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: argument '{name}' must be a bool, got {value!r}")
    return value


def check_choice(owner: str, name: str, value: object, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of the strings ``choices``, else raise.

    Raises:
        TypeError: ``value`` is not a string.
        ValueError: ``value`` is not among ``choices`` (the message lists them).
    """
    if not isinstance(value, str):
        raise TypeError(f"{owner}: argument '{name}' must be one of {list(choices)}, got {value!r}")
    if value not in choices:
        raise ValueError(
            f"{owner}: argument '{name}' must be one of {list(choices)}, got {value!r}"
        )
    return value


def check_positive(owner: str, name: str, value: object) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number ``> 0``, else raise.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` is not finite or not positive.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{owner}: argument '{name}' must be a number > 0, got {value!r}")
    value = _as_float(owner, name, value, "a finite number > 0")
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{owner}: argument '{name}' must be a finite number > 0, got {value}")
    return value


def check_real(owner: str, name: str, value: object) -> float:
    """Return ``value`` as a finite ``float``, else raise.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` is not finite.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{owner}: argument '{name}' must be a finite number, got {value!r}")
    value = _as_float(owner, name, value, "a finite number")
    if not math.isfinite(value):
        raise ValueError(f"{owner}: argument '{name}' must be a finite number, got {value}")
    return value


def check_nonnegative(owner: str, name: str, value: object) -> float:
    """Return ``value`` as a finite ``float >= 0``, else raise.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` is not finite or negative.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{owner}: argument '{name}' must be a number >= 0, got {value!r}")
    value = _as_float(owner, name, value, "a finite number >= 0")
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{owner}: argument '{name}' must be a finite number >= 0, got {value}")
    return value


def check_fraction(owner: str, name: str, value: object, *, include_zero: bool = False) -> float:
    """Return ``value`` as a ``float`` in ``(0, 1)`` (``[0, 1)`` with ``include_zero``).

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` is outside the interval.
    """
    interval = "[0, 1)" if include_zero else "(0, 1)"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{owner}: argument '{name}' must be a number in {interval}, got {value!r}")
    number = _as_float(owner, name, value, f"a number in {interval}")
    low_ok = number >= 0.0 if include_zero else number > 0.0
    if not (low_ok and number < 1.0):
        raise ValueError(f"{owner}: argument '{name}' must be in {interval}, got {value!r}")
    return number


def caller_stacklevel() -> int:
    """The ``stacklevel`` for which ``warnings.warn``, called by the function that calls
    this one, names the first caller outside the ``kernel_layers`` package: the user's
    line (an estimator's ``fit``, say), through any of the library's layers."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
        "kernel_layers."
    ):
        level, frame = level + 1, frame.f_back
    return level
