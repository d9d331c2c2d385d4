"""Property tests (hypothesis) of the DI invariants stated in the design's maths section."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_layers import NystromLayer, discriminant_information, nystrom_discriminant_information

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batches(draw: st.DrawFn, *, min_rows: int = 8) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Well-scaled float64 features ``[B, J]`` and labels with every class present."""
    classes = draw(st.integers(2, 5))
    width = draw(st.integers(1, 12))
    rows = draw(st.integers(max(min_rows, classes), 40))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    labels = torch.cat(
        [torch.arange(classes), torch.randint(0, classes, (rows - classes,), generator=gen)]
    )
    return features, labels, classes


def _di(features: torch.Tensor, labels: torch.Tensor, classes: int, rho: float = 1e-4) -> float:
    return float(discriminant_information(features, labels, rho=rho, num_classes=classes))


@SETTINGS
@given(batches(), st.floats(1e-8, 1e3))
def test_di_lies_between_zero_and_l_minus_one(batch, rho: float) -> None:
    features, labels, classes = batch
    value = _di(features, labels, classes, rho)
    assert -1e-9 <= value <= classes - 1 + 1e-9


@SETTINGS
@given(batches(), st.randoms(use_true_random=False))
def test_di_is_invariant_to_row_permutation(batch, rng) -> None:
    features, labels, classes = batch
    order = torch.tensor(rng.sample(range(len(labels)), len(labels)))
    np.testing.assert_allclose(
        _di(features[order], labels[order], classes), _di(features, labels, classes), rtol=1e-9
    )


@SETTINGS
@given(batches(), st.integers(0, 2**31 - 1))
def test_di_is_invariant_to_an_orthogonal_rotation_of_the_features(batch, seed: int) -> None:
    features, labels, classes = batch
    gen = torch.Generator().manual_seed(seed)
    width = features.shape[1]
    rotation, _ = torch.linalg.qr(torch.randn(width, width, generator=gen, dtype=torch.float64))
    np.testing.assert_allclose(
        _di(features @ rotation, labels, classes), _di(features, labels, classes), rtol=1e-8
    )


@SETTINGS
@given(batches(), st.floats(1e-6, 1e2), st.floats(1.01, 100.0))
def test_di_decreases_as_rho_grows(batch, rho: float, factor: float) -> None:
    features, labels, classes = batch
    assert (
        _di(features, labels, classes, rho * factor) <= _di(features, labels, classes, rho) + 1e-12
    )


@SETTINGS
@given(batches(min_rows=20))
def test_float32_agrees_with_float64_on_well_conditioned_features(batch) -> None:
    features, labels, classes = batch
    features = features[:, : max(1, min(features.shape[1], len(labels) // 4))]  # B >> J
    reference = _di(features, labels, classes)
    single = _di(features.float(), labels, classes)
    assert abs(single - reference) <= 1e-4 * max(1.0, reference)


@SETTINGS
@given(
    st.integers(2, 4),
    st.integers(10, 30),
    st.integers(1, 6),
    st.floats(0.05, 2.0),
    st.integers(0, 2**31 - 1),
)
def test_nysdi_equals_di_of_the_explicit_nystrom_features(
    classes: int, rows: int, landmarks: int, gamma: float, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, 3, generator=gen, dtype=torch.float64)
    labels = torch.cat(
        [torch.arange(classes), torch.randint(0, classes, (rows - classes,), generator=gen)]
    )
    layer = NystromLayer(3, landmarks, gamma=gamma, dtype=torch.float64, seed=seed % 1000)
    with torch.no_grad():
        explicit = discriminant_information(layer(x), labels, num_classes=classes)
        nys = nystrom_discriminant_information(
            x, labels, layer.landmarks, gamma=gamma, jitter=layer.jitter, num_classes=classes
        )
    np.testing.assert_allclose(float(nys), float(explicit), rtol=1e-6, atol=1e-9)
