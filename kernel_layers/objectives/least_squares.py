"""The least-squares (ridge) objective of the DI paper's LS baseline."""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers._validation import check_finite, check_matrix
from kernel_layers.objectives.di import DEFAULT_RHO, check_rho
from kernel_layers.objectives.statistics import unit_column_scale
from kernel_layers.objectives.targets import encode_targets

__all__ = ["least_squares_loss"]


def least_squares_loss(
    features: Tensor,
    targets: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    rho: float = DEFAULT_RHO,
    num_classes: int | None = None,
) -> Tensor:
    """Ridge loss of the paper's LS baseline: ``||Y - Phi W - b||_F^2 + rho ||W||_F^2``.

    Targets are encoded as in :func:`discriminant_information` (unit-norm one-hot
    columns for labels), so at the optimal ``W, b`` this equals ``||Y_c||^2 - DI``.

    Args:
        features (Tensor[B, J]): features ``Phi``.
        targets (Tensor[B] | Tensor[B, L]): labels or target matrix.
        weight (Tensor[J, L]): read-out weights ``W``.
        bias (Tensor[L] | None): read-out bias ``b``.
        rho: ridge parameter ``> 0``.
        num_classes: number of classes for integer labels.

    Returns:
        Tensor[]: the loss.
    """
    owner = "least_squares_loss"
    check_matrix(owner, "features", features)
    rho = check_rho(owner, rho)
    y, scale_columns = encode_targets(
        targets, features.shape[0], num_classes=num_classes, owner=owner
    )
    y = y.to(features.dtype)
    if scale_columns:
        y = y * unit_column_scale(y.sum(0))
    expected = {"weight": (features.shape[1], y.shape[1]), "bias": (y.shape[1],)}
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None:
            _check_parameter(owner, name, value, expected[name], features)
    residual = y - features @ weight
    if bias is not None:
        residual = residual - bias
    return (residual * residual).sum() + rho * (weight * weight).sum()


def _check_parameter(
    owner: str, name: str, value: object, shape: tuple[int, ...], features: Tensor
) -> None:
    """Raise unless ``value`` is a finite floating tensor of ``shape`` on ``features``'
    device, of their dtype (under autocast, which casts both, a precision other than
    float64 may differ)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{owner}: argument '{name}' must be a torch.Tensor, got {value!r}")
    if value.shape != shape:
        raise ValueError(
            f"{owner}: argument '{name}' must have shape {list(shape)}, got {list(value.shape)}"
        )
    if not value.is_floating_point() or value.device != features.device:
        raise TypeError(
            f"{owner}: argument '{name}' must be a floating tensor on the features' device "
            f"({features.device}), got {value.dtype} on {value.device}"
        )
    autocast = torch.is_autocast_enabled(features.device.type)  # casts all but float64
    if value.dtype != features.dtype and (
        not autocast or torch.float64 in (value.dtype, features.dtype)
    ):
        raise TypeError(
            f"{owner}: argument '{name}' must have the features' dtype ({features.dtype}; "
            f"under autocast a lower precision too, but not float64), got {value.dtype}"
        )
    check_finite(owner, name, value)
