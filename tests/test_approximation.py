"""KernelApproximationError against float64 NumPy references: exact values, the
Nystrom exactness on its landmarks, random Fourier features converging in J, batching
invariance, the maps' own kernels (bandwidths included), DDP and bad arguments."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from references import gaussian, laplacian

from kernel_layers import (
    EnsembleNystrom,
    FastfoodLayer,
    FourierLayer,
    KernelApproximationError,
    KernelFeatureMap,
    NystromLayer,
)


def _rows(n: int = 40, d: int = 5, seed: int = 0, dtype: torch.dtype = torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=torch.float64).to(dtype)


def _reference(k: np.ndarray, phi: np.ndarray) -> dict[str, float]:
    """``||K - Phi Phi^T|| / ||K||`` in both norms, NumPy float64."""
    diff = k - phi @ phi.T
    return {
        "fro": float(np.linalg.norm(diff, "fro") / np.linalg.norm(k, "fro")),
        "spectral": float(np.linalg.norm(diff, 2) / np.linalg.norm(k, 2)),
    }


def _measure(layer, x, **kwargs) -> dict[str, float]:
    metric = KernelApproximationError(layer, norm="both", **kwargs)
    metric.update(x)
    return {k: float(v) for k, v in metric.compute().items()}


def _features(layer, x) -> np.ndarray:
    with torch.no_grad():
        return layer(x).double().numpy()


# ------------------------------------------------------------------ exact values
@pytest.mark.parametrize("norm", ["fro", "spectral"])
def test_nystrom_on_all_rows_is_exact(norm: str) -> None:
    x = _rows()
    layer = NystromLayer(5, 40, gamma=0.7, landmarks=x, dtype=torch.float64)
    metric = KernelApproximationError(layer, max_rows=40, norm=norm)
    metric.update(x)
    value = metric.compute()
    assert isinstance(value, torch.Tensor) and value.dtype == torch.float64
    assert 0 <= float(value) < 1e-8


def test_rank_k_nystrom_on_all_rows_is_the_best_rank_k_error() -> None:
    """Landmarks = rows, rank k: Phi Phi^T = K_k, so the errors are the eigenvalue tails."""
    x = _rows()
    layer = NystromLayer(5, 40, gamma=0.7, landmarks=x, rank=6, dtype=torch.float64)
    got = _measure(layer, x)
    s = np.sort(np.abs(np.linalg.eigvalsh(gaussian(x.numpy(), x.numpy(), 0.7))))[::-1]
    assert got["fro"] == pytest.approx(np.sqrt((s[6:] ** 2).sum() / (s**2).sum()), rel=1e-6)
    assert got["spectral"] == pytest.approx(s[6] / s[0], rel=1e-6)


def test_nystrom_with_learned_bandwidths_measures_the_scaled_kernel() -> None:
    x = _rows()
    layer = NystromLayer(5, 40, gamma=0.7, landmarks=x, ard=True, dtype=torch.float64)
    with torch.no_grad():
        layer.log_bandwidth.copy_(torch.tensor([0.5, -0.3, 0.0, 0.2, -1.0]))
    sigma = layer.bandwidth.detach().numpy()
    k = layer.exact_kernel(x, x).detach().numpy()
    np.testing.assert_allclose(k, gaussian(x.numpy() * sigma, x.numpy() * sigma, 0.7), rtol=1e-12)
    assert _measure(layer, x)["fro"] < 1e-8  # exact on its landmarks, with its bandwidths


@pytest.mark.parametrize(
    ("make", "reference"),
    [
        (lambda: NystromLayer(5, 12, gamma=0.7, seed=1, dtype=torch.float64), gaussian),
        (
            lambda: NystromLayer(5, 12, kernel="laplacian", gamma=0.4, seed=1),
            laplacian,
        ),
        (lambda: FourierLayer(5, 64, gamma=0.7, seed=1), gaussian),
        (lambda: FourierLayer(5, 64, gamma=0.7, seed=1, features="cossin"), gaussian),
        (lambda: FourierLayer(5, 64, kernel="laplacian", gamma=0.4, seed=1), laplacian),
        (lambda: FastfoodLayer(5, 64, gamma=0.7, seed=1), gaussian),
        (lambda: EnsembleNystrom(5, 12, num_maps=3, gamma=0.7, seed=1), gaussian),
    ],
    ids=[
        "nystrom",
        "nystrom-laplacian",
        "fourier",
        "cossin",
        "fourier-laplacian",
        "fastfood",
        "ensemble",
    ],
)
def test_errors_equal_the_numpy_reference(make, reference) -> None:
    layer = make()
    dtype = next(layer.parameters()).dtype
    x = _rows(dtype=dtype)
    gamma = layer.gamma
    want = _reference(reference(x.double().numpy(), x.double().numpy(), gamma), _features(layer, x))
    got = _measure(layer, x)
    assert got["fro"] == pytest.approx(want["fro"], rel=1e-9)
    assert got["spectral"] == pytest.approx(want["spectral"], rel=1e-9)


def test_random_fourier_error_decreases_in_j_on_average() -> None:
    x = _rows(60)
    means = []
    for j in (10, 100, 1000):
        errors = [_measure(FourierLayer(5, j, gamma=0.7, seed=s), x.float()) for s in range(5)]
        means.append([np.mean([e[n] for e in errors]) for n in ("fro", "spectral")])
    fro, spectral = np.array(means).T
    assert fro[0] > fro[1] > fro[2] and spectral[0] > spectral[1] > spectral[2]
    assert fro[2] < 0.1  # ~ 1 / sqrt(J)


def test_fourier_with_learned_bandwidths_measures_the_scaled_kernel() -> None:
    layer = FourierLayer(5, 20000, gamma=0.7, ard=True, seed=0, dtype=torch.float64)
    with torch.no_grad():
        layer.log_bandwidth.add_(torch.tensor([0.5, -0.3, 0.0, 0.2, -1.0], dtype=torch.float64))
    x = _rows(30)
    ratio = layer.bandwidth.detach().numpy() / np.sqrt(2 * 0.7)  # sigma / scale(gamma)
    want = gaussian(x.numpy() * ratio, x.numpy() * ratio, 0.7)
    np.testing.assert_allclose(layer.exact_kernel(x, x).detach().numpy(), want, rtol=1e-12)
    assert _measure(layer, x)["fro"] < 0.02  # the features estimate that kernel


def test_separable_fourier_measures_the_weighted_sum_of_block_kernels() -> None:
    layer = FourierLayer(
        5,
        20001,
        gamma=0.7,
        ard=True,
        blocks=[2, 3],
        separable=True,
        seed=0,
        dtype=torch.float64,
    )
    with torch.no_grad():
        layer.log_bandwidth.add_(torch.tensor([0.4, -0.6], dtype=torch.float64))
    x = _rows(30).numpy()
    ratio = layer.input_bandwidth.detach().numpy() / np.sqrt(2 * 0.7)
    a, b = x[:, :2] * ratio[:2], x[:, 2:] * ratio[2:]
    want = (10001 * gaussian(a, a, 0.7) + 10000 * gaussian(b, b, 0.7)) / 20001
    got = layer.exact_kernel(torch.from_numpy(x), torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert _measure(layer, torch.from_numpy(x))["fro"] < 0.02


def test_trained_maps_are_measured_against_the_kernel_they_were_drawn_for() -> None:
    x = _rows(30, dtype=torch.float32)
    layer = FastfoodLayer(5, 256, gamma=0.7, seed=0)
    before = _measure(layer, x)["fro"]
    with torch.no_grad():
        layer.gaussian.mul_(3.0)  # a "trained" map: the kernel stays exp(-0.7 ||x - z||^2)
    want = _reference(gaussian(x.double().numpy(), x.double().numpy(), 0.7), _features(layer, x))
    after = _measure(layer, x)["fro"]
    assert after == pytest.approx(want["fro"], rel=1e-9) and after > before


# ------------------------------------------------------------------ rows kept
def test_batching_does_not_change_the_result() -> None:
    x = _rows(50, dtype=torch.float32)
    layer = FourierLayer(5, 64, gamma=0.7, seed=0)
    one = KernelApproximationError(layer, max_rows=33, norm="both")
    one.update(x)
    many = KernelApproximationError(layer, max_rows=33, norm="both")
    for part in x.split([7, 1, 0, 20, 9, 13]):
        many.update(part)
    first = KernelApproximationError(layer, max_rows=100, norm="both")
    first.update(x[:33])
    for name in ("fro", "spectral"):
        assert float(one.compute()[name]) == float(many.compute()[name])
        assert float(one.compute()[name]) == float(first.compute()[name])
    assert many.kept == 33 and many.full


def test_reset_forgets_the_rows_and_the_map_is_not_state() -> None:
    layer = NystromLayer(5, 8, seed=0)
    metric = KernelApproximationError(layer, max_rows=10)
    metric.update(_rows(12, dtype=torch.float32))
    assert metric.full
    metric.reset()
    assert metric.kept == 0 and not metric.full
    assert metric.state_dict() == {}
    holder = torch.nn.Module()
    holder.metric = metric
    assert list(holder.state_dict()) == []  # the map's landmarks are not the metric's


def test_features_and_kernel_callables() -> None:
    x = _rows(20)
    w = torch.randn(5, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def features(rows: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.cos(rows @ w), torch.sin(rows @ w)], 1) / np.sqrt(300)

    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp(-0.5 * torch.cdist(a, b) ** 2)

    metric = KernelApproximationError(features=features, kernel=kernel, norm="both")
    metric.update(x)
    want = _reference(gaussian(x.numpy(), x.numpy(), 0.5), features(x).numpy())
    got = metric.compute()
    assert float(got["fro"]) == pytest.approx(want["fro"], rel=1e-9)
    assert float(got["spectral"]) == pytest.approx(want["spectral"], rel=1e-9)


def test_runs_on_the_maps_device(device: torch.device) -> None:
    x = _rows(30, dtype=torch.float32)
    cpu_layer = FourierLayer(5, 64, gamma=0.7, seed=0)
    want = _measure(cpu_layer, x)
    layer = FourierLayer(5, 64, gamma=0.7, seed=0, device=device)
    metric = KernelApproximationError(layer, norm="both").to(device)
    metric.update(x.to(device))
    got = metric.compute()
    assert got["fro"].device.type == device.type
    assert float(got["fro"]) == pytest.approx(want["fro"], rel=1e-5)
    assert float(got["spectral"]) == pytest.approx(want["spectral"], rel=1e-5)


# ------------------------------------------------------------------ DDP
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        x = _rows(40, dtype=torch.float32)
        metric = KernelApproximationError(FourierLayer(5, 64, gamma=0.7, seed=0), max_rows=30)
        for part in x[rank * 20 : (rank + 1) * 20].split(6):
            metric.update(part)
        torch.save(metric.compute(), Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ddp_uses_the_first_rows_of_the_ranks_in_order(tmp_path: Path) -> None:
    mp.spawn(_ddp_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    x = _rows(40, dtype=torch.float32)
    single = KernelApproximationError(FourierLayer(5, 64, gamma=0.7, seed=0), max_rows=30)
    single.update(x[:30])  # rank 0's 20 rows, then rank 1's first 10
    want = float(single.compute())
    for rank in range(2):
        assert float(torch.load(tmp_path / f"rank{rank}.pt")) == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ bad arguments
class _NoKernelMap(KernelFeatureMap):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def get_config(self) -> dict[str, object]:
        return self.base_config()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "exactly one of arguments 'feature_map' and 'features'.*neither"),
        (
            {"feature_map": "map", "features": abs, "kernel": abs},
            ValueError,
            "exactly one.*got both",
        ),
        ({"feature_map": torch.nn.Linear(2, 2)}, TypeError, "'feature_map' must be a Kernel"),
        ({"features": abs}, ValueError, "argument 'kernel' must be given with 'features'"),
        ({"features": 3, "kernel": abs}, TypeError, "argument 'features' must be callable"),
        ({"features": abs, "kernel": "rbf"}, TypeError, "argument 'kernel' must be callable"),
        ({"features": abs, "kernel": abs, "max_rows": 0}, ValueError, "'max_rows'"),
        ({"features": abs, "kernel": abs, "max_rows": 2.5}, TypeError, "'max_rows'"),
        ({"features": abs, "kernel": abs, "norm": "l1"}, ValueError, "'norm'.*l1"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        KernelApproximationError(**kwargs)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (torch.rand(4, 3), ValueError, r"argument 'x' must have last dimension 5"),
        (torch.rand(5), ValueError, r"argument 'x' must have shape \[N, 5\]"),
        (torch.full((2, 5), float("nan")), ValueError, "argument 'x' must be finite"),
        (torch.ones(2, 5, dtype=torch.long), TypeError, "floating-point"),
        (torch.rand(2, 5, dtype=torch.float64), TypeError, "dtype of the earlier rows"),
    ],
)
def test_bad_rows(x, error, match) -> None:
    metric = KernelApproximationError(NystromLayer(5, 4, seed=0))
    metric.update(torch.rand(2, 5))
    with pytest.raises(error, match=match):
        metric.update(x)


def test_compute_without_rows_zero_kernel_and_unknown_kernel() -> None:
    metric = KernelApproximationError(NystromLayer(5, 4, seed=0))
    with (
        pytest.warns(UserWarning, match="before the ``update``"),
        pytest.raises(ValueError, match=r"compute\(\) needs rows: call update"),
    ):
        metric.compute()
    linear = KernelApproximationError(NystromLayer(5, 4, kernel="linear", seed=0))
    linear.update(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="kernel matrix of the kept rows must be non-zero"):
        linear.compute()
    unknown = KernelApproximationError(_NoKernelMap(5, 5))
    unknown.update(torch.rand(3, 5))
    with pytest.raises(NotImplementedError, match="_NoKernelMap does not state the kernel"):
        unknown.compute()
    wrong = KernelApproximationError(features=lambda r: r, kernel=lambda a, b: a)
    wrong.update(torch.rand(3, 2))
    with pytest.raises(ValueError, match=r"\[m, m\] matrix.*got shapes \[3, 2\]"):
        wrong.compute()


def test_fourier_ard_on_log_inputs_is_refused() -> None:
    layer = FourierLayer(3, 8, kernel="skewed_chi2", ard=True, seed=0)
    with pytest.raises(ValueError, match="exact_kernel needs a kernel on the inputs"):
        layer.exact_kernel(torch.rand(2, 3), torch.rand(2, 3))
