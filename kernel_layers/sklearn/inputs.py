"""What the scikit-learn estimators read from ``X`` beyond scikit-learn's
``validate_data``: the kernel's domain and the map's input limit, checked with messages
that name the estimator and ``X``, and the default ``gamma``."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from kernel_layers._tensor_checks import check_features
from kernel_layers.kernels.registry import get_kernel
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.numerics.precision import DISTANCE_OVERFLOW, distance_limit
from kernel_layers.selection.heuristic import gamma_heuristic

__all__ = ["check_rows", "default_gamma", "map_rows", "training_features"]


def check_rows(owner: str, kernel: str, x: Tensor, limit: float | None = None) -> None:
    """Refuse rows ``x [N, D]`` (float64) that ``kernel``'s map cannot take: entries
    beyond ``limit`` (default: what float64 squared distances over ``D`` dimensions hold,
    the maps' :meth:`~kernel_layers.layers.base.KernelFeatureMap.input_limit`) or
    outside the kernel's domain (``"chi2"``: non-negative).

    Raises:
        ValueError: naming ``owner``, ``X``, the bound and the offending value.
    """
    if limit is None:
        limit = distance_limit(x.dtype, x.shape[-1])
    check_features(owner, "X", x, x.shape[-1], max_abs=limit, why=DISTANCE_OVERFLOW)
    get_kernel(kernel, owner=owner).bind(None, owner=owner).validate_input(owner, "X", x)


def map_rows(owner: str, layer: KernelFeatureMap, X: np.ndarray) -> np.ndarray:
    """``layer``'s features ``[N, J]`` (float64, on the CPU) of the validated rows ``X
    [N, D]``, which :func:`check_rows` checks first."""
    device = next(layer.parameters()).device
    x = torch.tensor(X, dtype=torch.float64, device=device)  # a copy: X may be read-only
    check_rows(owner, str(getattr(layer, "kernel", "gaussian")), x, layer.input_limit())
    with torch.no_grad():
        return layer(x).cpu().numpy()


def training_features(owner: str, layer: KernelFeatureMap, X: np.ndarray) -> np.ndarray:
    """:func:`map_rows` of the training rows ``X [N, D]``, identical rows given one
    feature row ``[N, J]``: a matrix product places rows in different blocks, so the
    features of identical rows can differ in their last bits, and a read-out fitted on
    them could read those bits (constant ``X``: a perfect fit of labels that carry
    nothing, and identical rows predicted apart)."""
    unique, inverse = np.unique(X, axis=0, return_inverse=True)
    return map_rows(owner, layer, unique)[inverse.reshape(-1)]


def default_gamma(X: np.ndarray, kernel: str) -> float:
    """``gamma=None``'s value: :func:`~kernel_layers.selection.heuristic.gamma_heuristic`
    of ``X [N, D]`` in ``kernel``'s unit, or 1 for constant data (which it refuses)."""
    try:
        return gamma_heuristic(X, kernel)
    except ValueError:
        return 1.0
