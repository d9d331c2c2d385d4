"""NysDI: DI of Nystrom features straight from inputs and landmarks (eq. 10 of the DI
paper), by an ``n x n`` solve."""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from kernel_layers._validation import check_dtype, check_features, check_matrix, check_positive
from kernel_layers.kernels import Kernel, get_kernel
from kernel_layers.kernels.functions import gaussian_gram, gaussian_kernel
from kernel_layers.numerics.deferred import active_checks
from kernel_layers.numerics.linalg import default_jitter
from kernel_layers.numerics.precision import (
    DISTANCE_OVERFLOW,
    SOLVE_DTYPE,
    autocast_off,
    data_limit,
    kernel_dtype,
    upcast,
)
from kernel_layers.objectives.autograd import _GaussianNysDIFunction, _NysDIFunction
from kernel_layers.objectives.di import DEFAULT_RHO, check_rho
from kernel_layers.objectives.statistics import Sync, global_num_classes
from kernel_layers.objectives.targets import encode_targets

__all__ = ["nystrom_discriminant_information"]


def _landmark_kernel(z: Tensor, spec: Kernel, gamma: float) -> Tensor:
    """``k(Z, Z)`` for NysDI, whose gradient to it (``-rho A A^T``) is symmetric: the
    Gaussian kernel's backward then skips its transposed sum (:func:`gaussian_gram`)."""
    if spec.matrix is gaussian_kernel:
        return gaussian_gram(z, gamma)
    return spec.matrix(z, z, gamma)


def _check_bandwidth(owner: str, bandwidth: object, width: int) -> None:
    """Raise unless ``bandwidth`` is a finite, positive ``Tensor[width]`` (the sign is
    recorded on the device instead under deferred checks: no host read in a step)."""
    check_features(owner, "bandwidth", bandwidth, width)
    assert isinstance(bandwidth, Tensor)  # check_features raised otherwise
    if bandwidth.ndim != 1:
        raise ValueError(
            f"{owner}: argument 'bandwidth' must have shape [{width}], got {list(bandwidth.shape)}"
        )
    message = f"{owner}: argument 'bandwidth' must be positive"
    checks = active_checks()
    if checks is not None:
        checks.record(ValueError, message + ", and a batch's was not", (bandwidth <= 0).any())
        return
    low = float(bandwidth.detach().min())
    if not low > 0:
        raise ValueError(f"{message}, got minimum {low:.3g}")


def nystrom_discriminant_information(
    x: Tensor,
    targets: Tensor,
    landmarks: Tensor,
    *,
    kernel: str | Kernel = "gaussian",
    gamma: float,
    rho: float = DEFAULT_RHO,
    jitter: float | None = None,
    num_classes: int | None = None,
    sync_dist: bool = False,
    process_group: dist.ProcessGroup | None = None,
    bandwidth: Tensor | None = None,
) -> Tensor:
    """NysDI, eq. (10) of the DI paper, straight from inputs and landmarks.

    With ``G = k(X, Z)`` and ``K_Z = k(Z, Z) + jitter * mean(diag) I``::

        NysDI = tr((G^T C G + rho K_Z)^+ G^T C Y Y^T C G)

    computed by a Cholesky factorisation of the ``n x n`` matrix ``G^T C G + rho K_Z``
    (no ``B x n`` solve). That matrix inherits ``K_Z``'s conditioning, so it is formed
    and factorised in float64 whatever the input dtype. It equals DI of the Nystrom
    features ``G R^-T`` (``K_Z = R R^T``), i.e. of :class:`~kernel_layers.NystromLayer`
    with the same landmarks and jitter. Gradients reach ``x`` and ``landmarks`` through ``G`` and
    ``K_Z``.

    Args:
        x (Tensor[B, D]): inputs.
        targets (Tensor[B] | Tensor[B, L]): labels or target matrix (as in
            :func:`discriminant_information`).
        landmarks (Tensor[n, D]): landmarks ``Z``.
        kernel: kernel name or :class:`~kernel_layers.kernels.Kernel`.
        gamma: kernel parameter ``> 0``.
        rho: ridge parameter ``> 0``.
        jitter: relative diagonal jitter of ``K_Z`` (default: the Nystrom layer's
            default for the dtype).
        num_classes: number of classes for integer labels.
        sync_dist: exact NysDI of the union of every process's batch (see
            :func:`discriminant_information`); the landmarks must be the same on every
            process.
        process_group: the group to reduce over (default: the world).
        bandwidth (Tensor[D] | None): per-dimension scales ``sigma > 0`` (automatic
            relevance determination): the kernel is evaluated on ``x * sigma`` and
            ``landmarks * sigma``, after the inputs are widened to the kernel matrices'
            dtype, so that narrow inputs keep their float64 precision; gradients reach
            ``sigma``. ``None``: no scaling.

    Returns:
        Tensor[]: NysDI, in ``x``'s dtype.
    """
    owner = "nystrom_discriminant_information"
    check_matrix(
        owner, "landmarks", landmarks, max_abs=data_limit(landmarks), why=DISTANCE_OVERFLOW
    )
    if landmarks.shape[0] == 0:
        raise ValueError(
            f"{owner}: argument 'landmarks' must have at least one row, got shape "
            f"{list(landmarks.shape)}"
        )
    check_matrix(
        owner, "x", x, width=landmarks.shape[1], max_abs=data_limit(x), why=DISTANCE_OVERFLOW
    )
    if bandwidth is not None:
        _check_bandwidth(owner, bandwidth, landmarks.shape[1])
    rho = check_rho(owner, rho)
    gamma = check_positive(owner, "gamma", gamma)
    spec = get_kernel(kernel, owner=owner)
    jitter = (
        default_jitter(landmarks.dtype)
        if jitter is None
        else check_positive(owner, "jitter", jitter)
    )
    batch = x.shape[0]
    if batch < 2:
        raise ValueError(f"{owner}: argument 'x' must have at least 2 rows, got {batch}")
    sync = Sync.create(sync_dist, process_group)
    num_classes = global_num_classes(targets, num_classes, sync)
    y, scale_columns = encode_targets(  # its statistics are summed in float64
        targets, batch, num_classes=num_classes, owner=owner, dtype=SOLVE_DTYPE
    )
    x = check_dtype(owner, "x", x, landmarks.dtype)
    with autocast_off(x):  # kernel distances never run in low precision
        x = upcast(x)
        # Narrow inputs: the kernel matrices in float64 as well (cheap next to the Gram).
        dtype = kernel_dtype(x.dtype, x.shape[1], landmarks.shape[0])
        if (
            spec.matrix is gaussian_kernel
            and bandwidth is None
            and dtype != x.dtype
            and not y.requires_grad
        ):  # and their gradient in x's dtype
            z = upcast(landmarks)
            return _GaussianNysDIFunction.apply(
                x, z, y, float(gamma), rho, jitter, scale_columns, owner, sync
            )
        z, wide = upcast(landmarks).to(dtype), x.to(dtype)
        if bandwidth is not None:  # scaled in the kernel's dtype: no float32 rounding
            sigma = upcast(bandwidth).to(dtype)
            z, wide = z * sigma, wide * sigma
        g = spec.matrix(wide, z, gamma)
        k_z = _landmark_kernel(z, spec, gamma)
    # G^T C G + rho K_Z inherits K_Z's conditioning: every statistic in SOLVE_DTYPE, the
    # B x J gradient in G's dtype.
    di = _NysDIFunction.apply(g, y, k_z, rho, jitter, scale_columns, owner, sync)
    return di.to(x.dtype)
