"""Kernel functions, their spectral distributions and a registry to look them up by name.

A shift-invariant kernel ``k(x, y) = kappa(x - y)`` is, by Bochner's theorem, the
Fourier transform of a probability density ``p(w)``:
``k(x, y) = E_w[cos(w^T (x - y))]``. Random Fourier features draw ``w`` from
``p``; learning frequencies as ``W = diag(sigma) h(Omega)`` with ``Omega ~ U(0, 1)``
(Bazavan, Li and Sminchisescu, "Fourier kernel learning", ECCV 2012) needs the
*quantile* ``h`` of the standardised one-dimensional spectral law and the scale
``sigma(gamma)`` that matches the kernel's bandwidth, so each registered kernel
carries both.

Registered kernels (``gamma > 0`` throughout; scikit-learn's convention where it has
the kernel; ``a = x + c``, ``b = y + c``, ``t = log a - log b`` per dimension):

* ``gaussian``: ``exp(-gamma ||x - y||^2)``; frequencies ``N(0, 2 gamma)``.
* ``laplacian``: ``exp(-gamma ||x - y||_1)``; Cauchy frequencies of scale ``gamma``.
* ``cauchy``: ``prod_i 1 / (1 + gamma (x_i - y_i)^2)``; Laplace frequencies of scale
  ``sqrt(gamma)`` (quantile ``-sign(u - 1/2) log(1 - 2 |u - 1/2|)``).
* ``skewed_chi2``: ``prod_i sech(gamma t_i / 2)
  = prod_i 2 (a_i b_i)^(gamma/2) / (a_i^gamma + b_i^gamma)``; frequencies (of
  ``log(x + c)``) with density ``sech(pi w / gamma) / gamma``, i.e.
  ``(gamma / 2) h(u)`` with ``h(u) = (2/pi) log tan(pi u / 2)``.
* ``skewed_intersection``: ``exp(-gamma ||t||_1)``; Cauchy frequencies (of
  ``log(x + c)``) of scale ``gamma``.
* ``polynomial``: ``(gamma x^T y + coef0)^degree``; no spectral law.
* ``linear``: ``x^T y`` (``gamma`` is ignored); no spectral law.
* ``chi2``: ``exp(-gamma sum_i (x_i - y_i)^2 / (x_i + y_i))``; no spectral law.

Conventions:

* ``skewed_chi2`` with ``gamma = 1`` is scikit-learn's
  :class:`~sklearn.kernel_approximation.SkewedChi2Sampler` kernel
  ``prod_i 2 sqrt(a_i) sqrt(b_i) / (a_i + b_i)`` (its frequencies
  ``(1/pi) log tan(pi u / 2)`` are ours at ``gamma = 1``); other ``gamma`` apply it to
  ``(x + c)^gamma``.
* ``skewed_intersection`` with ``gamma = 1/2`` is the classic
  ``prod_i min(sqrt(a_i / b_i), sqrt(b_i / a_i))``: a Laplacian kernel in log space.
* The skewed kernels take the parameter ``c`` (scikit-learn's ``skewedness``, default 1)
  and need inputs ``> -c``; ``chi2`` (scikit-learn's ``chi2_kernel``) needs inputs
  ``>= 0``; ``polynomial`` takes ``degree`` (integer ``>= 1``, default 3) and ``coef0``
  (``>= 0`` so the kernel is positive semi-definite, default 1).

Product kernels (``cauchy``, ``skewed_chi2``, ``chi2``) accumulate their log-kernel
over chunks of dimensions and recompute the per-dimension derivatives in a custom
backward pass, so memory stays ``O(B n)`` (plus a bounded chunk buffer): no
``[B, n, D]`` tensor is ever formed.

A user callable ``k(X, Z) -> Tensor[B, n]`` becomes an anonymous :class:`Kernel` via
:func:`get_kernel` (Nystrom only: it has no spectral law). A layer holding a lambda
cannot be pickled; define the function at module level to pickle it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from kernel_layers._validation import (
    check_nonnegative,
    check_positive,
    check_real,
    is_compiling,
)

__all__ = [
    "Kernel",
    "KernelParam",
    "available_kernels",
    "cauchy_kernel",
    "chi2_kernel",
    "gaussian_kernel",
    "get_kernel",
    "kernel_from_callable",
    "laplacian_kernel",
    "linear_kernel",
    "log_shift",
    "polynomial_kernel",
    "register_kernel",
    "sample_frequencies",
    "skewed_chi2_kernel",
    "skewed_intersection_kernel",
    "spectral_quantiles",
    "squared_distances",
]

#: Uniform draws are kept inside ``[UNIFORM_EPS, 1 - UNIFORM_EPS]`` so that quantiles
#: with unbounded support (``erfinv``, ``tan``, ``log``) stay finite.
UNIFORM_EPS = 1e-12
#: Product kernels process dimensions in chunks whose ``[chunk, B, n]`` buffer holds at
#: most this many elements (and at least one dimension at a time).
PRODUCT_CHUNK_ELEMENTS = 1 << 22
#: Default ``c`` of the skewed kernels (scikit-learn's ``skewedness``).
DEFAULT_SKEWEDNESS = 1.0
#: Default ``degree`` and ``coef0`` of the polynomial kernel (scikit-learn's).
DEFAULT_DEGREE = 3
DEFAULT_COEF0 = 1.0

#: ``matrix(x, z, gamma, **params) -> Tensor[B, n]``.
KernelMatrix = Callable[..., Tensor]


# --------------------------------------------------------------------------- checks
def _check_degree(owner: str, name: str, value: object) -> int:
    """Return ``value`` as an ``int >= 1`` (integral floats such as ``3.0`` pass), else raise."""
    ok_type = isinstance(value, Integral) or (isinstance(value, Real) and float(value).is_integer())
    if isinstance(value, bool) or not ok_type:
        raise TypeError(f"{owner}: argument '{name}' must be an integer >= 1, got {value!r}")
    if int(value) < 1:  # type: ignore[call-overload]
        raise ValueError(f"{owner}: argument '{name}' must be an integer >= 1, got {value}")
    return int(value)  # type: ignore[call-overload]


def _check_above_shift(owner: str, name: str, x: Tensor, c: float = DEFAULT_SKEWEDNESS) -> None:
    """Raise unless every entry of ``x`` is ``> -c`` (skipped under ``torch.compile``)."""
    if is_compiling() or x.numel() == 0:
        return
    low = float(x.detach().min())
    if not low > -c:
        raise ValueError(
            f"{owner}: argument '{name}' must have all entries > -c = {-c:g} (skewed "
            f"kernels act on log(x + c), c = kernel parameter 'c'), got minimum {low:g}"
        )


def _check_nonnegative_input(owner: str, name: str, x: Tensor) -> None:
    """Raise unless every entry of ``x`` is ``>= 0`` (skipped under ``torch.compile``)."""
    if is_compiling() or x.numel() == 0:
        return
    low = float(x.detach().min())
    if not low >= 0.0:
        raise ValueError(
            f"{owner}: argument '{name}' must have all entries >= 0 (chi2 kernel), "
            f"got minimum {low:g}"
        )


# --------------------------------------------------------------------------- kernels
def squared_distances(x: Tensor, z: Tensor) -> Tensor:
    """Squared Euclidean distances from one matrix product (not differentiable).

    ``||x - z||^2 = ||x||^2 + ||z||^2 - 2 x^T z``, built in place on the product's
    buffer, clamped at 0 against round-off; no ``[B, n, D]`` tensor is formed. When
    ``z`` is ``x`` the diagonal is exactly 0. Differentiate through
    :func:`gaussian_kernel` instead.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.

    Returns:
        Tensor[B, n]: ``d[i, j] = ||x_i - z_j||^2 >= 0``.
    """
    with torch.no_grad():
        x_sq = (x * x).sum(dim=-1, keepdim=True)
        z_sq = (z * z).sum(dim=-1)
        d = torch.addmm(z_sq, x, z.mT, alpha=-2.0).add_(x_sq).clamp_min_(0.0)
        if x is z:
            d.diagonal().zero_()
    return d


class _GaussianKernel(torch.autograd.Function):
    """``exp(-gamma ||x - z||^2)`` with one allocation forward and a fused backward.

    Forward: ``G = exp(-gamma (||x||^2 + ||z||^2 - 2 x z^T)^+)`` in place on the
    product's buffer. Backward, with ``E = dL/dG * G * (-gamma)``:
    ``dx = 2 (x * rowsum(E) - E z)``, ``dz = 2 (z * colsum(E) - E^T x)``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, z: Tensor, gamma: float, symmetric: bool) -> Tensor:  # type: ignore[override]
        g = squared_distances(x, x if symmetric else z).mul_(-gamma).exp_()
        ctx.save_for_backward(x, z, g)
        ctx.gamma = gamma
        return g

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, z, g = ctx.saved_tensors
        e = grad * g
        e.mul_(-2.0 * ctx.gamma)
        grad_x = grad_z = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.addmm(x * e.sum(1, keepdim=True), e, z, alpha=-1.0)
        if ctx.needs_input_grad[1]:
            grad_z = torch.addmm(z * e.sum(0)[:, None], e.mT, x, alpha=-1.0)
        return grad_x, grad_z, None, None


def gaussian_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Gaussian (RBF) kernel matrix ``exp(-gamma ||x - z||^2)``.

    Distances come from one matrix product (clamped at 0 against round-off, exactly 0
    on the diagonal when ``z`` is ``x``); the backward pass is fused (two products, no
    ``[B, n, D]`` tensor).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse squared bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return _GaussianKernel.apply(x, z, float(gamma), x is z)


def laplacian_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Laplacian kernel matrix ``exp(-gamma ||x - z||_1)`` (scikit-learn's convention).

    The L1 distances come from ``torch.cdist(p=1)``, which loops over pairs without
    forming a ``[B, n, D]`` tensor (forward or backward).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return torch.exp(torch.cdist(x, z, p=1.0) * (-gamma))


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


class _ProductKernel(torch.autograd.Function):
    """``K = exp(sum_i log f(x_i, z_i))`` over chunks of dimensions, ``O(B n)`` memory.

    Forward accumulates the ``[B, n]`` log-kernel chunk by chunk. Backward, with
    ``E = dL/dK * K``: ``dx[:, i] = rowsum(E * d_a log f)``,
    ``dz[:, i] = colsum(E * d_b log f)``, the per-dimension derivatives recomputed chunk
    by chunk rather than stored.
    """

    @staticmethod
    def forward(ctx, x: Tensor, z: Tensor, gamma: float, log_factor, grad_factor) -> Tensor:  # type: ignore[override]
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
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
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


def cauchy_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Cauchy kernel matrix ``prod_i 1 / (1 + gamma (x_i - z_i)^2)``.

    The Laplacian kernel's spectral dual: its frequencies are Laplace-distributed with
    scale ``sqrt(gamma)``. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: inverse squared bandwidth, ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.
    """
    return _ProductKernel.apply(x, z, float(gamma), _cauchy_log, _cauchy_grad)


def log_shift(
    x: Tensor, c: float = DEFAULT_SKEWEDNESS, *, owner: str = "log_shift", name: str = "x"
) -> Tensor:
    """``log(x + c)``, the input map of the skewed kernels, after checking ``x > -c``.

    Args:
        x (Tensor[..., D]): inputs, all entries ``> -c``.
        c: the shift (scikit-learn's ``skewedness``).
        owner: the caller's name for error messages.
        name: the argument's name for error messages.

    Returns:
        Tensor[..., D]: ``log(x + c)``.

    Raises:
        ValueError: an entry is ``<= -c``.
    """
    _check_above_shift(owner, name, x, c)
    return _shifted_log(x, c)


def _shifted_log(x: Tensor, c: float = DEFAULT_SKEWEDNESS) -> Tensor:
    """``log(x + c)`` without the domain check (the skewed kernels' input transform)."""
    return torch.log(x + c)


def skewed_chi2_kernel(x: Tensor, z: Tensor, gamma: float, c: float = DEFAULT_SKEWEDNESS) -> Tensor:
    """Skewed chi-square kernel matrix ``prod_i sech(gamma (log(x_i+c) - log(z_i+c)) / 2)``.

    With ``a = x + c``, ``b = z + c`` this is
    ``prod_i 2 (a_i b_i)^(gamma/2) / (a_i^gamma + b_i^gamma)``; ``gamma = 1`` gives
    scikit-learn's :class:`~sklearn.kernel_approximation.SkewedChi2Sampler` kernel
    ``prod_i 2 sqrt(a_i b_i) / (a_i + b_i)``. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points, entries ``> -c``.
        z (Tensor[n, D]): second set of points, entries ``> -c``.
        gamma: bandwidth in log space, ``> 0``.
        c: the shift (scikit-learn's ``skewedness``).

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is ``<= -c``.
    """
    owner = "skewed_chi2_kernel"
    u = log_shift(x, c, owner=owner, name="x")
    v = u if z is x else log_shift(z, c, owner=owner, name="z")
    return _ProductKernel.apply(u, v, float(gamma), _sech_log, _sech_grad)


def skewed_intersection_kernel(
    x: Tensor, z: Tensor, gamma: float, c: float = DEFAULT_SKEWEDNESS
) -> Tensor:
    """Skewed intersection kernel matrix ``exp(-gamma ||log(x + c) - log(z + c)||_1)``.

    A Laplacian kernel in log space; ``gamma = 1/2`` gives the classic
    ``prod_i min(sqrt((x_i+c)/(z_i+c)), sqrt((z_i+c)/(x_i+c)))``.

    Args:
        x (Tensor[B, D]): first set of points, entries ``> -c``.
        z (Tensor[n, D]): second set of points, entries ``> -c``.
        gamma: inverse bandwidth in log space, ``> 0``.
        c: the shift.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is ``<= -c``.
    """
    owner = "skewed_intersection_kernel"
    u = log_shift(x, c, owner=owner, name="x")
    v = u if z is x else log_shift(z, c, owner=owner, name="z")
    return laplacian_kernel(u, v, gamma)


def polynomial_kernel(
    x: Tensor,
    z: Tensor,
    gamma: float,
    degree: int = DEFAULT_DEGREE,
    coef0: float = DEFAULT_COEF0,
) -> Tensor:
    """Polynomial kernel matrix ``(gamma x^T z + coef0)^degree`` (scikit-learn's).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: scale of the inner product, ``> 0``.
        degree: integer ``>= 1``.
        coef0: offset ``>= 0``.

    Returns:
        Tensor[B, n]: the kernel matrix.
    """
    return (x @ z.mT).mul(gamma).add(coef0).pow(int(degree))


def linear_kernel(x: Tensor, z: Tensor, gamma: float = 1.0) -> Tensor:
    """Linear kernel matrix ``x^T z`` (scikit-learn's; ``gamma`` is ignored).

    Args:
        x (Tensor[B, D]): first set of points.
        z (Tensor[n, D]): second set of points.
        gamma: ignored (the registry passes every kernel a ``gamma``).

    Returns:
        Tensor[B, n]: the kernel matrix.
    """
    return x @ z.mT


def chi2_kernel(x: Tensor, z: Tensor, gamma: float) -> Tensor:
    """Exponential chi-square kernel ``exp(-gamma sum_i (x_i - z_i)^2 / (x_i + z_i))``.

    scikit-learn's ``chi2_kernel`` (terms with ``x_i + z_i = 0`` count 0), for
    non-negative inputs such as histograms. Memory ``O(B n)`` forward and backward.

    Args:
        x (Tensor[B, D]): first set of points, entries ``>= 0``.
        z (Tensor[n, D]): second set of points, entries ``>= 0``.
        gamma: ``> 0``.

    Returns:
        Tensor[B, n]: the kernel matrix, entries in ``(0, 1]``.

    Raises:
        ValueError: an entry of ``x`` or ``z`` is negative.
    """
    _check_nonnegative_input("chi2_kernel", "x", x)
    if z is not x:
        _check_nonnegative_input("chi2_kernel", "z", z)
    return _ProductKernel.apply(x, z, float(gamma), _chi2_log, _chi2_grad)


# ------------------------------------------------------------------ spectral quantiles
def _gaussian_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard normal law, ``sqrt(2) erfinv(2u - 1)``."""
    return math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)


def _cauchy_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard Cauchy law, ``tan(pi (u - 1/2))``."""
    return torch.tan(math.pi * (u - 0.5))


def _laplace_quantile(u: Tensor) -> Tensor:
    """Quantile of the standard Laplace law, ``-sign(u - 1/2) log(1 - 2 |u - 1/2|)``."""
    v = u - 0.5
    return -torch.sign(v) * torch.log1p(-2.0 * v.abs())


def _sech_quantile(u: Tensor) -> Tensor:
    """Quantile of the density ``sech(pi w / 2) / 2`` (spectral law of ``sech(t)``).

    ``(2/pi) log tan(pi u / 2)``; scaled by ``1/2`` it is scikit-learn's
    ``SkewedChi2Sampler`` draw ``(1/pi) log tan(pi u / 2)``.
    """
    return (2.0 / math.pi) * torch.log(torch.tan(0.5 * math.pi * u))


def _sqrt_two_gamma(gamma: float) -> float:
    return math.sqrt(2.0 * gamma)


def _sqrt_gamma(gamma: float) -> float:
    return math.sqrt(gamma)


def _same_gamma(gamma: float) -> float:
    return gamma


def _half_gamma(gamma: float) -> float:
    return 0.5 * gamma


# -------------------------------------------------------------------- the Kernel type
@dataclass(frozen=True)
class KernelParam:
    """A named kernel parameter with its default and validator.

    Attributes:
        name: the key in ``kernel_params``.
        default: the value used when the key is absent.
        check: ``check(owner, name, value) -> value`` returning the validated value or
            raising ``TypeError`` / ``ValueError`` in the library's message format.
    """

    name: str
    default: float
    check: Callable[[str, str, object], float]


@dataclass(frozen=True)
class Kernel:
    """A named kernel: its matrix function, parameters and, if any, its spectral law.

    Every field is a module-level function (or a :func:`functools.partial` of one) for
    the registered kernels, so a :class:`Kernel` and the layers holding it pickle.

    Attributes:
        name: registry key.
        matrix: ``matrix(x, z, gamma, **params) -> Tensor[B, n]`` for
            ``x (Tensor[B, D])``, ``z (Tensor[n, D])``; it applies :attr:`transform`
            itself.
        quantile: quantile ``h(u)`` of the standardised 1-D spectral law (of the
            transformed inputs), or ``None`` when the kernel has no random Fourier map.
        scale: ``scale(gamma)``, the frequency scale so that ``scale(gamma) * h(U)``
            has the kernel's spectral law.
        params: the kernel's named parameters beyond ``gamma``.
        transform: ``transform(x, **params) -> Tensor[..., D]``, the input map a random
            Fourier map applies before ``cos(x W + b)`` (``log(x + c)`` for the skewed
            kernels), or ``None`` for the identity.
        check_input: ``check_input(owner, name, x, **params)`` raising ``ValueError``
            for inputs outside the kernel's domain, or ``None`` when any input is valid.
    """

    name: str
    matrix: KernelMatrix
    quantile: Callable[[Tensor], Tensor] | None = None
    scale: Callable[[float], float] | None = None
    params: tuple[KernelParam, ...] = ()
    transform: Callable[..., Tensor] | None = None
    check_input: Callable[..., None] | None = None

    @property
    def has_spectrum(self) -> bool:
        """Whether random Fourier features exist for this kernel."""
        return self.quantile is not None and self.scale is not None

    @property
    def param_names(self) -> list[str]:
        """Names of the kernel's parameters, in declaration order."""
        return [p.name for p in self.params]

    @property
    def defaults(self) -> dict[str, float]:
        """The default value of each parameter."""
        return {p.name: p.default for p in self.params}

    def resolve_params(
        self, params: Mapping[str, object] | None, *, owner: str = "Kernel"
    ) -> dict[str, float]:
        """Validate ``params`` and complete them with the defaults.

        Args:
            params: user values by name, or ``None`` for all defaults.
            owner: the caller's name for error messages.

        Returns:
            dict[str, float]: one validated value per parameter, in declaration order.

        Raises:
            TypeError: ``params`` is not a mapping, or a value has the wrong type.
            ValueError: an unknown name (the message lists the valid ones) or an
                invalid value.
        """
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise TypeError(
                f"{owner}: argument 'kernel_params' must be a dict or None, "
                f"got {type(params).__name__}"
            )
        unknown = sorted(str(k) for k in params if k not in self.param_names)
        if unknown:
            hint = " (pass gamma as its own argument)" if "gamma" in unknown else ""
            raise ValueError(
                f"{owner}: argument 'kernel_params' must have keys among {self.param_names} "
                f"(the parameters of kernel {self.name!r}){hint}, got unknown key(s) {unknown}"
            )
        return {
            p.name: p.check(owner, f"kernel_params.{p.name}", params[p.name])
            if p.name in params
            else p.default
            for p in self.params
        }

    def bind(self, params: Mapping[str, object] | None = None, *, owner: str = "Kernel") -> Kernel:
        """This kernel with its parameters fixed (validated, defaults filled in).

        The result has no parameters left: ``matrix(x, z, gamma)``, ``transform(x)`` and
        ``check_input(owner, name, x)`` use the bound values, so it can be handed to
        functions that know only ``gamma`` (e.g.
        :func:`~kernel_layers.nystrom_discriminant_information`).

        Args:
            params: parameter values by name (``None``: the defaults).
            owner: the caller's name for error messages.

        Returns:
            Kernel: the bound kernel, with the same name.
        """
        values = self.resolve_params(params, owner=owner)
        if not self.params:
            return self

        def partial(fn: Callable[..., object] | None) -> Callable[..., object] | None:
            return None if fn is None else functools.partial(fn, **values)

        return dataclasses.replace(
            self,
            matrix=partial(self.matrix),  # type: ignore[arg-type]
            transform=partial(self.transform),  # type: ignore[arg-type]
            check_input=partial(self.check_input),  # type: ignore[arg-type]
            params=(),
        )

    def validate_input(self, owner: str, name: str, x: Tensor) -> None:
        """Raise if ``x`` lies outside the kernel's domain (for a bound kernel).

        Raises:
            ValueError: see :attr:`check_input`.
        """
        if self.check_input is not None:
            self.check_input(owner, name, x, **self.defaults)


class _CallableMatrix:
    """Adapts a user's ``k(X, Z) -> Tensor[B, n]`` to ``matrix(x, z, gamma)``."""

    def __init__(self, fn: Callable[[Tensor, Tensor], Tensor], name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(self, x: Tensor, z: Tensor, gamma: float = 1.0) -> Tensor:
        out = self.fn(x, z)
        expected = [x.shape[0], z.shape[0]]
        if not isinstance(out, Tensor):
            raise TypeError(
                f"kernel {self.name!r}: the callable must return a Tensor{expected}, "
                f"got {type(out).__name__}"
            )
        if list(out.shape) != expected:
            raise ValueError(
                f"kernel {self.name!r}: the callable must return a Tensor of shape "
                f"{expected} (k(X[B, D], Z[n, D]) -> [B, n]), got shape {list(out.shape)}"
            )
        return out


def kernel_from_callable(fn: Callable[[Tensor, Tensor], Tensor]) -> Kernel:
    """Wrap a user's ``k(X, Z) -> Tensor[B, n]`` into an anonymous :class:`Kernel`.

    The kernel has no spectral law and ignores ``gamma``; it pickles only if ``fn``
    does (a lambda does not).
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    return Kernel(name, _CallableMatrix(fn, name))


_REGISTRY: dict[str, Kernel] = {}


def register_kernel(kernel: Kernel, *, overwrite: bool = False) -> Kernel:
    """Add ``kernel`` to the registry so layers accept ``kernel=kernel.name``.

    Raises:
        ValueError: the name is taken and ``overwrite`` is false.
    """
    if kernel.name in _REGISTRY and not overwrite:
        raise ValueError(
            f"register_kernel: argument 'kernel' must have a new name, "
            f"got {kernel.name!r} which is already registered"
        )
    _REGISTRY[kernel.name] = kernel
    return kernel


def available_kernels(*, spectral: bool = False) -> list[str]:
    """Names of the registered kernels (only those with a spectral law if ``spectral``)."""
    return sorted(k for k, v in _REGISTRY.items() if v.has_spectrum or not spectral)


def get_kernel(
    name: str | Kernel | Callable[[Tensor, Tensor], Tensor],
    *,
    owner: str = "get_kernel",
    spectral: bool = False,
) -> Kernel:
    """Look a kernel up by name, or wrap a callable.

    Args:
        name: a registered name, a :class:`Kernel` (returned as is), or a callable
            ``k(X (Tensor[B, D]), Z (Tensor[n, D])) -> Tensor[B, n]`` (wrapped by
            :func:`kernel_from_callable`; it has no spectral law).
        owner: the caller's name for error messages.
        spectral: require a spectral law (for random Fourier features).

    Raises:
        ValueError: unknown name, or no spectral law when one is required; the message
            lists the valid options.
    """
    if isinstance(name, Kernel):
        kernel: Kernel | None = name
    elif isinstance(name, str):
        kernel = _REGISTRY.get(name)
    elif callable(name):
        kernel = kernel_from_callable(name)
    else:
        kernel = None
    if kernel is None:
        options = (
            f"{available_kernels(spectral=True)}"
            if spectral
            else f"{available_kernels()} or a callable k(X, Z) -> Tensor[B, n]"
        )
        raise ValueError(f"{owner}: argument 'kernel' must be one of {options}, got {name!r}")
    if spectral and not kernel.has_spectrum:
        raise ValueError(
            f"{owner}: argument 'kernel' must have a spectral law (one of "
            f"{available_kernels(spectral=True)}), got {kernel.name!r}"
        )
    return kernel


_SKEWEDNESS = KernelParam("c", DEFAULT_SKEWEDNESS, check_real)

register_kernel(
    Kernel("gaussian", gaussian_kernel, quantile=_gaussian_quantile, scale=_sqrt_two_gamma)
)
register_kernel(Kernel("laplacian", laplacian_kernel, quantile=_cauchy_quantile, scale=_same_gamma))
register_kernel(Kernel("cauchy", cauchy_kernel, quantile=_laplace_quantile, scale=_sqrt_gamma))
register_kernel(
    Kernel(
        "skewed_chi2",
        skewed_chi2_kernel,
        quantile=_sech_quantile,
        scale=_half_gamma,
        params=(_SKEWEDNESS,),
        transform=_shifted_log,
        check_input=_check_above_shift,
    )
)
register_kernel(
    Kernel(
        "skewed_intersection",
        skewed_intersection_kernel,
        quantile=_cauchy_quantile,
        scale=_same_gamma,
        params=(_SKEWEDNESS,),
        transform=_shifted_log,
        check_input=_check_above_shift,
    )
)
register_kernel(
    Kernel(
        "polynomial",
        polynomial_kernel,
        params=(
            KernelParam("degree", DEFAULT_DEGREE, _check_degree),
            KernelParam("coef0", DEFAULT_COEF0, check_nonnegative),
        ),
    )
)
register_kernel(Kernel("linear", linear_kernel))
register_kernel(Kernel("chi2", chi2_kernel, check_input=_check_nonnegative_input))


def spectral_quantiles(
    kernel: str | Kernel,
    in_features: int,
    out_features: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Standardised spectral draws ``h(Omega)``, ``Omega ~ U(0, 1)``, of a kernel.

    The base frequencies of Fourier kernel learning: ``W = diag(sigma) h(Omega)`` has
    the kernel's spectral law when every ``sigma_i = scale(gamma)``. ``Omega`` is drawn
    in float64 on the CPU (so a seed gives the same draw on every device and dtype),
    exactly as in :func:`sample_frequencies`.

    Args:
        kernel: a spectral kernel's name or :class:`Kernel`.
        in_features: input dimension ``D``.
        out_features: number of frequencies ``J``.
        generator: a CPU ``torch.Generator`` for reproducible draws.
        dtype: dtype of the result (default: ``torch.get_default_dtype()``).
        device: device of the result.

    Returns:
        Tensor[D, J]: ``h(Omega)``.
    """
    spec = get_kernel(kernel, owner="spectral_quantiles", spectral=True)
    return _quantiles(spec, in_features, out_features, generator).to(
        dtype=dtype or torch.get_default_dtype(), device=device
    )


def _quantiles(
    spec: Kernel, in_features: int, out_features: int, generator: torch.Generator | None
) -> Tensor:
    u = torch.rand(in_features, out_features, generator=generator, dtype=torch.float64)
    return spec.quantile(u.clamp(UNIFORM_EPS, 1.0 - UNIFORM_EPS))  # type: ignore[misc]


def sample_frequencies(
    kernel: str | Kernel,
    in_features: int,
    out_features: int,
    gamma: float,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Draw random Fourier frequencies from the kernel's spectral law.

    Each entry is ``scale(gamma) * h(u)`` with ``u ~ U(0, 1)`` drawn in float64 on the
    CPU (so a seed gives the same draw on every device and dtype), then cast.

    Args:
        kernel: a spectral kernel's name or :class:`Kernel`.
        in_features: input dimension ``D``.
        out_features: number of frequencies ``J``.
        gamma: the kernel's bandwidth parameter.
        generator: a CPU ``torch.Generator`` for reproducible draws.
        dtype: dtype of the result (default: ``torch.get_default_dtype()``).
        device: device of the result.

    Returns:
        Tensor[D, J]: the frequencies ``W`` (of the transformed inputs, for kernels
        with an input :attr:`~Kernel.transform`).
    """
    spec = get_kernel(kernel, owner="sample_frequencies", spectral=True)
    gamma = check_positive("sample_frequencies", "gamma", gamma)
    w = spec.scale(gamma) * _quantiles(spec, in_features, out_features, generator)  # type: ignore[misc]
    return w.to(dtype=dtype or torch.get_default_dtype(), device=device)
