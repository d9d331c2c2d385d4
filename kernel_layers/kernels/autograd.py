"""Custom autograd functions behind the kernel matrices: memory-lean fused backward passes.

* :class:`GaussianKernelFunction`: ``exp(-gamma ||x - z||^2)`` from one matrix product,
  backward as two products (both also as plain functions, :func:`gaussian_matrix` and
  :func:`gaussian_grads`, for callers that evaluate the kernel in one dtype and
  differentiate it in another).
* :class:`ProductKernelFunction`: product kernels ``prod_i f(x_i, z_i)`` accumulated over
  chunks of dimensions in ``O(B n)`` memory, per-dimension derivatives recomputed in
  the backward pass (no ``[B, n, D]`` tensor is ever formed).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_layers.numerics.linalg import refuse_double_backward

__all__ = [
    "GaussianKernelFunction",
    "ProductKernelFunction",
    "cauchy_factor",
    "chi2_factor",
    "gaussian_grads",
    "gaussian_matrix",
    "sech_factor",
    "squared_distances",
]

#: Product kernels process dimensions in chunks whose ``[chunk, B, n]`` buffer holds at
#: most this many elements (and at least one dimension at a time).
PRODUCT_CHUNK_ELEMENTS = 1 << 22


# --------------------------------------------------------------------------- kernels
def _shift(z: Tensor) -> Tensor:
    """The vector both arguments are centred on: the mean of ``z``'s rows (zero when it
    has none). Distances do not depend on it; centring the points on it keeps their
    norms, and so the round-off of the expansion below, at the scale of their spread
    rather than of their distance from the origin."""
    if z.shape[0] == 0:
        return z.new_zeros(z.shape[1])
    return z.mean(dim=0)


def squared_distances(x: Tensor, z: Tensor, *, out: Tensor | None = None) -> Tensor:
    """Squared Euclidean distances from one matrix product (not differentiable).

    ``||x - z||^2 = ||x'||^2 + ||z'||^2 - 2 x'^T z'`` with ``x' = x - m``,
    ``z' = z - m`` centred on the mean ``m`` of ``z``'s rows (one pass over each; the
    uncentred expansion cancels to ``eps ||x||^2`` for points far from the origin), built in
    place on the product's buffer, clamped at 0 against round-off; no ``[B, n, D]``
    tensor is formed. When ``z`` is ``x`` the diagonal is exactly 0 (and the product
    is of the centred ``x`` with itself). The round-off left is ``eps`` times the
    points' squared distances from ``m``: where they lie far from it compared with
    their distance from each other (clusters far apart, in float32), scale the inputs
    (the data modules scale them to ``[0, 1]``) or pass float64. Differentiate through
    :func:`gaussian_kernel` instead.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        out (Tensor[B, n] | None): the buffer to build the result in (a view into a
            wider row-major matrix will do: the product writes it with its row stride),
            of ``x``'s dtype and device; ``None``: a new tensor.

    Returns:
        Tensor[B, n]: ``d[i, j] = ||x_i - z_j||^2 >= 0`` (``out`` when given).
    """
    with torch.no_grad():
        shift = _shift(z)
        xc = x - shift
        # -2 x z^T as x (-2 z)^T (the scaling is exact), then the norms added in place:
        # ``addmm(z_sq, ...)`` would first broadcast z_sq into its whole output. The
        # centred copies are squared in place once the product has read them (the
        # squares of -2 z, times 1/4, are those of z exactly).
        z_m2 = xc * -2.0 if z is x else (z - shift).mul_(-2.0)
        d = torch.mm(xc, z_m2.mT, out=out)
        x_sq = xc.square_().sum(dim=-1, keepdim=True)
        z_sq = x_sq.view(-1) if z is x else z_m2.square_().sum(dim=-1).mul_(0.25)
        d.add_(z_sq).add_(x_sq).clamp_min_(0.0)
        if x is z:
            d.diagonal().zero_()
    return d


class GaussianKernelFunction(torch.autograd.Function):
    """``exp(-gamma ||x - z||^2)`` with one allocation forward and a fused backward.

    Forward: ``G = exp(-gamma (||x||^2 + ||z||^2 - 2 x z^T)^+)``, ``x`` and ``z``
    centred on a shared vector first (:func:`squared_distances`), in place on the
    product's buffer (the scale applied after the cancelling sum: taken into its terms it
    moved float32 NysDI gradients by 1.3-1.6x more). Backward, with
    ``E = dL/dG * G`` and ``s = -2 gamma`` (applied to the products' small operands, not
    to ``E``): ``dx = s (x * rowsum(E) - E z)``, ``dz = s (z * colsum(E) - E^T x)``; when
    ``z`` is ``x`` their sum ``s (x * rowsum(F) - F x)``, ``F = E + E^T``, is one
    product, and ``F = 2 E`` when the caller vouches that ``dL/dG`` is symmetric
    (``symmetric_grad``: the transposed sum, slow on large matrices, is skipped). Both
    are unchanged by a shift of ``x`` and ``z`` together, and are computed on the
    centred points as the forward is (:func:`gaussian_grads`).
    """

    @staticmethod
    def forward(
        ctx, x: Tensor, z: Tensor, gamma: float, symmetric: bool, symmetric_grad: bool = False
    ) -> Tensor:
        g = gaussian_matrix(x, z, gamma, symmetric)
        ctx.save_for_backward(x, z, g)
        ctx.gamma, ctx.symmetric, ctx.symmetric_grad = gamma, symmetric, symmetric_grad
        return g

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, z, g = ctx.saved_tensors
        grad_x, grad_z = gaussian_grads(
            x,
            z,
            g,
            grad,
            ctx.gamma,
            symmetric=ctx.symmetric,
            symmetric_grad=ctx.symmetric_grad,
            need_x=ctx.needs_input_grad[0],
            need_z=ctx.needs_input_grad[1],
        )
        return grad_x, grad_z, None, None, None


def gaussian_matrix(
    x: Tensor, z: Tensor, gamma: float, symmetric: bool = False, *, out: Tensor | None = None
) -> Tensor:
    """``exp(-gamma ||x - z||^2)`` (not differentiable): the forward of
    :class:`GaussianKernelFunction`, on one buffer.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points (ignored when ``symmetric``: ``z`` is ``x``).
        gamma: inverse squared bandwidth.
        symmetric: the matrix of ``x`` with itself (exact ones on the diagonal).
        out (Tensor[B, n] | None): the buffer to build it in, as in
            :func:`squared_distances`.

    Returns:
        Tensor[B, n]: the kernel matrix (``Tensor[B, B]`` when ``symmetric``).
    """
    return squared_distances(x, x if symmetric else z, out=out).mul_(-gamma).exp_()


def gaussian_grads(
    x: Tensor,
    z: Tensor,
    g: Tensor,
    grad: Tensor,
    gamma: float,
    *,
    symmetric: bool = False,
    symmetric_grad: bool = False,
    need_x: bool = True,
    need_z: bool = True,
) -> tuple[Tensor | None, Tensor | None]:
    """The backward of :class:`GaussianKernelFunction`: gradients to ``x`` and ``z`` of a
    loss with gradient ``grad`` to ``G = gaussian_matrix(x, z, gamma, symmetric)``.

    With ``E = grad * G`` and ``s = -2 gamma`` (applied to the products' small operands,
    not to ``E``): ``dx = s (x * rowsum(E) - E z)``, ``dz = s (z * colsum(E) - E^T x)``;
    when ``symmetric`` (``z`` is ``x``) their sum ``s (x * rowsum(F) - F x)``,
    ``F = E + E^T``, is returned as ``dx`` (``dz`` is ``None``), and ``F = 2 E`` when
    ``symmetric_grad`` vouches that ``grad`` is symmetric. ``x`` and ``z`` enter centred
    on the mean of ``z``'s rows (the gradients, sums of ``E_ij (x_i - z_j)``, do not
    depend on the shift; uncentred, ``x * rowsum(E) - E z`` cancels as the forward's
    expansion does, to ``eps ||x||`` for points far from the origin). Computed in the
    dtype of ``grad`` and ``G``, which may be narrower than the one ``G`` was evaluated in.

    Args:
        x (Tensor[B, D]), z (Tensor[n, D]): the points.
        g (Tensor[B, n]): the kernel matrix.
        grad (Tensor[B, n]): the loss's gradient to it.
        gamma: inverse squared bandwidth.
        symmetric, symmetric_grad: as above.
        need_x, need_z: which gradients to compute (``None`` for the others).

    Returns:
        tuple[Tensor[B, D] | None, Tensor[n, D] | None]: ``dx``, ``dz``.
    """
    e = grad * g
    scale = -2.0 * gamma
    grad_x = grad_z = None
    # The products accumulate in place on their fresh first terms (``addmm`` would
    # copy each into a new output first); the scale rides on the small operands.
    if symmetric:  # z is x: both gradients in one product, all on x
        if symmetric_grad:
            scale *= 2.0
        else:
            e = e + e.mT
        xc = x - _shift(x)
        grad_x = (xc * e.sum(1, keepdim=True).mul_(scale)).addmm_(e, xc, alpha=-scale)
        return grad_x, None
    if not (need_x or need_z):
        return None, None
    shift = _shift(z)
    xc, zc = x - shift, z - shift
    if need_z:
        grad_z = (zc * e.sum(0).mul_(scale)[:, None]).addmm_(e.mT, xc, alpha=-scale)
    if need_x:  # on xc itself: the last read of it
        grad_x = xc.mul_(e.sum(1, keepdim=True).mul_(scale)).addmm_(e, zc, alpha=-scale)
    return grad_x, grad_z


# Per-dimension factors of product kernels: ``log f(a, b)`` and its partial derivatives
# ``(d/da, d/db) log f``, for ``a (Tensor[c, B, 1])``, ``b (Tensor[c, 1, n])``.
def _cauchy_log(a: Tensor, b: Tensor, gamma: float) -> Tensor:
    return torch.log1p((a - b).square_().mul_(gamma)).neg_()


def _cauchy_grad(a: Tensor, b: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    s = a - b
    da = s.mul(-2.0 * gamma).div_(s.square().mul_(gamma).add_(1.0))
    return da, -da


def _sech_log(a: Tensor, b: Tensor, gamma: float) -> Tensor:
    # log sech(s) = -(|s| + log1p(exp(-2|s|)) - log 2), stable for any s.
    s = (a - b).mul_(0.5 * gamma).abs_()
    return torch.exp(-2.0 * s).log1p_().add_(s).sub_(math.log(2.0)).neg_()


def _sech_grad(a: Tensor, b: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    da = torch.tanh((a - b).mul_(0.5 * gamma)).mul_(-0.5 * gamma)
    return da, -da


def _chi2_log(a: Tensor, b: Tensor, gamma: float) -> Tensor:
    # a, b >= 0, so a + b == 0 only where a == b == 0, whose term is 0 (scikit-learn).
    total = a + b
    total = torch.where(total > 0, total, torch.ones_like(total))
    return (a - b).square_().div_(total).mul_(-gamma)


def _chi2_grad(a: Tensor, b: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    total = a + b
    total_sq = torch.where(total > 0, total, torch.ones_like(total)).square_()
    s = a - b
    da = s * (a + 3.0 * b) / total_sq * (-gamma)
    db = s * (3.0 * a + b) / total_sq * gamma
    return da, db


def _chunk_size(x: Tensor, z: Tensor) -> int:
    return max(1, PRODUCT_CHUNK_ELEMENTS // max(1, x.shape[0] * z.shape[0]))


class ProductKernelFunction(torch.autograd.Function):
    """``K = exp(sum_i log f(x_i, z_i))`` over chunks of dimensions, ``O(B n)`` memory.

    Forward accumulates the ``[B, n]`` log-kernel chunk by chunk. Backward, with
    ``E = dL/dK * K``: ``dx[:, i] = rowsum(E * d_a log f)``,
    ``dz[:, i] = colsum(E * d_b log f)``, the per-dimension derivatives recomputed chunk
    by chunk rather than stored.
    """

    @staticmethod
    def forward(ctx, x: Tensor, z: Tensor, gamma: float, log_factor, grad_factor) -> Tensor:
        chunk = _chunk_size(x, z)
        log_k = x.new_zeros(x.shape[0], z.shape[0])
        for start in range(0, x.shape[1], chunk):
            a = x[:, start : start + chunk].mT[:, :, None]
            b = z[:, start : start + chunk].mT[:, None, :]
            log_k += log_factor(a, b, gamma).sum(0)
        k = log_k.exp_()
        ctx.save_for_backward(x, z, k)
        ctx.gamma, ctx.grad_factor = gamma, grad_factor
        return k

    @staticmethod
    def backward(ctx, grad: Tensor):
        # once_differentiable would let a graph of this backward treat it as a constant
        # (silently wrong second derivatives where the inputs came through other ops)
        refuse_double_backward("product kernels (cauchy, chi2, skewed_chi2)")
        x, z, k = ctx.saved_tensors
        need_x, need_z = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        e = (grad * k)[None]
        grad_x = torch.empty_like(x) if need_x else None
        grad_z = torch.empty_like(z) if need_z else None
        chunk = _chunk_size(x, z)
        for start in range(0, x.shape[1], chunk):
            stop = min(start + chunk, x.shape[1])
            a = x[:, start:stop].mT[:, :, None]
            b = z[:, start:stop].mT[:, None, :]
            da, db = ctx.grad_factor(a, b, ctx.gamma)
            if grad_x is not None:
                grad_x[:, start:stop] = (da * e).sum(2).mT
            if grad_z is not None:
                grad_z[:, start:stop] = (db * e).sum(1).mT
        return grad_x, grad_z, None, None, None


#: ``(log f, d log f)`` pairs of the product kernels, for :class:`ProductKernelFunction`.
cauchy_factor = (_cauchy_log, _cauchy_grad)
sech_factor = (_sech_log, _sech_grad)
chi2_factor = (_chi2_log, _chi2_grad)
