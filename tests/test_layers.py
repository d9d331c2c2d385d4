"""FourierLayer and NystromLayer: the shared contract plus each layer's approximation
guarantees; the KernelFeatureMap base with a user-defined map."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest
import references as ref
import torch
from layer_contract import IN_FEATURES, OUT_FEATURES, FeatureMapContract, LayerContract
from sklearn.datasets import load_digits
from torch import Tensor

from kernel_layers import EnsembleNystrom, FourierLayer, NystromLayer, discriminant_information
from kernel_layers.kernels import get_kernel
from kernel_layers.layers.ard import Bandwidths
from kernel_layers.layers.base import KernelFeatureMap


def _build(cls: type, kwargs: dict) -> torch.nn.Module:
    args = {"in_features": IN_FEATURES, "out_features": OUT_FEATURES, "gamma": 0.5, "seed": 0}
    args.update(kwargs)
    if "generator" in kwargs and "seed" not in kwargs:
        args.pop("seed")
    return cls(args.pop("in_features"), args.pop("out_features"), **args)


class TestFourierContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(FourierLayer, kwargs)


class TestNystromContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(NystromLayer, kwargs)


# --- the KernelFeatureMap base, with a map a user writes -------------------------------


class RandomCosineMap(KernelFeatureMap):
    """A fixed random-feature map ``sqrt(2/J) cos(x W + b)`` in a few lines."""

    def __init__(self, in_features: int, out_features: int, *, seed: int = 0) -> None:
        super().__init__(in_features, out_features)
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("w", torch.randn(in_features, out_features, generator=gen))
        self.register_buffer("b", torch.rand(out_features, generator=gen) * 2 * math.pi)

    def forward(self, x: Tensor) -> Tensor:
        return math.sqrt(2 / self.out_features) * torch.cos(x @ self.w + self.b)

    def get_config(self) -> dict[str, object]:
        return self.base_config()


class TestUserDefinedMapContract(FeatureMapContract):
    def make_layer(self, **kwargs: object) -> KernelFeatureMap:
        seed = kwargs.get("seed", 0)
        assert isinstance(seed, int)
        return RandomCosineMap(IN_FEATURES, OUT_FEATURES, seed=seed)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (
            (0, 3),
            ValueError,
            r"RandomCosineMap: argument 'in_features' must be an integer >= 1, got 0",
        ),
        (
            (2.5, 3),
            TypeError,
            r"RandomCosineMap: argument 'in_features' must be an integer >= 1, got 2.5",
        ),
        (
            (True, 3),
            TypeError,
            r"RandomCosineMap: argument 'in_features' must be an integer >= 1, got True",
        ),
        (
            (3, -2),
            ValueError,
            r"RandomCosineMap: argument 'out_features' must be an integer >= 1, got -2",
        ),
        (
            (3, "4"),
            TypeError,
            r"RandomCosineMap: argument 'out_features' must be an integer >= 1, got '4'",
        ),
    ],
)
def test_base_refuses_bad_sizes(args: tuple, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        RandomCosineMap(*args)


def test_base_defaults() -> None:
    layer = RandomCosineMap(3, 4)
    assert repr(layer) == "RandomCosineMap(in_features=3, out_features=4)"
    assert layer.get_config() == {"in_features": 3, "out_features": 4}
    assert (layer.feature_width, layer.feature_blocks) == (4, [range(4)])
    assert layer.data_rows_wanted() == 0
    layer.init_from_data(torch.rand(2, 3))  # the default does nothing
    x, y = torch.rand(30, 3, dtype=torch.float64), torch.arange(30) % 2
    layer = layer.double()
    torch.testing.assert_close(
        layer.discriminant_information(x, y, rho=0.5),
        discriminant_information(layer(x), y, rho=0.5),
    )


def test_base_is_abstract() -> None:
    class NoForward(KernelFeatureMap):
        def get_config(self) -> dict[str, object]:
            return self.base_config()

    with pytest.raises(TypeError, match=r"abstract .*forward"):
        NoForward(3, 4)  # type: ignore[abstract]


@pytest.mark.parametrize("cls", [NystromLayer, FourierLayer])
def test_ard_is_written_once(cls: type) -> None:
    """Both maps take their bandwidths from the one mixin: same checks, same parameter."""
    assert issubclass(cls, Bandwidths)
    layer = cls(4, 6, ard=True, blocks=[[0, 2], [1, 3]], seed=0, dtype=torch.float64)
    assert layer.log_bandwidth is not None and layer.log_bandwidth.shape == (2,)
    with torch.no_grad():
        layer.log_bandwidth.copy_(torch.tensor([0.5, -1.0]))
    sigma = torch.tensor([0.5, -1.0, 0.5, -1.0], dtype=torch.float64).exp()
    torch.testing.assert_close(layer.input_bandwidth, sigma)
    assert layer.get_config()["blocks"] == [[0, 2], [1, 3]]
    assert "ard=True, blocks=[[0, 2], [1, 3]]" in repr(layer)
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"{name}: argument 'blocks' must be None when ard=False"):
        cls(4, 6, blocks=[2, 2])
    with pytest.raises(
        ValueError, match=rf"{name}: argument 'blocks' must be .* got sizes \[1, 2\]"
    ):
        cls(4, 6, ard=True, blocks=[1, 2])
    with pytest.raises(TypeError, match=rf"{name}: argument 'ard' must be a bool, got 1"):
        cls(4, 6, ard=1)
    assert cls(4, 6, seed=0).input_bandwidth is None


# --- FourierLayer ---------------------------------------------------------------------


def test_fourier_forward_formula() -> None:
    layer = FourierLayer(3, 4, gamma=2.0, seed=0, dtype=torch.float64)
    x = torch.rand(5, 3, dtype=torch.float64)
    w, b = layer.frequencies.detach().numpy(), layer.phases.detach().numpy()
    want = math.sqrt(2 / 4) * np.cos(x.numpy() @ w + b)
    np.testing.assert_allclose(layer(x).detach().numpy(), want, rtol=1e-12)
    assert ((0 <= b) & (b <= 2 * math.pi)).all()


@pytest.mark.parametrize(
    ("kernel", "reference"), [("gaussian", ref.gaussian), ("laplacian", ref.laplacian)]
)
def test_fourier_kernel_error_shrinks_like_inverse_sqrt_j(kernel: str, reference) -> None:
    x = torch.rand(40, 3, dtype=torch.float64)
    exact = reference(x.numpy(), x.numpy(), 0.8)
    errors = {}
    for j in (100, 10000):
        trials = []
        for seed in range(3):
            phi = FourierLayer(3, j, kernel=kernel, gamma=0.8, seed=seed, dtype=torch.float64)(x)
            approx = (phi @ phi.T).detach().numpy()
            trials.append(np.sqrt(((approx - exact) ** 2).mean()))
        errors[j] = float(np.mean(trials))
    # Monte-Carlo error: std of cos products is <= 1, so RMS error <= ~1/sqrt(J).
    assert errors[100] < 1.5 / math.sqrt(100)
    assert errors[10000] < 1.5 / math.sqrt(10000)
    ratio = errors[100] / errors[10000]
    assert 5 < ratio < 20  # sqrt(10000 / 100) = 10


def test_fourier_frequency_distribution_gaussian() -> None:
    layer = FourierLayer(50, 2000, gamma=3.0, seed=0, dtype=torch.float64)
    w = layer.frequencies.detach().numpy().ravel()
    assert w.mean() == pytest.approx(0.0, abs=0.01)
    assert w.var() == pytest.approx(2 * 3.0, rel=0.01)  # N(0, 2 gamma)


def test_fourier_frequency_distribution_laplacian() -> None:
    layer = FourierLayer(50, 2000, kernel="laplacian", gamma=3.0, seed=0, dtype=torch.float64)
    w = layer.frequencies.detach().numpy().ravel()
    # Cauchy with scale gamma: median |w| = gamma, quartiles at +-gamma.
    assert np.median(np.abs(w)) == pytest.approx(3.0, rel=0.02)
    assert np.isfinite(w).all()


def test_fourier_untrained_baseline_frozen() -> None:
    layer = FourierLayer(3, 4, trainable=False, seed=0)
    assert not layer.frequencies.requires_grad and not layer.phases.requires_grad
    assert "trainable=False" in repr(layer)


def test_fourier_generator_reproducible() -> None:
    a = FourierLayer(3, 4, generator=torch.Generator().manual_seed(7))
    b = FourierLayer(3, 4, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(a.frequencies, b.frequencies)


# --- NystromLayer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "reference"), [("gaussian", ref.gaussian), ("laplacian", ref.laplacian)]
)
def test_nystrom_with_all_points_as_landmarks_is_exact(kernel: str, reference) -> None:
    x = torch.rand(30, 4, dtype=torch.float64)
    layer = NystromLayer(4, 30, kernel=kernel, gamma=0.7, landmarks=x, jitter=1e-14)
    phi = layer(x).detach().numpy()
    np.testing.assert_allclose(phi @ phi.T, reference(x.numpy(), x.numpy(), 0.7), atol=1e-8)


def test_nystrom_features_match_numpy_reference() -> None:
    x = torch.rand(25, 4, dtype=torch.float64)
    z = torch.rand(6, 4, dtype=torch.float64)
    layer = NystromLayer(4, 6, gamma=0.7, landmarks=z, jitter=1e-12)
    g, k = ref.gaussian(x.numpy(), z.numpy(), 0.7), ref.gaussian(z.numpy(), z.numpy(), 0.7)
    approx = g @ np.linalg.inv(k) @ g.T  # the Nystrom approximation G K^-1 G^T
    phi = layer(x).detach().numpy()
    np.testing.assert_allclose(phi @ phi.T, approx, atol=1e-9)


def test_nystrom_approximation_improves_with_landmarks() -> None:
    x, _ = load_digits(return_X_y=True)
    x = torch.tensor(x[:400] / 16.0)
    exact = ref.gaussian(x.numpy(), x.numpy(), 0.02)
    errors = []
    for n in (20, 100, 300):
        phi = NystromLayer.from_data(x, n, gamma=0.02, seed=0)(x).detach().numpy()
        errors.append(np.abs(phi @ phi.T - exact).max())
    assert errors[0] > errors[1] > errors[2]


def test_nystrom_from_data_selects_distinct_rows() -> None:
    x = torch.rand(50, 3)
    layer = NystromLayer.from_data(x, 20, seed=0, gamma=2.0, trainable=False)
    z = layer.landmarks
    assert z.shape == (20, 3) and not z.requires_grad
    rows = {tuple(r.tolist()) for r in z}
    assert len(rows) == 20 and rows <= {tuple(r.tolist()) for r in x}
    assert layer.gamma == 2.0


def test_nystrom_duplicate_landmarks_finite() -> None:
    x = torch.rand(20, 3)
    z = torch.cat([x[:4], x[:4], x[:1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default jitter must suffice here
        out = NystromLayer(3, 9, landmarks=z, gamma=1.0)(x)
    assert torch.isfinite(out).all()
    exact = ref.gaussian(x.numpy(), x.numpy(), 1.0)
    np.testing.assert_allclose((out @ out.T).detach().numpy()[:4, :4], exact[:4, :4], atol=1e-3)


def test_nystrom_jitter_escalates_with_warning() -> None:
    x = torch.rand(10, 3, dtype=torch.float64)
    z = torch.cat([x[:3]] * 4)  # rank 3 of 12
    layer = NystromLayer(3, 12, landmarks=z, gamma=1.0, jitter=1e-300)
    with pytest.warns(
        RuntimeWarning, match="NystromLayer: Cholesky factorisation failed; succeeded"
    ):
        out = layer(x)
    assert torch.isfinite(out).all()


def test_nystrom_random_landmarks_in_unit_cube() -> None:
    layer = NystromLayer(4, 100, seed=0)
    assert layer.landmarks.min() >= 0 and layer.landmarks.max() < 1


def test_nystrom_given_landmarks_are_copied() -> None:
    z = torch.rand(7, 5)
    layer = NystromLayer(5, 7, landmarks=z)
    with torch.no_grad():
        layer.landmarks.add_(1.0)
    assert z.max() < 1.0


def test_nystrom_errors() -> None:
    with pytest.raises(
        ValueError, match=r"'landmarks' must have out_features=3 rows, got shape \[4, 2\]"
    ):
        NystromLayer(2, 3, landmarks=torch.rand(4, 2))
    with pytest.raises(
        ValueError, match=r"'landmarks' must have last dimension 2, got shape \[3, 5\]"
    ):
        NystromLayer(2, 3, landmarks=torch.rand(3, 5))
    with pytest.raises(ValueError, match="'landmarks' must be finite"):
        NystromLayer(2, 1, landmarks=torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(ValueError, match=r"'jitter' must be a finite number > 0, got -1\.0"):
        NystromLayer(2, 3, jitter=-1.0)
    with pytest.raises(
        ValueError,
        match=r"from_data: argument 'init' must be one of "
        r"\['random', 'kmeans', 'kmeans\+\+', 'greedy'\], got 'best'",
    ):
        NystromLayer.from_data(torch.rand(5, 2), 3, init="best")
    with pytest.raises(
        ValueError, match="'out_features' must be <= the number of rows of x \\(5\\), got 6"
    ):
        NystromLayer.from_data(torch.rand(5, 2), 6)
    with pytest.raises(ValueError, match=r"from_data: argument 'x' must have shape \[N, D\]"):
        NystromLayer.from_data(torch.rand(5), 3)


# --- the extended kernels in both layers ----------------------------------------------


class TestFourierARDContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(FourierLayer, {"ard": True, "blocks": [2, 3], **kwargs})


class TestFourierSeparableContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(FourierLayer, {"ard": True, "blocks": [2, 3], "separable": True, **kwargs})


class TestFourierSkewedContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(
            FourierLayer, {"kernel": "skewed_chi2", "kernel_params": {"c": 0.5}, **kwargs}
        )


class TestNystromARDContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(NystromLayer, {"ard": True, "blocks": [2, 3], **kwargs})


class TestNystromCauchyContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(NystromLayer, {"kernel": "cauchy", **kwargs})


class TestNystromSkewedContract(LayerContract):
    def make_layer(self, **kwargs: object) -> torch.nn.Module:
        return _build(
            NystromLayer, {"kernel": "skewed_intersection", "kernel_params": {"c": 2.0}, **kwargs}
        )


def _callable_kernel(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """A module-level (hence picklable) user kernel: ``exp(-||x - z||^2 / 2)``."""
    return torch.exp(-0.5 * torch.cdist(x, z).square())


@pytest.mark.parametrize("name", sorted(ref.KERNELS))
def test_nystrom_exact_at_n_equals_n_for_every_kernel(name: str) -> None:
    reference, params = ref.KERNELS[name]
    x = torch.rand(20, 4, dtype=torch.float64)
    layer = NystromLayer(
        4, 20, kernel=name, gamma=0.7, kernel_params=params, landmarks=x, jitter=1e-13
    )
    assert layer.kernel_params == {**get_kernel(name).defaults, **params}
    phi = layer(x).detach().numpy()
    exact = reference(x.numpy(), x.numpy(), 0.7, **params)
    np.testing.assert_allclose(phi @ phi.T, exact, atol=1e-7 * np.abs(exact).max())


def test_nystrom_exact_with_a_callable_kernel() -> None:
    x = torch.rand(15, 3, dtype=torch.float64)
    layer = NystromLayer(3, 15, kernel=_callable_kernel, landmarks=x, jitter=1e-13)
    assert layer.kernel == "_callable_kernel"
    phi = layer(x).detach()
    torch.testing.assert_close(phi @ phi.T, _callable_kernel(x, x), atol=1e-8, rtol=0)
    clone = pickle.loads(pickle.dumps(layer))
    torch.testing.assert_close(clone(x), layer(x))


def test_nystrom_lambda_kernel_works_but_does_not_pickle() -> None:
    x = torch.rand(10, 3)
    layer = NystromLayer(3, 4, kernel=lambda a, b: (a @ b.mT + 1.0) ** 2, seed=0)
    assert layer(x).shape == (10, 4)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(layer)


def test_nystrom_kernel_spec_feeds_nysdi() -> None:
    """NysDI from the layer's bound kernel equals DI of the layer's features."""
    from kernel_layers import discriminant_information, nystrom_discriminant_information

    x = torch.rand(40, 3, dtype=torch.float64)
    labels = torch.arange(40) % 3
    for kernel, params in [("skewed_chi2", {"c": 0.3}), (_callable_kernel, None)]:
        layer = NystromLayer(
            3, 6, kernel=kernel, kernel_params=params, gamma=0.9, seed=0, dtype=torch.float64
        )
        layer.jitter  # noqa: B018 - the default for float64
        nysdi = nystrom_discriminant_information(
            x, labels, layer.landmarks, kernel=layer.kernel_spec, gamma=0.9, rho=0.1
        )
        di = discriminant_information(layer(x), labels, rho=0.1)
        torch.testing.assert_close(nysdi, di, rtol=1e-7, atol=1e-9)
    nysdi = nystrom_discriminant_information(
        x, labels, x[:5], kernel=_callable_kernel, gamma=1.0, rho=0.1
    )
    assert torch.isfinite(nysdi)


@pytest.mark.parametrize("name", ["cauchy", "skewed_chi2", "skewed_intersection"])
@pytest.mark.parametrize("features", ["cos", "cossin"])
def test_fourier_kernel_error_shrinks_for_new_kernels(name: str, features: str) -> None:
    reference, params = ref.KERNELS[name]
    # the skewed kernels act on log(x + c): spread the inputs so the kernel is far from 1
    x = torch.rand(40, 3, dtype=torch.float64) * (5.0 if "skewed" in name else 1.0)
    exact = reference(x.numpy(), x.numpy(), 0.8, **params)
    errors = {}
    for j in (100, 10000):
        trials = []
        for seed in range(6):
            layer = FourierLayer(
                3,
                j,
                kernel=name,
                gamma=0.8,
                kernel_params=params,
                features=features,
                seed=seed,
                dtype=torch.float64,
            )
            phi = layer(x).detach()
            approx = (phi @ phi.T).numpy()  # torch's matmul: numpy's BLAS threads contend here
            trials.append(np.sqrt(((approx - exact) ** 2).mean()))
        errors[j] = float(np.mean(trials))
    assert errors[100] < 1.5 / math.sqrt(100)
    assert errors[10000] < 1.5 / math.sqrt(10000)
    # Monte-Carlo rate sqrt(10000 / 100) = 10 (1/J would give 100); errors of a 40 x 40
    # matrix are strongly correlated, so a few seeds leave a wide band around 10.
    assert 4 < errors[100] / errors[10000] < 25


@pytest.mark.parametrize("cls", [FourierLayer, NystromLayer])
@pytest.mark.parametrize("name", ["skewed_chi2", "skewed_intersection"])
def test_layers_reject_inputs_at_or_below_minus_c(cls: type, name: str) -> None:
    layer = cls(2, 4, kernel=name, seed=0)
    x = torch.rand(3, 2)
    x[2, 1] = -1.0
    with pytest.raises(
        ValueError, match=rf"{cls.__name__}: argument 'x' must have all entries > -c = -1 "
    ):
        layer(x)
    shifted = cls(2, 4, kernel=name, kernel_params={"c": 2.0}, seed=0)
    assert torch.isfinite(shifted(x)).all()
    x[0, 0] = -2.5
    with pytest.raises(ValueError, match=r"must have all entries > -c = -2 .*got minimum -2.5"):
        shifted(x)


def test_nystrom_chi2_rejects_negative_inputs() -> None:
    layer = NystromLayer(2, 3, kernel="chi2", seed=0)
    with pytest.raises(
        ValueError, match="NystromLayer: argument 'x' must have all entries >= 0 \\(chi2 kernel\\)"
    ):
        layer(torch.tensor([[0.5, -0.5]]))


def test_nystrom_trained_landmarks_leaving_the_domain_stay_usable() -> None:
    # Pixels in [0, 1] with many exact zeros: one Adam step of DI moves landmark entries
    # from 0 to below 0 (the gradient passes on the boundary); the kernel then sees them
    # raised back to 0 instead of refusing every later forward.
    data = load_digits()
    x = torch.tensor(data.data[:300] / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target[:300])
    layer = NystromLayer.from_data(x, 20, kernel="chi2", gamma=0.1, seed=0)
    assert layer.landmarks.requires_grad and layer.landmarks.min() == 0.0
    opt = torch.optim.Adam(layer.parameters(), lr=1e-2)
    for _ in range(2):
        di = layer.discriminant_information(x, y, rho=1e-4)
        assert torch.isfinite(di)
        opt.zero_grad()
        (-di).backward()
        opt.step()
    assert layer.landmarks.min() < 0.0
    features = layer(x[:5])
    assert features.shape == (5, 20) and torch.isfinite(features).all()
    layer.eval()
    with torch.no_grad():  # the cached projection: the same map
        torch.testing.assert_close(layer(x[:5]), features.detach(), rtol=1e-4, atol=1e-5)
    clamped = NystromLayer(64, 20, kernel="chi2", gamma=0.1, landmarks=layer.landmarks.clamp(0))
    torch.testing.assert_close(clamped(x[:5]), features.detach(), rtol=1e-4, atol=1e-5)

    skewed = NystromLayer(2, 3, kernel="skewed_chi2", kernel_params={"c": 0.5}, seed=0)
    with torch.no_grad():
        skewed.landmarks[0, 1] = -0.7  # below -c
    out = skewed(torch.rand(4, 2))
    assert torch.isfinite(out).all()
    assert skewed.landmarks.grad is None
    out.sum().backward()
    assert skewed.landmarks.grad is not None and skewed.landmarks.grad[0, 1] == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_skewed_landmarks_below_the_shift_are_projected_in_every_dtype(dtype: torch.dtype) -> None:
    # A margin of 1e-6 |c| rounded back onto -c itself in half precision: the forward
    # refused the projected landmarks.
    layer = NystromLayer(4, 3, kernel="skewed_chi2", landmarks=torch.rand(3, 4).to(dtype))
    with torch.no_grad():
        layer.landmarks[0, 0] = -1.5  # c = 1
    assert torch.isfinite(layer(torch.rand(5, 4).to(dtype))).all()


def test_ensemble_names_the_map_whose_landmarks_leave_the_domain() -> None:
    bad = -torch.rand(3, 2) - 0.5
    with pytest.raises(
        ValueError,
        match=r"EnsembleNystrom: argument 'landmarks\[1\]' must have all entries >= 0 \(chi2",
    ):
        EnsembleNystrom(2, 6, num_maps=2, kernel="chi2", landmarks=[torch.rand(3, 2), bad])


def test_nystrom_refuses_landmarks_outside_the_kernel_domain() -> None:
    bad = torch.rand(3, 2)
    bad[1, 0] = -0.25
    with pytest.raises(
        ValueError,
        match=r"NystromLayer: argument 'landmarks' must have all entries >= 0 \(chi2 kernel\), "
        r"got minimum -0.25",
    ):
        NystromLayer(2, 3, kernel="chi2", landmarks=bad)
    with pytest.raises(ValueError, match=r"NystromLayer: argument 'landmarks' must have all"):
        NystromLayer.from_data(-1.0 - torch.rand(9, 2), 4, kernel="chi2", seed=0)
    with pytest.raises(
        ValueError, match=r"NystromLayer: argument 'landmarks' must have all entries > -c = -0.2"
    ):
        NystromLayer(2, 3, kernel="skewed_intersection", kernel_params={"c": 0.2}, landmarks=bad)
    layer = NystromLayer(2, 3, kernel="chi2", landmarks=bad.abs())
    with pytest.raises(ValueError, match=r"NystromLayer: argument 'rows' must have all entries"):
        layer.init_from_data(bad)
    # A user's kernel with an input check: no known projection, so no trainable landmarks.
    from kernel_layers.kernels import Kernel
    from kernel_layers.kernels.functions import check_nonnegative_input

    def positive_only(owner: str, name: str, x: Tensor) -> None:
        check_nonnegative_input(owner, name, x)

    spec = Kernel("test_positive", get_kernel("chi2").matrix, check_input=positive_only)
    with pytest.raises(
        ValueError,
        match=r"NystromLayer: argument 'trainable' must be False with kernel 'test_positive', "
        r"whose input check has no projection onto its domain \(project_input",
    ):
        NystromLayer(2, 3, kernel=spec)
    assert torch.isfinite(NystromLayer(2, 3, kernel=spec, trainable=False)(torch.rand(4, 2))).all()
    # with its projection, the same kernel trains
    projected = Kernel(
        "test_positive",
        get_kernel("chi2").matrix,
        check_input=positive_only,
        project_input=get_kernel("chi2").project_input,
    )
    assert NystromLayer(2, 3, kernel=projected).landmarks.requires_grad


@pytest.mark.parametrize("cls", [FourierLayer, NystromLayer])
def test_layers_validate_kernel_params(cls: type) -> None:
    name = cls.__name__
    with pytest.raises(
        ValueError,
        match=rf"{name}: argument 'kernel_params' must have keys among \['c'\] \(the parameters "
        r"of kernel 'skewed_chi2'\), got unknown key\(s\) \['skewedness'\]",
    ):
        cls(2, 4, kernel="skewed_chi2", kernel_params={"skewedness": 1.0})
    with pytest.raises(ValueError, match=rf"{name}: argument 'kernel_params.c' must be a finite"):
        cls(2, 4, kernel="skewed_intersection", kernel_params={"c": float("inf")})
    with pytest.raises(ValueError, match=r"must have keys among \[\] .*'gaussian'"):
        cls(2, 4, kernel_params={"degree": 2})


def test_nystrom_polynomial_params_and_errors() -> None:
    x = torch.rand(6, 3, dtype=torch.float64)
    layer = NystromLayer(
        3, 6, kernel="polynomial", kernel_params={"degree": 2}, landmarks=x, gamma=0.5
    )
    assert layer.kernel_params == {"degree": 2, "coef0": 1.0}
    assert "kernel_params={'degree': 2, 'coef0': 1.0}" in repr(layer)
    with pytest.raises(
        ValueError, match=r"NystromLayer: argument 'kernel_params.degree' must be an integer >= 1"
    ):
        NystromLayer(3, 6, kernel="polynomial", kernel_params={"degree": -1})
    with pytest.raises(ValueError, match=r"argument 'kernel' must be one of \[.*\] or a callable"):
        NystromLayer(3, 6, kernel="poly")


@pytest.mark.parametrize("name", ["polynomial", "linear", "chi2"])
def test_fourier_rejects_kernels_without_spectral_law(name: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"FourierLayer: argument 'kernel' must have a spectral law \(one of \['cauchy', "
        rf"'gaussian', 'laplacian', 'skewed_chi2', 'skewed_intersection'\]\), got '{name}'",
    ):
        FourierLayer(2, 4, kernel=name)
    with pytest.raises(ValueError, match="FourierLayer: argument 'kernel' must have a spectral"):
        FourierLayer(2, 4, kernel=_callable_kernel)  # type: ignore[arg-type]


def test_layers_with_kernel_params_pickle_and_round_trip() -> None:
    x = torch.rand(5, 2)
    for layer in (
        FourierLayer(2, 6, kernel="skewed_chi2", kernel_params={"c": 0.25}, seed=0),
        NystromLayer(2, 3, kernel="skewed_chi2", kernel_params={"c": 0.25}, seed=0),
    ):
        clone = pickle.loads(pickle.dumps(layer))
        assert clone.kernel_params == {"c": 0.25}
        torch.testing.assert_close(clone(x), layer(x))
        fresh = type(layer)(2, layer.out_features, kernel="skewed_chi2", kernel_params={"c": 0.25})
        fresh.load_state_dict(layer.state_dict())
        torch.testing.assert_close(fresh(x), layer(x))
