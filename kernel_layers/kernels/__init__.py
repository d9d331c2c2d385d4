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

from kernel_layers.kernels.autograd import squared_distances
from kernel_layers.kernels.functions import (
    cauchy_kernel,
    chi2_kernel,
    gaussian_kernel,
    laplacian_kernel,
    linear_kernel,
    log_shift,
    polynomial_kernel,
    skewed_chi2_kernel,
    skewed_intersection_kernel,
)
from kernel_layers.kernels.registry import (
    Kernel,
    KernelMatrix,
    KernelParam,
    available_kernels,
    get_kernel,
    kernel_from_callable,
    register_kernel,
    registered_name,
)
from kernel_layers.kernels.sampling import sample_frequencies, spectral_quantiles

__all__ = [
    "Kernel",
    "KernelMatrix",
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
    "registered_name",
    "sample_frequencies",
    "skewed_chi2_kernel",
    "skewed_intersection_kernel",
    "spectral_quantiles",
    "squared_distances",
]
