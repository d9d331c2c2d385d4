"""Landmark selection: k-means (++), random subsets, the greedy innovation rule, from_data."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
import torch
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers.kernels import Kernel
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.landmarks import (
    greedy_landmarks,
    kmeans,
    kmeans_plus_plus,
    random_landmarks,
)


def _linear(x: torch.Tensor, z: torch.Tensor, gamma: float) -> torch.Tensor:
    return x @ z.T


#: A test-local linear kernel, passed as a Kernel object (no registry change).
LINEAR = Kernel("test_linear", _linear)


def _planted(seed: int = 0, per: int = 60, std: float = 0.05) -> tuple[torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.array([[0, 0, 0], [5, 0, 0], [0, 5, 0], [0, 0, 5], [5, 5, 5]], dtype=float)
    x = np.concatenate([c + std * rng.standard_normal((per, 3)) for c in centres])
    return torch.tensor(x[rng.permutation(len(x))]), centres


# --- k-means --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kmeans_recovers_planted_centres(dtype: torch.dtype) -> None:
    x, centres = _planted()
    found, labels = kmeans(x.to(dtype), 5, seed=0)
    assert found.dtype == dtype and labels.shape == (300,) and labels.dtype == torch.long
    dist = ((found.double().numpy()[:, None] - centres[None]) ** 2).sum(-1)
    match = dist.argmin(1)
    assert sorted(match.tolist()) == [0, 1, 2, 3, 4]  # a permutation of the true centres
    assert np.sqrt(dist.min(1)).max() < 0.03
    assert torch.bincount(labels).tolist() == [60] * 5


def test_kmeans_is_a_lloyd_fixed_point() -> None:
    x = torch.rand(400, 4, dtype=torch.float64)
    centres, labels = kmeans(x, 6, init="random", seed=1, tol=0.0)
    d = ref.gaussian(x.numpy(), centres.numpy(), 1.0)  # monotone in the distance
    np.testing.assert_array_equal(labels.numpy(), d.argmax(1))
    for c in range(6):
        torch.testing.assert_close(centres[c], x[labels == c].mean(0))


def test_kmeans_reseeds_empty_clusters() -> None:
    distinct = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [9.0, 9.0]])
    x = distinct.repeat_interleave(torch.tensor([50, 50, 50, 50, 2]), dim=0)
    for seed in range(5):  # random seeds collide on duplicates: clusters go empty
        centres, labels = kmeans(x, 5, init="random", seed=seed)
        assert {tuple(c.tolist()) for c in centres} == {tuple(c.tolist()) for c in distinct}
        assert (torch.bincount(labels, minlength=5) > 0).all()


def test_kmeans_chunked_assignment_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernel_layers.selection.landmarks as lm

    x = torch.rand(300, 3)
    want = kmeans(x, 7, seed=3)
    monkeypatch.setattr(lm, "MAX_BLOCK_ELEMENTS", 7 * 16)  # 16-row blocks
    got = kmeans(x, 7, seed=3)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


def test_kmeans_half_precision_and_seeding() -> None:
    x, _ = _planted()
    centres, _ = kmeans(x.half(), 5, seed=0)
    assert centres.dtype == torch.float16
    a = kmeans(x, 5, seed=4, init="random")[0]
    b = kmeans(x, 5, generator=torch.Generator().manual_seed(4), init="random")[0]
    torch.testing.assert_close(a, b)


# --- k-means++ and random ---------------------------------------------------------------


def test_kmeans_plus_plus_returns_distinct_rows() -> None:
    x = torch.rand(100, 5)
    index = kmeans_plus_plus(x, 40, seed=0)
    assert index.dtype == torch.long and len(set(index.tolist())) == 40
    torch.testing.assert_close(kmeans_plus_plus(x, 40, seed=0), index)


def test_kmeans_plus_plus_distinct_even_with_duplicates() -> None:
    x = torch.tensor([[0.0, 0.0], [1.0, 1.0]]).repeat(10, 1)  # 2 distinct rows, 20 rows
    index = kmeans_plus_plus(x, 5, seed=0)
    assert len(set(index.tolist())) == 5
    assert {tuple(r) for r in x[index[:2]].tolist()} == {(0.0, 0.0), (1.0, 1.0)}


def test_kmeans_plus_plus_spreads_over_clusters() -> None:
    x, centres = _planted(std=0.01)
    for seed in range(10):
        chosen = x[kmeans_plus_plus(x, 5, seed=seed)].numpy()
        nearest = ((chosen[:, None] - centres[None]) ** 2).sum(-1).argmin(1)
        assert sorted(nearest.tolist()) == [0, 1, 2, 3, 4]  # D^2 sampling: one per cluster


def test_random_landmarks_distinct_and_reproducible() -> None:
    x = torch.rand(30, 2)
    index = random_landmarks(x, 30, seed=0)
    assert sorted(index.tolist()) == list(range(30))
    assert torch.equal(random_landmarks(x, 5, seed=1), random_landmarks(x, 5, seed=1))


# --- greedy innovation rule -------------------------------------------------------------


def _greedy_reference(x: np.ndarray, kernel, eta: float, relative: bool = False) -> list[int]:
    """The one-by-one rule with an explicit solve against the accepted set."""
    accepted: list[int] = []
    for i, row in enumerate(x):
        kxx = kernel(row[None], row[None])[0, 0]
        if accepted:
            z = x[accepted]
            kx = kernel(z, row[None])[:, 0]
            delta = kxx - kx @ np.linalg.solve(kernel(z, z), kx)
        else:
            delta = kxx
        if delta > (eta * kxx if relative else eta):
            accepted.append(i)
    return accepted


@pytest.mark.parametrize("relative", [False, True])
def test_greedy_matches_one_by_one_reference(relative: bool) -> None:
    x = torch.rand(60, 3, dtype=torch.float64)
    x = torch.cat([x[:20], x[5:10], x[20:]])  # duplicates in the stream

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return ref.gaussian(a, b, 2.0)

    want = _greedy_reference(x.numpy(), kernel, 0.05, relative)
    z, index = greedy_landmarks(
        x, gamma=2.0, eta=0.05, relative=relative, batch_size=7, return_indices=True
    )
    assert index.tolist() == want
    torch.testing.assert_close(z, x[want])
    assert 3 < len(want) < 60


def test_greedy_never_accepts_a_point_in_the_span_linear() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b, c = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    stream = torch.stack([a, a, 2 * a, b, a + b, -b, c, 3 * b - c, a, 0.5 * a - 2 * c, c, b])
    z, index = greedy_landmarks(stream, kernel=LINEAR, eta=1e-8, return_indices=True)
    assert index.tolist() == [0, 3, 6]
    torch.testing.assert_close(z, torch.stack([a, b, c]))
    # relative rule, float32 data: the same decisions
    z32 = greedy_landmarks(stream.float(), kernel=LINEAR, eta=1e-6, relative=True)
    assert z32.shape == (3, 6) and z32.dtype == torch.float32


def test_greedy_never_accepts_a_duplicate_gaussian() -> None:
    x = torch.rand(40, 4)
    stream = torch.cat([x, x[torch.randperm(40)], x[:3]])
    _, index = greedy_landmarks(stream, gamma=1.0, eta=1e-7, batch_size=16, return_indices=True)
    assert index.max() < 40  # no copy is ever accepted
    assert len(index) == len(set(index.tolist()))


def test_greedy_streaming_equals_tensor() -> None:
    x = torch.rand(100, 3)
    y = torch.randint(0, 3, (100,))
    want, want_index = greedy_landmarks(x, gamma=3.0, eta=0.01, return_indices=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=13, shuffle=False)
    got, got_index = greedy_landmarks(loader, gamma=3.0, eta=0.01, return_indices=True)
    torch.testing.assert_close(got, want)
    assert torch.equal(got_index, want_index)
    plain = greedy_landmarks(list(x.split(9)), gamma=3.0, eta=0.01)  # batches of bare x
    torch.testing.assert_close(plain, want)


def test_greedy_max_landmarks_and_empty_result() -> None:
    x = torch.rand(200, 3)
    z, index = greedy_landmarks(x, gamma=3.0, eta=1e-4, max_landmarks=10, return_indices=True)
    assert z.shape == (10, 3)
    full = greedy_landmarks(x, gamma=3.0, eta=1e-4, return_indices=True)[1]
    assert index.tolist() == full[:10].tolist()
    none = greedy_landmarks(x, gamma=3.0, eta=2.0)  # k(x, x) = 1 < eta: nothing accepted
    assert none.shape == (0, 3) and none.dtype == x.dtype


def test_greedy_conditioning_bounded_by_eta() -> None:
    x = torch.rand(300, 2, dtype=torch.float64)
    z = greedy_landmarks(x, gamma=1.0, eta=1e-3)
    chol = torch.linalg.cholesky(ref_gram(z, 1.0))
    assert chol.diagonal().min() ** 2 > 1e-3 * (1 - 1e-9)


def ref_gram(z: torch.Tensor, gamma: float) -> torch.Tensor:
    return torch.from_numpy(ref.gaussian(z.numpy(), z.numpy(), gamma))


# --- NystromLayer.from_data -------------------------------------------------------------


@pytest.mark.parametrize("init", ["random", "kmeans++", "greedy"])
def test_from_data_selects_rows(init: str) -> None:
    x = torch.rand(80, 3)
    layer = NystromLayer.from_data(x, 12, init=init, gamma=2.0, seed=0)
    rows = {tuple(r) for r in x.tolist()}
    chosen = [tuple(r) for r in layer.landmarks.tolist()]
    assert len(set(chosen)) == len(chosen) == layer.out_features <= 12
    assert set(chosen) <= rows
    assert layer(x[:5]).shape == (5, layer.out_features)


def test_from_data_kmeans_centres() -> None:
    x, _ = _planted()
    layer = NystromLayer.from_data(x.float(), 5, init="kmeans", seed=0, trainable=False)
    want, _ = kmeans(x.float(), 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(layer.landmarks, want)
    assert not layer.landmarks.requires_grad


def test_from_data_greedy_fewer_landmarks() -> None:
    x = torch.rand(200, 2)
    layer = NystromLayer.from_data(x, 150, init="greedy", eta=0.05, gamma=1.0, seed=0)
    assert 1 <= layer.out_features < 150
    assert layer.landmarks.shape == (layer.out_features, 2)
    capped = NystromLayer.from_data(x, 3, init="greedy", eta=1e-6, gamma=1.0, seed=0)
    assert capped.out_features == 3


def test_from_data_greedy_uses_the_layer_kernel() -> None:
    gen = torch.Generator().manual_seed(0)
    basis = torch.randn(2, 5, generator=gen)
    x = torch.randn(40, 2, generator=gen) @ basis  # rank-2 data
    layer = NystromLayer.from_data(x, 10, init="greedy", eta=1e-4, kernel=LINEAR, seed=0)
    assert layer.out_features == 2


def test_from_data_random_is_unchanged() -> None:
    x = torch.rand(50, 3)
    layer = NystromLayer.from_data(x, 7, seed=3)
    index = torch.randperm(50, generator=torch.Generator().manual_seed(3))[:7]
    torch.testing.assert_close(layer.landmarks.detach(), x[index])


# --- errors -------------------------------------------------------------------------------


KM = "kmeans: argument "
GL = "greedy_landmarks: argument "
FD = "NystromLayer.from_data: argument "
INITS = r"\['random', 'kmeans', 'kmeans\+\+', 'greedy'\]"


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda x: kmeans(x, 21),
            ValueError,
            KM + r"'k' must be <= the number of rows of x \(20\)",
        ),
        (lambda x: kmeans(x, 0), ValueError, KM + "'k' must be an integer >= 1, got 0"),
        (
            lambda x: kmeans(x, 2, init="pp"),
            ValueError,
            KM + r"'init' must be one of \['kmeans\+\+', 'random'\], got 'pp'",
        ),
        (
            lambda x: kmeans(x, 2, iters=0),
            ValueError,
            KM + "'iters' must be an integer >= 1, got 0",
        ),
        (lambda x: kmeans(x, 2, tol=-1.0), ValueError, KM + "'tol' must be a finite number >= 0"),
        (lambda x: kmeans(x, 2, tol="a"), TypeError, KM + "'tol' must be a number >= 0"),
        (lambda x: kmeans(x[0], 2), ValueError, KM + r"'x' must have shape \[N, D\]"),
        (
            lambda x: kmeans(x, 2, seed=1, generator=torch.Generator()),
            ValueError,
            "kmeans: arguments 'seed' and 'generator' are exclusive",
        ),
        (
            lambda x: kmeans_plus_plus(x, 2.0),
            TypeError,
            "kmeans_plus_plus: argument 'k' must be an integer >= 1",
        ),
        (
            lambda x: random_landmarks(x, 30),
            ValueError,
            r"random_landmarks: argument 'k' must be <= the number of rows of x \(20\), got 30",
        ),
        (
            lambda x: greedy_landmarks(x, eta=0.0),
            ValueError,
            GL + "'eta' must be a finite number > 0",
        ),
        (lambda x: greedy_landmarks(x, gamma=-1.0), ValueError, GL + "'gamma' must be a finite"),
        (
            lambda x: greedy_landmarks(x, kernel="rbf"),
            ValueError,
            GL + r"'kernel' must be one of \[.*'gaussian'.*\].*, got 'rbf'",
        ),
        (
            lambda x: greedy_landmarks(x, max_landmarks=0),
            ValueError,
            GL + "'max_landmarks' must be an integer >= 1",
        ),
        (
            lambda x: greedy_landmarks(x, batch_size=0),
            ValueError,
            GL + "'batch_size' must be an integer >= 1",
        ),
        (
            lambda x: greedy_landmarks(3),
            TypeError,
            GL + "'data' must be a torch.Tensor or an iterable of batches, got int",
        ),
        (lambda x: greedy_landmarks([]), ValueError, GL + "'data' must hold at least one row"),
        (
            lambda x: greedy_landmarks([x, x[:, :2]]),
            ValueError,
            GL + r"'data' must have last dimension 3, got shape \[20, 2\]",
        ),
        (lambda x: greedy_landmarks([x.long()]), TypeError, GL + "'data' must be a floating-point"),
        (
            lambda x: NystromLayer.from_data(x, 3, init="kmeans", eta=0.1),
            ValueError,
            FD + "'eta' must be None unless init='greedy', got eta=0.1 with init='kmeans'",
        ),
        (
            lambda x: NystromLayer.from_data(x, 3, init="greedy", eta=-1.0),
            ValueError,
            FD + "'eta' must be a finite number > 0",
        ),
        (
            lambda x: NystromLayer.from_data(x, 3, init="greedy", eta=2.0),
            ValueError,
            FD + r"'eta' must be below the largest k\(x, x\) so that the greedy rule accepts",
        ),
        (
            lambda x: NystromLayer.from_data(x, 3, init="greedy", gamma=0.0),
            ValueError,
            FD + "'gamma' must be a finite number > 0",
        ),
        (
            lambda x: NystromLayer.from_data(x, 3, init="greedy", kernel="rbf"),
            ValueError,
            FD + r"'kernel' must be one of \[",
        ),
        (
            lambda x: NystromLayer.from_data(x, 3, init="k-means"),
            ValueError,
            FD + "'init' must be one of " + INITS + ", got 'k-means'",
        ),
    ],
)
def test_errors(call, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call(torch.rand(20, 3))
