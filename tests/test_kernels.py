"""Kernel matrices, spectral samplers and the registry."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import references as ref
import torch
from torch.autograd import gradcheck

from kernel_layers.kernels import (
    Kernel,
    available_kernels,
    gaussian_kernel,
    get_kernel,
    laplacian_kernel,
    log_shift,
    register_kernel,
    sample_frequencies,
    spectral_quantiles,
    squared_distances,
)


def test_gaussian_matches_reference() -> None:
    x, z = torch.rand(9, 4, dtype=torch.float64), torch.rand(6, 4, dtype=torch.float64)
    want = ref.gaussian(x.numpy(), z.numpy(), 0.3)
    np.testing.assert_allclose(gaussian_kernel(x, z, 0.3).numpy(), want, rtol=1e-12)


def test_laplacian_matches_reference() -> None:
    x, z = torch.rand(9, 4, dtype=torch.float64), torch.rand(6, 4, dtype=torch.float64)
    want = ref.laplacian(x.numpy(), z.numpy(), 0.3)
    np.testing.assert_allclose(laplacian_kernel(x, z, 0.3).numpy(), want, rtol=1e-12)


def test_squared_distances_clamped_and_exact_diagonal() -> None:
    # Large offsets make ||x||^2 + ||z||^2 - 2 x.z cancel; the result must stay >= 0.
    x = 1e4 + torch.rand(50, 3)
    d = squared_distances(x, x)
    assert (d >= 0).all()
    assert (d.diagonal() == 0).all()
    dup = squared_distances(x, x.clone())
    assert (dup >= 0).all()


def test_squared_distances_into_a_wider_buffer() -> None:
    # out= a column block of a wider row-major matrix: written there, through its row
    # stride, with the values of a fresh result; the other columns untouched.
    x, z = torch.rand(40, 7, dtype=torch.float64), torch.rand(25, 7, dtype=torch.float64)
    wide = torch.full((40, 31), 7.0, dtype=torch.float64)
    got = squared_distances(x, z, out=wide[:, :25])
    assert got.data_ptr() == wide.data_ptr()
    assert torch.equal(wide[:, :25], squared_distances(x, z))
    want = ((x.numpy()[:, None, :] - z.numpy()[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    assert (wide[:, 25:] == 7.0).all()


@pytest.mark.parametrize("offset", [100.0, 1000.0])
def test_gaussian_float32_far_from_the_origin(offset: float) -> None:
    # ||x||^2 + ||z||^2 - 2 x.z cancels to eps ||x||^2 away from the origin (uncentred:
    # off by 0.02 at offset 100, 0.8 at 1000); the points are centred first.
    gen = torch.Generator().manual_seed(0)
    x = offset + torch.rand(30, 5, generator=gen)
    z = offset + torch.rand(12, 5, generator=gen)
    gamma = 2.0  # kernel values about 0.1 to 1 for points spread over [0, 1)^5
    for a, b in ((x, z), (x, x)):
        want = gaussian_kernel(a.double(), b.double(), gamma)
        assert want.min() < 0.2
        got = gaussian_kernel(a, a if b is a else b, gamma).double()
        torch.testing.assert_close(got, want, rtol=0.0, atol=1e-5)
    assert (gaussian_kernel(x, x, gamma).diagonal() == 1.0).all()


def test_gaussian_float32_gradients_far_from_the_origin() -> None:
    # The backward's x * rowsum(E) - E z cancels as the forward's expansion does (to
    # 5e-4 of the largest gradient at offset 1000, uncentred, even from an exact G).
    gen = torch.Generator().manual_seed(1)
    x64 = (1000.0 + torch.rand(20, 4, generator=gen)).double()  # float32 points
    z64 = (1000.0 + torch.rand(9, 4, generator=gen)).double()
    w = torch.rand(20, 9, generator=gen, dtype=torch.float64)

    def grads(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        (gaussian_kernel(a, b, 2.0) * w.to(a.dtype)).sum().backward()
        (gram,) = torch.autograd.grad((gaussian_kernel(a, a, 2.0) ** 2).sum(), a)
        assert a.grad is not None and b.grad is not None
        return a.grad, b.grad, gram

    for got, want in zip(grads(x64.float(), z64.float()), grads(x64, z64), strict=True):
        torch.testing.assert_close(got.double(), want, rtol=0.0, atol=1e-5 * want.abs().max())


def test_gaussian_gradcheck_far_from_the_origin() -> None:
    gen = torch.Generator().manual_seed(2)
    x = (1e4 + torch.rand(5, 3, generator=gen, dtype=torch.float64)).requires_grad_()
    z = (1e4 + torch.rand(4, 3, generator=gen, dtype=torch.float64)).requires_grad_()
    assert gradcheck(lambda a, b: gaussian_kernel(a, b, 0.8), (x, z))
    assert gradcheck(lambda a: gaussian_kernel(a, a, 0.8), (x,))
    d = squared_distances(x.detach(), z.detach())
    want = ((x.detach()[:, None, :] - z.detach()[None, :, :]) ** 2).sum(-1)
    torch.testing.assert_close(d, want, rtol=1e-12, atol=0.0)


def test_sklearn_gamma_convention() -> None:
    from sklearn.metrics.pairwise import laplacian_kernel as sk_lap
    from sklearn.metrics.pairwise import rbf_kernel

    rng = np.random.default_rng(0)
    x, z = rng.random((5, 3)), rng.random((4, 3))
    tx, tz = torch.tensor(x), torch.tensor(z)
    np.testing.assert_allclose(gaussian_kernel(tx, tz, 0.7).numpy(), rbf_kernel(x, z, gamma=0.7))
    np.testing.assert_allclose(laplacian_kernel(tx, tz, 0.7).numpy(), sk_lap(x, z, gamma=0.7))


def test_sample_frequencies_seeded_and_cast() -> None:
    a = sample_frequencies("gaussian", 3, 5, 1.0, generator=torch.Generator().manual_seed(0))
    b = sample_frequencies(
        "gaussian", 3, 5, 1.0, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    assert a.dtype == torch.float32 and b.dtype == torch.float64
    torch.testing.assert_close(a.double(), b, rtol=1e-6, atol=1e-7)


def test_registry_lists_and_rejects() -> None:
    assert {"gaussian", "laplacian"} <= set(available_kernels())
    assert get_kernel("gaussian").has_spectrum
    with pytest.raises(ValueError, match=r"get_kernel: argument 'kernel' must be one of \["):
        get_kernel("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_kernel(Kernel("gaussian", gaussian_kernel))


def test_registry_plugs_in_a_new_kernel() -> None:
    linear = Kernel("test-linear", lambda x, z, gamma: gamma * x @ z.mT)
    register_kernel(linear)
    assert "test-linear" in available_kernels()
    assert "test-linear" not in available_kernels(spectral=True)
    with pytest.raises(ValueError, match="must have a spectral law"):
        get_kernel("test-linear", spectral=True)
    with pytest.raises(ValueError, match="must have a spectral law"):
        sample_frequencies("test-linear", 2, 2, 1.0)


# --- the extended registry: every kernel against an independent float64 reference -----

SPECTRAL = ["cauchy", "gaussian", "laplacian", "skewed_chi2", "skewed_intersection"]


def test_registry_has_every_kernel() -> None:
    assert set(ref.KERNELS) <= set(available_kernels())
    assert set(available_kernels(spectral=True)) == set(SPECTRAL)


@pytest.mark.parametrize("name", sorted(ref.KERNELS))
@pytest.mark.parametrize("gamma", [0.3, 1.0])
def test_kernel_matches_reference(name: str, gamma: float, device: torch.device) -> None:
    reference, params = ref.KERNELS[name]
    rng = np.random.default_rng(1)
    x, z = rng.random((9, 4)), rng.random((6, 4))
    x[0, 0] = z[0, 0] = 0.0  # chi2's 0/0 term counts 0
    spec = get_kernel(name)
    tx, tz = torch.tensor(x, device=device), torch.tensor(z, device=device)
    got = spec.matrix(tx, tz, gamma, **params).cpu().numpy()
    np.testing.assert_allclose(got, reference(x, z, gamma, **params), rtol=1e-11, atol=1e-13)
    # x is z (the landmark Gram path) and a bound kernel give the same values
    bound = spec.bind(params)
    gram = bound.matrix(tx, tx, gamma).cpu().numpy()
    np.testing.assert_allclose(gram, reference(x, x, gamma, **params), rtol=1e-11, atol=1e-13)


def test_skewed_defaults_match_scikit_learn_sampler() -> None:
    """gamma = 1, c = 1 is the kernel scikit-learn's SkewedChi2Sampler approximates."""
    from sklearn.kernel_approximation import SkewedChi2Sampler

    rng = np.random.default_rng(0)
    x = rng.random((15, 3))
    sampler = SkewedChi2Sampler(n_components=50000, random_state=0).fit(x)
    phi = sampler.transform(x)
    ours = get_kernel("skewed_chi2").matrix(torch.tensor(x), torch.tensor(x), 1.0).numpy()
    np.testing.assert_allclose(phi @ phi.T, ours, atol=0.03)
    np.testing.assert_allclose(ours, ref.ref_skewed_chi2(x, x, 1.0), rtol=1e-12)


def test_skewed_chi2_frequencies_are_scikit_learns_draw() -> None:
    """At gamma = 1 our quantile is scikit-learn's ``(1/pi) log tan(pi u / 2)``."""
    u = torch.rand(3, 40, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = np.log(np.tan(np.pi / 2 * u.numpy())) / np.pi
    w = sample_frequencies(
        "skewed_chi2", 3, 40, 1.0, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-10)


def test_cauchy_frequencies_are_laplace() -> None:
    w = sample_frequencies("cauchy", 50, 4000, 2.0, generator=torch.Generator().manual_seed(0))
    w = w.double().numpy().ravel()
    # Laplace with scale b = sqrt(gamma): E|w| = b, Var w = 2 b^2.
    assert np.abs(w).mean() == pytest.approx(np.sqrt(2.0), rel=0.01)
    assert w.var() == pytest.approx(4.0, rel=0.02)


@pytest.mark.parametrize("name", SPECTRAL)
def test_spectral_law_reproduces_the_kernel(name: str) -> None:
    """Bochner: ``E_w cos(w^T (u(x) - u(y))) = k(x, y)``, ``u`` the input transform."""
    reference, params = ref.KERNELS[name]
    spec = get_kernel(name).bind(params)
    x = torch.rand(6, 2, dtype=torch.float64)
    w = sample_frequencies(
        spec, 2, 200000, 0.7, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    u = x if spec.transform is None else spec.transform(x)
    diff = u[:, None, :] - u[None, :, :]
    approx = torch.cos(diff @ w).mean(-1).numpy()
    np.testing.assert_allclose(approx, reference(x.numpy(), x.numpy(), 0.7, **params), atol=0.01)


@pytest.mark.parametrize("name", sorted(ref.KERNELS))
def test_kernel_gradcheck(name: str, device: torch.device) -> None:
    _, params = ref.KERNELS[name]
    spec = get_kernel(name).bind(params)
    x = torch.rand(4, 3, dtype=torch.float64, device=device, requires_grad=True)
    z = torch.rand(3, 3, dtype=torch.float64, device=device, requires_grad=True)
    assert gradcheck(lambda a, b: spec.matrix(a, b, 0.8), (x, z))
    assert gradcheck(lambda a: spec.matrix(a, a, 0.8), (x,))


@pytest.mark.parametrize("name", ["cauchy", "skewed_chi2", "chi2"])
def test_product_kernels_chunk_dimensions(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One dimension at a time (big batches) and all at once (small ones) agree."""
    from kernel_layers.kernels import autograd

    spec = get_kernel(name)
    x = torch.rand(7, 5, dtype=torch.float64, requires_grad=True)
    z = torch.rand(4, 5, dtype=torch.float64, requires_grad=True)
    whole = spec.matrix(x, z, 0.6)
    (gx, gz) = torch.autograd.grad(whole.sin().sum(), (x, z))
    monkeypatch.setattr(autograd, "PRODUCT_CHUNK_ELEMENTS", 1)
    chunked = spec.matrix(x, z, 0.6)
    (cx, cz) = torch.autograd.grad(chunked.sin().sum(), (x, z))
    torch.testing.assert_close(chunked, whole, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(cx, gx, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(cz, gz, rtol=1e-12, atol=1e-14)


def test_product_kernel_float32_close_to_float64() -> None:
    x, z = torch.rand(20, 30, dtype=torch.float64), torch.rand(10, 30, dtype=torch.float64)
    for name in ("cauchy", "skewed_chi2", "chi2"):
        spec = get_kernel(name)
        torch.testing.assert_close(
            spec.matrix(x.float(), z.float(), 0.1).double(),
            spec.matrix(x, z, 0.1),
            rtol=1e-5,
            atol=1e-6,
        )


# --- domains ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["skewed_chi2", "skewed_intersection"])
def test_skewed_kernels_reject_inputs_at_or_below_minus_c(name: str) -> None:
    spec = get_kernel(name)
    x, z = torch.rand(3, 2), torch.rand(4, 2)
    bad = x.clone()
    bad[1, 0] = -1.0  # = -c for the default c = 1
    with pytest.raises(
        ValueError,
        match=rf"{name}_kernel: argument 'x' must have all entries > -c = -1 \(skewed kernels "
        r"act on log\(x \+ c\), c = kernel parameter 'c'\), got minimum -1",
    ):
        spec.matrix(bad, z, 1.0)
    with pytest.raises(ValueError, match=rf"{name}_kernel: argument 'z' must have all entries"):
        spec.matrix(x, bad, 1.0)
    assert torch.isfinite(spec.matrix(bad, z, 1.0, c=1.5)).all()  # -1 > -1.5


def test_chi2_rejects_negative_inputs() -> None:
    x = torch.rand(3, 2)
    x[0, 1] = -0.1
    with pytest.raises(
        ValueError, match=r"chi2_kernel: argument 'x' must have all entries >= 0 \(chi2 kernel\)"
    ):
        get_kernel("chi2").matrix(x, torch.rand(2, 2), 1.0)
    with pytest.raises(ValueError, match="chi2_kernel: argument 'z' must have all entries >= 0"):
        get_kernel("chi2").matrix(torch.rand(2, 2), x, 1.0)


def test_log_shift() -> None:
    x = torch.tensor([[0.0, 1.0]])
    torch.testing.assert_close(log_shift(x, 2.0), torch.log(x + 2.0))
    with pytest.raises(ValueError, match=r"log_shift: argument 'x' must have all entries > -c"):
        log_shift(x, 0.0)


# --- kernel parameters -----------------------------------------------------------------


def test_resolve_params_defaults_and_validation() -> None:
    assert get_kernel("gaussian").resolve_params(None) == {}
    assert get_kernel("skewed_chi2").resolve_params(None) == {"c": 1.0}
    assert get_kernel("polynomial").resolve_params({"degree": 2.0}) == {"degree": 2, "coef0": 1.0}
    assert get_kernel("polynomial").defaults == {"degree": 3, "coef0": 1.0}
    assert get_kernel("skewed_intersection").param_names == ["c"]


@pytest.mark.parametrize(
    ("name", "params", "exc", "match"),
    [
        (
            "gaussian",
            {"c": 1.0},
            ValueError,
            r"owner: argument 'kernel_params' must have keys among \[\] \(the parameters of "
            r"kernel 'gaussian'\), got unknown key\(s\) \['c'\]",
        ),
        (
            "polynomial",
            {"degre": 2},
            ValueError,
            r"must have keys among \['degree', 'coef0'\] .*got unknown key\(s\) \['degre'\]",
        ),
        ("skewed_chi2", {"gamma": 2.0}, ValueError, r"pass gamma as its own argument"),
        ("skewed_chi2", [("c", 1.0)], TypeError, "'kernel_params' must be a dict or None, got"),
        ("skewed_chi2", {"c": float("nan")}, ValueError, "'kernel_params.c' must be a finite"),
        ("skewed_chi2", {"c": "1"}, TypeError, "'kernel_params.c' must be a finite number"),
        (
            "polynomial",
            {"degree": 0},
            ValueError,
            r"'kernel_params.degree' must be an integer >= 1, got 0",
        ),
        (
            "polynomial",
            {"degree": 2.5},
            TypeError,
            r"'kernel_params.degree' must be an integer >= 1, got 2.5",
        ),
        (
            "polynomial",
            {"coef0": -1},
            ValueError,
            r"'kernel_params.coef0' must be a finite number >= 0, got -1.0",
        ),
    ],
)
def test_kernel_params_errors(name: str, params: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        get_kernel(name).resolve_params(params, owner="owner")  # type: ignore[arg-type]


def test_bind_fixes_the_parameters() -> None:
    x, z = torch.rand(4, 3, dtype=torch.float64), torch.rand(2, 3, dtype=torch.float64)
    spec = get_kernel("skewed_chi2")
    bound = spec.bind({"c": 3.0})
    assert bound.name == "skewed_chi2" and bound.params == () and bound.has_spectrum
    torch.testing.assert_close(bound.matrix(x, z, 0.5), spec.matrix(x, z, 0.5, c=3.0))
    torch.testing.assert_close(bound.transform(x), torch.log(x + 3.0))
    bad = torch.full((1, 3), -2.0)
    bound.validate_input("me", "x", bad)  # -2 > -3
    with pytest.raises(ValueError, match="me: argument 'x' must have all entries > -c = -1"):
        spec.validate_input("me", "x", bad)  # default c = 1
    assert get_kernel("gaussian").bind() is get_kernel("gaussian")
    clone = pickle.loads(pickle.dumps(bound))
    torch.testing.assert_close(clone.matrix(x, z, 0.5), bound.matrix(x, z, 0.5))


# --- user callables --------------------------------------------------------------------


def _module_level_kernel(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return (x @ z.mT + 1.0) ** 2


def test_get_kernel_wraps_a_callable() -> None:
    spec = get_kernel(_module_level_kernel)
    assert isinstance(spec, Kernel) and spec.name == "_module_level_kernel"
    assert not spec.has_spectrum and spec.params == ()
    x, z = torch.rand(5, 3), torch.rand(2, 3)
    torch.testing.assert_close(spec.matrix(x, z, 123.0), _module_level_kernel(x, z))
    clone = pickle.loads(pickle.dumps(spec))
    torch.testing.assert_close(clone.matrix(x, z, 1.0), _module_level_kernel(x, z))
    with pytest.raises(ValueError, match=r"owner: argument 'kernel' must have a spectral law"):
        get_kernel(lambda a, b: a @ b.mT, owner="owner", spectral=True)


def test_callable_kernel_output_is_checked() -> None:
    with pytest.raises(
        ValueError,
        match=r"kernel '<lambda>': the callable must return a Tensor of shape \[5, 2\] "
        r"\(k\(X\[B, D\], Z\[n, D\]\) -> \[B, n\]\), got shape \[5\]",
    ):
        get_kernel(lambda a, b: a.sum(1)).matrix(torch.rand(5, 3), torch.rand(2, 3), 1.0)
    with pytest.raises(TypeError, match=r"kernel '<lambda>': the callable must return a Tensor"):
        get_kernel(lambda a, b: 1.0).matrix(torch.rand(5, 3), torch.rand(2, 3), 1.0)


def test_unknown_kernel_message_lists_the_options() -> None:
    with pytest.raises(
        ValueError,
        match=r"argument 'kernel' must be one of \[.*'chi2'.*'skewed_chi2'.*\] or a callable "
        r"k\(X, Z\) -> Tensor\[B, n\], got 'rbf'",
    ):
        get_kernel("rbf")
    with pytest.raises(
        ValueError,
        match=r"must be one of \['cauchy', 'gaussian', 'laplacian', 'skewed_chi2', "
        r"'skewed_intersection'\], got 'rbf'",
    ):
        get_kernel("rbf", spectral=True)
    with pytest.raises(
        TypeError,
        match=r"argument 'kernel' must be a kernel name, a Kernel or a callable "
        r"k\(X, Z\) -> Tensor\[B, n\], got int",
    ):
        get_kernel(3, spectral=True)  # type: ignore[arg-type]


def test_sample_frequencies_rejects_bad_gamma() -> None:
    with pytest.raises(ValueError, match="sample_frequencies: argument 'gamma' must be a finite"):
        sample_frequencies("gaussian", 2, 2, -1.0)


def test_spectral_quantiles_scale_to_sample_frequencies() -> None:
    for name in SPECTRAL:
        spec = get_kernel(name)
        h = spectral_quantiles(name, 3, 7, generator=torch.Generator().manual_seed(1))
        w = sample_frequencies(name, 3, 7, 0.4, generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(w, spec.scale(0.4) * h)


def test_gaussian_gram_takes_a_symmetric_gradient_as_the_kernel_does() -> None:
    from kernel_layers.kernels.functions import gaussian_gram

    gen = torch.Generator().manual_seed(3)
    z = torch.rand(12, 5, dtype=torch.float64, generator=gen)
    w = torch.randn(12, 12, dtype=torch.float64, generator=gen)
    sym = w + w.mT
    np.testing.assert_array_equal(
        gaussian_gram(z, 0.7).detach(), gaussian_kernel(z, z, 0.7).detach()
    )
    za, zb = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    (gaussian_gram(za, 0.7) * sym).sum().backward()
    (gaussian_kernel(zb, zb, 0.7) * sym).sum().backward()
    torch.testing.assert_close(za.grad, zb.grad, rtol=1e-12, atol=1e-12)
    zc = z.clone().requires_grad_(True)  # the contract: a gradient that is not symmetric
    (gaussian_gram(zc, 0.7) * w).sum().backward()  # is taken as 2 w, not w + w^T
    assert not torch.allclose(zc.grad, za.grad * 0.5, rtol=1e-3)
    assert gradcheck(
        lambda t: (gaussian_gram(t, 0.7) * sym).sum(), (z.clone().requires_grad_(True),)
    )
