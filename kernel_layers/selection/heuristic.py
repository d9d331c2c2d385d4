"""The kernels' ``gamma`` heuristic and the default grid of the Gaussian's around it.

Gamma follows scikit-learn's convention, ``k(x, y) = exp(-gamma ||x - y||^2)``.
:func:`gamma_heuristic` is scikit-learn's ``gamma="scale"`` rule,
``gamma = 1 / (D * Var(X))``, the variance taken over all entries of ``X``: it makes
``gamma ||x - y||^2`` of order one for typical pairs of rows, whatever the scale of the
features. Kernels whose ``gamma`` multiplies distances rather than squared distances
(the Laplacian, chi2; :attr:`~kernel_layers.kernels.Kernel.gamma_power` 1) take
``1 / (D * Std(X))`` instead, of the same unit as their ``gamma``. It is the default of
the scikit-learn estimators. :func:`default_gammas` is the grid
of :func:`~kernel_layers.selection.gamma.select_gamma`, the heuristic times
``2^-6, 2^-4, ..., 2^6``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from kernel_layers._validation import check_matrix
from kernel_layers.kernels.registry import Kernel, get_kernel

__all__ = ["GRID_BASE", "GRID_EXPONENTS", "default_gammas", "gamma_heuristic"]

#: The default grid is ``gamma_heuristic(x) * GRID_BASE ** e`` for ``e`` in
#: :data:`GRID_EXPONENTS`: seven values from 1/64 to 64 times the heuristic, which
#: spans the underfitting (near-linear kernel) to overfitting (near-diagonal kernel)
#: range on typical data while costing seven fits per fold.
GRID_BASE = 2.0
#: Exponents of :data:`GRID_BASE` in the default grid (``-6, -4, ..., 6``).
GRID_EXPONENTS = tuple(range(-6, 7, 2))


def _as_float64_matrix(owner: str, name: str, x: object) -> Tensor:
    """``x`` (array-like or tensor ``[N, D]``) as a finite float64 tensor, else raise.

    Tensors keep their device; anything else becomes a CPU tensor.

    Raises:
        TypeError: ``x`` is not real-valued numeric data.
        ValueError: ``x`` is not 2-D, has no row or column, or holds NaN/Inf.
    """
    if isinstance(x, Tensor):
        if x.is_complex():
            raise TypeError(
                f"{owner}: argument '{name}' must be a real-valued tensor, got dtype {x.dtype}"
            )
        t = x.detach().to(torch.float64)
    else:
        array = np.asarray(x)
        if array.dtype.kind not in "biuf":
            raise TypeError(
                f"{owner}: argument '{name}' must be a real-valued array or tensor, "
                f"got {type(x).__name__} of dtype {array.dtype}"
            )
        array = array.astype(np.float64, copy=False)
        if not array.flags.writeable:
            array = array.copy()
        t = torch.from_numpy(array)
    check_matrix(owner, name, t)
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(
            f"{owner}: argument '{name}' must have at least one row and one column, "
            f"got shape {list(t.shape)}"
        )
    return t


def _variance_gamma(owner: str, x: Tensor, power: int = 2) -> float:
    """``1 / (D * Var(x) ** (power / 2))`` of a validated float64 ``x (Tensor[N, D])``."""
    variance = float(x.var(correction=0))
    gamma = 1.0 / (x.shape[1] * variance ** (power / 2)) if variance > 0.0 else math.inf
    if not math.isfinite(gamma):
        raise ValueError(
            f"{owner}: argument 'x' must have a positive variance (non-constant data), "
            f"got variance {variance}"
        )
    return gamma


def gamma_heuristic(x: Tensor | np.ndarray, kernel: str | Kernel = "gaussian") -> float:
    """scikit-learn's ``gamma="scale"``, ``1 / (D * Var(X))``, in the unit of
    ``kernel``'s ``gamma``.

    ``Var`` is the population variance (``ddof=0``) over all ``N * D`` entries, as
    ``X.var()`` in scikit-learn's ``SVC``. A kernel whose ``gamma`` multiplies distances
    (:attr:`~kernel_layers.kernels.Kernel.gamma_power` 1: ``"laplacian"``, ``"chi2"``,
    the skewed kernels) takes ``1 / (D * Var(X) ** 0.5)``, so that ``X`` in any unit
    gives the same kernel matrix; one with an input transform (the skewed kernels'
    ``log(x + c)``) takes the variance of the transformed ``X``. Unlike scikit-learn,
    which falls back to ``gamma = 1`` on constant data, this raises.

    Args:
        x (Tensor[N, D] | ndarray[N, D]): data (computed in float64).
        kernel: a registered kernel name or a :class:`~kernel_layers.kernels.Kernel`
            (its parameters at their defaults).

    Returns:
        float: the heuristic ``gamma > 0``.

    Raises:
        TypeError: ``x`` is not real-valued numeric data.
        ValueError: ``x`` is not 2-D, is empty, holds NaN/Inf, lies outside the kernel's
            domain, or is constant; an unknown kernel name.
    """
    owner = "gamma_heuristic"
    spec = get_kernel(kernel, owner=owner).bind(None, owner=owner)
    rows = _as_float64_matrix(owner, "x", x)
    spec.validate_input(owner, "x", rows)
    if spec.transform is not None:
        rows = spec.transform(rows)
    return _variance_gamma(owner, rows, spec.gamma_power)


def _variance_default(owner: str, x: Tensor) -> list[float]:
    """:func:`default_gammas` of a validated float64 ``x``, messages naming ``owner``."""
    heuristic = _variance_gamma(owner, x)
    return [heuristic * GRID_BASE**e for e in GRID_EXPONENTS]


def default_gammas(x: Tensor | np.ndarray) -> list[float]:
    """The default grid of ``select_gamma``: ``gamma_heuristic(x) * 2^e``, ``e = -6, ..., 6``.

    Args:
        x (Tensor[N, D] | ndarray[N, D]): data.

    Returns:
        list[float]: seven increasing values, the heuristic in the middle.
    """
    owner = "default_gammas"
    return _variance_default(owner, _as_float64_matrix(owner, "x", x))
