"""The autograd Functions of DI and NysDI, with closed-form backward passes.

With ``A = S^-1 M`` (:mod:`.solve`) the gradient is ``dDI/dPhi = 2 (Y_c - Phi_c A) A^T``
(already centred), so the backward costs ``O(B J L)`` and needs no ``B x J x J``
product; ``dDI/dR = -A A^T`` reaches NysDI's landmark kernel. Under a
:class:`~kernel_layers.objectives.statistics.Sync` every process holds the global
``A``, and its rows of the gradient are exactly the matching rows of the
single-process gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernel_layers.kernels.autograd import gaussian_grads, gaussian_matrix
from kernel_layers.numerics.linalg import refuse_double_backward
from kernel_layers.numerics.precision import SOLVE_DTYPE, autocast_off, upcast
from kernel_layers.objectives.solve import di_solve, naming_square_overflow, nysdi_solve
from kernel_layers.objectives.statistics import Sync

__all__ = ["_DIFunction", "_GaussianNysDIFunction", "_NysDIFunction"]


def _feature_gradients(
    ctx, grad: Tensor, residual: Tensor, a: Tensor, y_c: Tensor
) -> tuple[Tensor | None, Tensor | None]:
    """DI's gradients ``2 (Y_c - Phi_c A) A^T`` to the features and ``2 Phi_c A`` to the
    targets (inputs 0 and 1 of ``ctx``'s function), in ``a``'s dtype."""
    grad_features = grad_targets = None
    if ctx.needs_input_grad[0]:
        grad_features = (residual * (2.0 * grad.to(a.dtype))) @ a.mT
    if ctx.needs_input_grad[1]:
        grad_targets = (2.0 * grad.to(a.dtype)) * (y_c - residual)
    return grad_features, grad_targets


def _landmark_gradient(ctx, grad: Tensor, a: Tensor) -> Tensor:
    """NysDI's gradient ``-rho A A^T`` to ``K`` (one ``[n, n]`` product in ``a``'s
    dtype), divided by the world size under ``sync``: every process computes it in full
    and data-parallel training sums the processes' parts."""
    factor = grad.to(a.dtype) * (-ctx.rho / ctx.world_size)
    return (a * factor) @ a.mT


class _DIFunction(torch.autograd.Function):
    """DI (:func:`~kernel_layers.objectives.solve.di_solve`) with the closed-form
    backward ``dDI/dPhi = 2 (Y_c - Phi_c A) A^T``."""

    @staticmethod
    def forward(
        ctx,
        features: Tensor,
        targets: Tensor,
        rho: float,
        scale_columns: bool,
        form: str,
        owner: str,
        sync: Sync | None = None,
        check_values: bool = False,
    ) -> Tensor:
        with autocast_off(features):
            features = upcast(features)
            with naming_square_overflow(owner, features):
                di, residual, a, y_c = di_solve(
                    features, targets, rho, scale_columns, form, owner, sync, check_values
                )
            ctx.save_for_backward(residual, a, y_c)
            return di.to(features.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("discriminant_information")
        residual, a, y_c = ctx.saved_tensors
        grad_features, grad_targets = _feature_gradients(ctx, grad, residual, a, y_c)
        return grad_features, grad_targets, None, None, None, None, None, None


class _NysDIFunction(torch.autograd.Function):
    """NysDI (eq. 10) from ``G = k(X, Z)`` and the landmark kernel ``K = k(Z, Z)``
    (:func:`~kernel_layers.objectives.solve.nysdi_solve`): DI's closed-form gradient to
    ``G`` in ``G``'s dtype, and ``-rho A A^T`` to ``K`` in ``K``'s dtype (the jitter is a
    constant shift, as in :func:`~kernel_layers.numerics.linalg.landmark_gram`).
    """

    @staticmethod
    def forward(
        ctx,
        features: Tensor,
        targets: Tensor,
        kernel: Tensor,
        rho: float,
        jitter: float,
        scale_columns: bool,
        owner: str,
        sync: Sync | None = None,
    ) -> Tensor:
        with autocast_off(features):
            features = upcast(features)
            di, residual, a64, y_c = nysdi_solve(
                features, targets, kernel, rho, jitter, scale_columns, owner, sync
            )
            dtype = features.dtype
            ctx.save_for_backward(residual.to(dtype), a64.to(dtype), y_c.to(dtype), a64)
            ctx.rho, ctx.kernel_dtype = rho, kernel.dtype
            ctx.world_size = 1 if sync is None else sync.world_size
            return di.to(features.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("nystrom_discriminant_information")
        residual, a, y_c, a64 = ctx.saved_tensors
        grad_features, grad_targets = _feature_gradients(ctx, grad, residual, a, y_c)
        grad_kernel = None
        if ctx.needs_input_grad[2]:
            # Straight in K's dtype (no float64 pass).
            grad_kernel = _landmark_gradient(ctx, grad, a64.to(ctx.kernel_dtype))
        return grad_features, grad_targets, grad_kernel, None, None, None, None, None


class _GaussianNysDIFunction(torch.autograd.Function):
    """NysDI with the Gaussian kernel, from the inputs ``X`` and landmarks ``Z`` of a
    dtype narrower than :data:`~kernel_layers.numerics.precision.SOLVE_DTYPE`: ``G`` and
    ``K_Z`` are evaluated in that dtype (NysDI's value needs them there, see
    :func:`~kernel_layers.numerics.precision.kernel_dtype`) and the forward is
    :class:`_NysDIFunction`'s, bit for bit; the backward runs in the inputs' dtype
    (``G``, ``K_Z``, the residual and ``A`` rounded to it once), which the value does not
    read (see benchmarks/nysdi_precision.py for the gradients' agreement).
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        landmarks: Tensor,
        targets: Tensor,
        gamma: float,
        rho: float,
        jitter: float,
        scale_columns: bool,
        owner: str,
        sync: Sync | None = None,
    ) -> Tensor:
        wide, dtype = SOLVE_DTYPE, x.dtype
        x_w, z_w = x.to(wide), landmarks.to(wide)
        # G straight into the solve's wide buffer (no copy into it), read in x's dtype
        # for the backward before the solve centres it there. Compilers get a G of its
        # own (a product into a view of a wider buffer broke AOTAutograd's trace).
        joint = None
        if not torch.compiler.is_compiling():
            joint = x_w.new_empty(x.shape[0], landmarks.shape[0] + targets.shape[1])
        g = gaussian_matrix(
            x_w, z_w, gamma, out=None if joint is None else joint[:, : landmarks.shape[0]]
        )
        g_narrow = g.to(dtype)
        k = gaussian_matrix(z_w, z_w, gamma, symmetric=True)
        di, residual, a64, _ = nysdi_solve(
            g, targets, k, rho, jitter, scale_columns, owner, sync, joint=joint
        )
        ctx.save_for_backward(
            x, landmarks, g_narrow, k.to(dtype), residual.to(dtype), a64.to(dtype)
        )
        ctx.gamma, ctx.rho = gamma, rho
        ctx.world_size = 1 if sync is None else sync.world_size
        return di.to(dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        refuse_double_backward("nystrom_discriminant_information")
        x, z, g, k, residual, a = ctx.saved_tensors
        need_x, need_z = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_g = (residual * (2.0 * grad.to(a.dtype))) @ a.mT
        grad_x, grad_z = gaussian_grads(x, z, g, grad_g, ctx.gamma, need_x=need_x, need_z=need_z)
        if need_z:
            grad_k = _landmark_gradient(ctx, grad, a)
            via_k, _ = gaussian_grads(
                z, z, k, grad_k, ctx.gamma, symmetric=True, symmetric_grad=True
            )
            assert grad_z is not None and via_k is not None
            grad_z = grad_z.add_(via_k)
        return grad_x, grad_z, None, None, None, None, None, None, None
