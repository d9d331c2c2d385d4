"""The NysDI precision benchmark (benchmarks/nysdi_precision.py) measures what it says."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from kernel_layers import nystrom_discriminant_information

nysdi_precision = pytest.importorskip("nysdi_precision")


def _digits(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x_np, labels_np = load_digits(return_X_y=True)
    x = torch.tensor(x_np / 16.0)
    z = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:n]]
    return x, torch.tensor(labels_np), z


def test_the_float32_gram_column_forms_the_gram_in_float32() -> None:
    """Written out, not through the library's float32 DI path (which would notice the
    coarse Gram and redo it in float64, as it once silently did here): far from float64."""
    x, labels, z = _digits(200)
    ref = nystrom_discriminant_information(
        x, labels, z, gamma=0.005, jitter=nysdi_precision.JITTER
    ).item()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the jitter escalation
        gram32 = nysdi_precision.float32_gram(x.float(), labels, z.float(), 0.005)
    assert abs(gram32 - ref) / ref > 1e-3


def test_the_float32_gram_column_is_eq_10_when_the_gram_is_exact() -> None:
    """The same function on float64 inputs is eq. (10) (the pseudo-inverse reference)."""
    x, labels, z = _digits(60)
    gamma = 0.02
    pinv = nysdi_precision.pinv_reference(x.numpy(), labels.numpy(), z.numpy(), gamma)
    # float64 inputs: every product in float64 (the function casts nothing down).
    ours = nysdi_precision.float32_gram(x, labels, z, gamma)
    np.testing.assert_allclose(ours, pinv, rtol=1e-6)  # pinv vs Cholesky at jitter 1e-10


def test_the_rounded_kernels_column_is_float64_nysdi_when_nothing_is_rounded() -> None:
    """Written out in float64 (``dtype=float64`` rounds nothing): eq. (10) as the library
    computes it in float64, to the last digits."""
    x, labels, z = _digits(120)
    for gamma in (0.02, 0.005):
        ref = nystrom_discriminant_information(
            x, labels, z, gamma=gamma, jitter=nysdi_precision.JITTER
        ).item()
        ours = nysdi_precision.rounded_kernels(x, labels, z, gamma, dtype=torch.float64)
        np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_the_rounded_kernels_column_rounds_the_kernel_matrices() -> None:
    """Float32 rounding of ``G`` and ``K_Z`` alone moves NysDI (by about 1e-6 on digits at
    gamma 0.005, n = 200: float32's 6e-8 amplified by ``K_Z``'s conditioning), and
    rounding to bfloat16 moves it much further."""
    x, labels, z = _digits(200)
    ref = nysdi_precision.rounded_kernels(x, labels, z, 0.005, dtype=torch.float64)
    errors = [
        abs(nysdi_precision.rounded_kernels(x, labels, z, 0.005, dtype=dtype) - ref) / ref
        for dtype in (torch.float32, torch.bfloat16)
    ]
    assert 1e-8 < errors[0] < 1e-4
    assert errors[1] > 100 * errors[0]


def test_the_mixed_scheme_converges_where_the_float32_gram_is_positive_definite() -> None:
    """The PCG column solves the float64 system: where the float32 Gram's ``S`` factorises
    unshifted (digits, gamma 0.02, n = 200) 30 iterations reach float64 NysDI, 3 do not."""
    x, labels, z = _digits(200)
    ref = nystrom_discriminant_information(x, labels, z, gamma=0.02, jitter=1e-6).item()
    shift, values = nysdi_precision.float32_gram_pcg(x, labels, z, 0.02, 1e-6)
    assert shift == 0.0
    few, many = (abs(v - ref) / ref for v in values)
    assert nysdi_precision.PCG_ITERATIONS == (3, 30)
    assert many < 1e-9 < 1e-7 < few


def test_the_mixed_scheme_stalls_where_the_float32_gram_needs_a_shift() -> None:
    """Where the float32 Gram's ``S`` is not positive definite (digits, gamma 0.005,
    n = 800) its shifted factor preconditions poorly: 30 iterations stay 1e-4 off, ten
    times the precision bar."""
    x, labels, z = _digits(800)
    ref = nystrom_discriminant_information(x, labels, z, gamma=0.005, jitter=1e-6).item()
    shift, values = nysdi_precision.float32_gram_pcg(x, labels, z, 0.005, 1e-6)
    assert shift >= 1e-6
    assert all(abs(v - ref) / ref > 1e-4 for v in values)
