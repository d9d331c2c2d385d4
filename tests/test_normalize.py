"""Feature centring and normalisation against the kernel-matrix formulas (NumPy)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from torch import nn

from kernel_layers.layers.normalize import (
    NORM_EPS,
    FeatureCentering,
    FeatureNormalization,
    center_features,
    normalize_features,
)
from kernel_layers.layers.nystrom import NystromLayer


def _features(rows: int, seed: int = 0) -> torch.Tensor:
    """Nystrom features of random points (the explicit map of a Gaussian kernel)."""
    gen = torch.Generator().manual_seed(seed)
    layer = NystromLayer(3, 6, gamma=1.0, seed=0, dtype=torch.float64, trainable=False)
    return layer(torch.rand(rows, 3, generator=gen, dtype=torch.float64))


def test_centering_matches_centred_kernel_matrices() -> None:
    train, test = _features(30), _features(7, seed=1)
    k = (train @ train.T).numpy()
    k_t = (test @ train.T).numpy()
    k_tt = (test @ test.T).numpy()
    n = len(k)
    h = np.eye(n) - np.ones((n, n)) / n
    ones_t = np.ones((len(k_t), n)) / n
    ones_n = np.ones((n, n)) / n
    # train: H K H; test-train and test-test: centred with the training statistics
    want_train = h @ k @ h
    want_cross = k_t - ones_t @ k - k_t @ ones_n + ones_t @ k @ ones_n
    want_test = k_tt - k_t @ ones_t.T - ones_t @ k_t.T + ones_t @ k @ ones_t.T

    centre = FeatureCentering(6).to(torch.float64).fit(train)
    tr, te = centre(train).numpy(), centre(test).numpy()
    np.testing.assert_allclose(tr @ tr.T, want_train, atol=1e-12)
    np.testing.assert_allclose(te @ tr.T, want_cross, atol=1e-12)
    np.testing.assert_allclose(te @ te.T, want_test, atol=1e-12)
    functional = center_features(train).numpy()
    np.testing.assert_allclose(functional @ functional.T, want_train, atol=1e-12)


def test_normalization_matches_normalised_kernel() -> None:
    phi = _features(12)
    k = (phi @ phi.T).numpy()
    d = np.sqrt(np.diag(k))
    want = k / np.outer(d, d)
    for out in (FeatureNormalization()(phi), normalize_features(phi)):
        np.testing.assert_allclose((out @ out.T).numpy(), want, atol=1e-12)
    zero = FeatureNormalization()(torch.zeros(2, 4))
    assert torch.equal(zero, torch.zeros(2, 4))  # undefined kernel: 0, not NaN


def test_normalised_centred_kernel_composes() -> None:
    train = _features(25)
    model = nn.Sequential(FeatureCentering(6).to(torch.float64).fit(train), FeatureNormalization())
    out = model(train).numpy()
    k = (train @ train.T).numpy()
    h = np.eye(25) - 1 / 25
    kc = h @ k @ h
    d = np.sqrt(np.diag(kc))
    np.testing.assert_allclose(out @ out.T, kc / np.outer(d, d), atol=1e-10)


def test_update_over_batches_equals_fit() -> None:
    phi = _features(50).float()
    streamed = FeatureCentering(6)
    for part in phi.split(7):
        streamed.update(part)
    fitted = FeatureCentering(6).fit(phi)
    torch.testing.assert_close(streamed.mean, fitted.mean)
    torch.testing.assert_close(fitted.mean, phi.mean(0))
    assert int(streamed.count) == 50 and streamed.fitted


def test_momentum_moving_average_in_training_mode() -> None:
    a, b = torch.rand(8, 4), torch.rand(8, 4)
    centre = FeatureCentering(4, momentum=0.25)
    centre(a)  # first batch: its mean
    torch.testing.assert_close(centre.mean, a.mean(0))
    centre(b)
    torch.testing.assert_close(centre.mean, 0.75 * a.mean(0) + 0.25 * b.mean(0))
    centre.eval()
    frozen = centre.mean.clone()
    out = centre(torch.rand(3, 2, 4))  # leading dimensions; no update in eval mode
    assert out.shape == (3, 2, 4)
    torch.testing.assert_close(centre.mean, frozen)


def test_state_dict_round_trip() -> None:
    centre = FeatureCentering(5).fit(torch.rand(10, 5))
    buffer = io.BytesIO()
    torch.save(centre.state_dict(), buffer)
    buffer.seek(0)
    fresh = FeatureCentering(5)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.rand(3, 5)
    torch.testing.assert_close(fresh(x), centre(x))
    assert "momentum=None" in repr(fresh) and f"eps={NORM_EPS}" in repr(FeatureNormalization())


def test_errors() -> None:
    with pytest.raises(
        RuntimeError, match=r"FeatureCentering: the mean is not estimated; call fit"
    ):
        FeatureCentering(3)(torch.rand(2, 3))
    with pytest.raises(
        ValueError, match="FeatureCentering: argument 'num_features' must be an integer >= 1"
    ):
        FeatureCentering(0)
    with pytest.raises(
        ValueError, match=r"FeatureCentering: argument 'momentum' must be None or in \(0, 1\]"
    ):
        FeatureCentering(3, momentum=1.5)
    with pytest.raises(ValueError, match="FeatureCentering: argument 'momentum' must be a finite"):
        FeatureCentering(3, momentum=0.0)
    with pytest.raises(
        ValueError, match=r"FeatureCentering: argument 'features' must have last dimension 3"
    ):
        FeatureCentering(3).fit(torch.rand(4, 2))
    with pytest.raises(ValueError, match=r"FeatureCentering: argument 'features' must have shape"):
        FeatureCentering(3).update(torch.rand(3))
    with pytest.raises(ValueError, match="FeatureNormalization: argument 'eps' must be a finite"):
        FeatureNormalization(eps=-1.0)
    with pytest.raises(
        ValueError, match="FeatureNormalization: argument 'features' must be finite"
    ):
        FeatureNormalization()(torch.tensor([[float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="FeatureNormalization: argument 'features' must have at"):
        FeatureNormalization()(torch.tensor(1.0))
    with pytest.raises(
        TypeError, match="FeatureNormalization: argument 'features' must be a torch"
    ):
        FeatureNormalization()([1.0, 2.0])
