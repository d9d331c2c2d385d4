"""KernelRegressor, DI with continuous targets, and float targets in the data module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import references as ref
import torch
from sklearn.datasets import make_friedman1

from kernel_layers import (
    KernelClassifier,
    KernelRegressor,
    NystromLayer,
    RidgeHead,
    discriminant_information,
)
from kernel_layers.data.tensor import TensorDataModule
from kernel_layers.objectives import unit_norm_columns
from kernel_layers.training.heads import GCV_GRID, GCVRidgeHead, gcv_penalty

J = 40


def _data(
    rows: int = 900, targets: int = 1, offset: float = 0.0, **options: object
) -> TensorDataModule:
    x, y = make_friedman1(n_samples=rows, noise=0.5, random_state=0)
    if targets == 2:
        y = np.stack([y, np.sin(3 * x[:, 0]) * 10.0], 1)
    y = y + offset
    cut = rows * 2 // 3
    kwargs = {"batch_size": 200, "val_fraction": 0.0, **options}
    return TensorDataModule(x[:cut], y[:cut], x[cut:], y[cut:], float_targets=True, **kwargs)


def _model(targets: int = 1, **options: object) -> KernelRegressor:
    torch.manual_seed(0)
    return KernelRegressor(NystromLayer(10, J, gamma=1.0), num_targets=targets, **options)


def _gcv_reference(phi: np.ndarray, y: np.ndarray) -> float:
    """The penalty of ``GCV_GRID`` (times the centred scatter's mean eigenvalue) with the
    least explicit GCV error ``n RSS / (n - trace(hat))^2``, the intercept in the hat
    matrix (float64)."""
    n, j = phi.shape
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    scale = np.trace(pc.T @ pc) / j
    scores = []
    for rel in GCV_GRID:
        hat = pc @ np.linalg.solve(pc.T @ pc + rel * scale * np.eye(j), pc.T) + 1.0 / n
        residual = yc - (hat - 1.0 / n) @ yc
        scores.append(n * (residual**2).sum() / (n - np.trace(hat)) ** 2)
    return GCV_GRID[int(np.argmin(scores))] * scale


# ---------------------------------------------------------------- DI with a float target
def test_di_of_a_continuous_target_matches_the_float64_reference() -> None:
    g = torch.Generator().manual_seed(1)
    phi = torch.randn(60, 8, generator=g, dtype=torch.float64)
    y = (phi[:, :1] ** 2 + 0.3 * torch.randn(60, 1, generator=g, dtype=torch.float64)) * 50.0
    value = discriminant_information(phi, y, rho=0.1)
    expected = ref.di(phi.numpy(), y.numpy(), 0.1)
    assert value.item() == pytest.approx(expected, rel=1e-10)
    # the paper's identity: ||Y_c||^2 - DI is the minimum ridge error
    yc = y.numpy() - y.numpy().mean(0)
    residual = ref.ridge_residual(phi.numpy(), y.numpy(), 0.1)
    assert float((yc**2).sum()) - value.item() == pytest.approx(residual, rel=1e-8)


def test_unit_norm_columns_give_di_as_the_sum_of_in_batch_ridge_r2() -> None:
    g = torch.Generator().manual_seed(2)
    phi = torch.randn(50, 6, generator=g, dtype=torch.float64)
    y = torch.stack([phi[:, 0] * 1e4 + 3.0, torch.full((50,), 7.0, dtype=torch.float64)], 1)
    y = y + torch.randn(50, 2, generator=g, dtype=torch.float64) * torch.tensor([1e3, 0.0])
    scaled = unit_norm_columns(y)
    yc = y.numpy() - y.numpy().mean(0)
    norms = np.linalg.norm(yc, axis=0)
    expected = np.where(norms > 0, yc / np.where(norms > 0, norms, 1.0), 0.0)
    np.testing.assert_allclose(scaled.numpy(), expected, rtol=1e-12, atol=0)
    assert scaled[:, 1].abs().max().item() == 0.0  # a constant target carries nothing
    # DI = 1 - MRLSE / ||y_c||^2 for the one informative column: its ridge R^2
    value = discriminant_information(phi, scaled, rho=1e-3).item()
    r2 = 1.0 - ref.ridge_residual(phi.numpy(), y.numpy()[:, :1], 1e-3) / (norms[0] ** 2)
    assert value == pytest.approx(r2, rel=1e-8)
    assert 0.5 < value <= 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("value", "rows"), [(0.1, 3), (0.1, 1000), (123.456, 10), (0.7, 1000)])
def test_a_constant_column_whose_mean_is_inexact_becomes_zeros(
    value: float, rows: int, dtype: torch.dtype
) -> None:
    # the float64 mean of 0.1 repeated is not 0.1: the round-off left after centring was
    # scaled up to a unit-norm column of noise
    y = torch.stack([torch.full((rows,), value, dtype=dtype), torch.arange(rows, dtype=dtype)], 1)
    scaled = unit_norm_columns(y)
    assert scaled[:, 0].abs().max().item() == 0.0
    assert scaled[:, 1].norm().item() == pytest.approx(1.0, rel=1e-6)


# ---------------------------------------------------------------- the data module
def test_float_targets_are_served_unscaled_as_float32_columns() -> None:
    data = _data(300, targets=2)
    data.setup()
    y = data.train_targets()
    assert data.num_targets == 2 and data.num_classes == 0
    assert y.dtype == torch.float32 and y.shape == (200, 2)
    _, expected = make_friedman1(n_samples=300, noise=0.5, random_state=0)
    np.testing.assert_allclose(y[:, 0].numpy(), expected[:200].astype(np.float32))


@pytest.mark.parametrize(
    ("y_train", "error", "match"),
    [
        (np.array([1.0, np.nan, 2.0, 3.0]), ValueError, r"y_train.*NaN or Inf"),
        (np.array(["a", "b", "c", "d"]), TypeError, r"y_train.*real-valued targets"),
        (np.ones((4, 2, 1)), ValueError, r"y_train.*shape \[N\] or \[N, L\]"),
        (np.ones((4, 3)), ValueError, r"same number of targets, got 3 and 1"),
    ],
)
def test_bad_float_targets_are_named(y_train: np.ndarray, error: type, match: str) -> None:
    x = np.random.default_rng(0).random((4, 3))
    with pytest.raises(error, match=match):
        TensorDataModule(x, y_train, x, np.ones(4), float_targets=True)


# ---------------------------------------------------------------- the model
def test_trained_regressor_beats_the_untrained_map(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    data = _data()
    untrained = _model()
    baseline = make_trainer().test(untrained, data, verbose=False)[0]
    model = _model(lr=1e-2)
    trainer = make_trainer(max_epochs=6)
    trainer.fit(model, data)
    di_epoch = trainer.callback_metrics["train/di_epoch"].item()
    assert 0.0 < di_epoch <= 1.0  # the batches' ridge R^2 (one target)
    result = trainer.test(model, data, verbose=False)[0]
    assert set(result) == {"test/r2", "test/rmse"}
    assert result["test/r2"] > baseline["test/r2"] + 0.02
    assert result["test/rmse"] < baseline["test/rmse"]


@pytest.mark.parametrize("offset", [0.0, 1e5], ids=["centred", "offset"])
def test_metrics_agree_with_the_float64_reference(
    offset: float, make_trainer: Callable[..., L.Trainer]
) -> None:
    # Targets far from zero against their spread: float32 sums of squares would cancel.
    data = _data(targets=2, offset=offset)
    model = _model(targets=2)
    result = make_trainer().test(model, data, verbose=False)[0]
    data.setup()
    x, y = data.test_dataset.tensors  # type: ignore[union-attr]
    with torch.no_grad():
        prediction = model.predict(model(x)).double().numpy()
    truth = y.double().numpy()
    r2 = np.mean(1 - ((truth - prediction) ** 2).sum(0) / ((truth - truth.mean(0)) ** 2).sum(0))
    rmse = np.sqrt(((truth - prediction) ** 2).mean())
    assert result["test/r2"] == pytest.approx(r2, rel=1e-4)
    assert result["test/rmse"] == pytest.approx(rmse, rel=1e-4)


def test_a_test_split_of_one_row_is_named(make_trainer: Callable[..., L.Trainer]) -> None:
    x, y = make_friedman1(n_samples=301, noise=0.5, random_state=0)
    data = TensorDataModule(
        x[:300], y[:300], x[300:], y[300:], float_targets=True, batch_size=100, val_fraction=0.0
    )
    trainer = make_trainer(max_epochs=1)
    trainer.fit(_model(), data)
    with pytest.raises(ValueError, match=r"R² of the test rows needs at least 2 rows, got 1"):
        trainer.test(trainer.lightning_module, data, verbose=False)


def test_the_untrained_baseline_of_a_regressor_is_logged_as_r2(
    make_trainer: Callable[..., L.Trainer], caplog: pytest.LogCaptureFixture
) -> None:
    from kernel_layers.callbacks import UntrainedBaseline

    baseline = UntrainedBaseline()
    with caplog.at_level("INFO", logger="kernel_layers.callbacks"):
        make_trainer([baseline], max_epochs=1).fit(_model(), _data())
    assert baseline.accuracy is not None
    assert f"test/r2 of the untrained map (ridge read-out) {baseline.accuracy:.4f}" in caplog.text


def test_checkpoint_round_trip_predicts_identically(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    data = _data(targets=2)
    model = _model(targets=2, lr=1e-2)
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, data)
    path = tmp_path / "regressor.ckpt"
    trainer.save_checkpoint(path)
    loaded = KernelRegressor.load_from_checkpoint(path)
    assert isinstance(loaded, KernelRegressor)
    x = data.test_dataset.tensors[0]  # type: ignore[union-attr]
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(model.predict(model(x)), loaded.predict(loaded(x)))
    with pytest.raises(ValueError, match="weights_only"):
        KernelRegressor.load_from_checkpoint(path, weights_only=False)
    with pytest.raises(ValueError, match=r"is a KernelRegressor's .*KernelRegressor\.load_from"):
        KernelClassifier.load_from_checkpoint(path)
    saved = torch.load(path, weights_only=True)  # the same, as a classifier records it
    saved["hyper_parameters"]["num_classes"] = saved["hyper_parameters"].pop("num_targets")
    torch.save(saved, tmp_path / "classifier.ckpt")
    with pytest.raises(ValueError, match=r"is a KernelClassifier's \(it records 'num_classes'"):
        KernelRegressor.load_from_checkpoint(tmp_path / "classifier.ckpt")

    class MyRegressor(KernelRegressor):  # a user's subclass is checked alike
        pass

    with pytest.raises(ValueError, match=r"MyRegressor: checkpoint .* is a KernelClassifier's"):
        MyRegressor.load_from_checkpoint(tmp_path / "classifier.ckpt")


def test_integer_targets_are_refused(make_trainer: Callable[..., L.Trainer]) -> None:
    x = torch.rand(300, 10)
    labels = torch.randint(0, 3, (300,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, labels), batch_size=100)
    with pytest.raises(TypeError, match=r"'y' must be float targets .*got dtype torch.int64"):
        make_trainer(max_epochs=1).fit(_model(), loader)


def test_wrong_target_shape_and_nan_are_refused() -> None:
    model = _model()
    with pytest.raises(ValueError, match=r"'y' must be float targets of shape \[B, 1\]"):
        model.training_targets(torch.rand(8, 2))
    with pytest.raises(ValueError, match="'y' must be finite"):
        model.training_targets(torch.tensor([1.0, float("nan")]))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"targets": 0}, "num_targets"),
        ({"rho": 0.0}, "rho"),
        ({"check_every": "never"}, "check_every"),
    ],
)
def test_bad_arguments_are_named(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _model(**options)  # type: ignore[arg-type]


def test_ridge_head_refuses_float_targets_of_another_width() -> None:
    head = RidgeHead(4, 2)
    with pytest.raises(ValueError, match="targets"):
        head.update(torch.rand(8, 4), torch.rand(8, 3))


def test_gcv_penalty_is_the_argmin_of_the_explicit_gcv() -> None:
    g = torch.Generator().manual_seed(3)
    phi = torch.randn(80, 12, generator=g, dtype=torch.float64)
    y = phi[:, :2] @ torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    y = y + 2.0 * torch.randn(80, 1, generator=g, dtype=torch.float64)
    head = GCVRidgeHead(12, 1)
    head.update(phi, y)
    stats = head.statistics
    assert stats is not None
    chosen = gcv_penalty(stats)
    pc = phi.numpy() - phi.numpy().mean(0)
    yc = y.numpy() - y.numpy().mean(0)
    scale = np.trace(pc.T @ pc) / 12
    assert chosen == pytest.approx(_gcv_reference(phi.numpy(), y.numpy()), rel=1e-9)
    assert GCV_GRID[0] * scale < chosen  # noisy targets: more than the smallest penalty
    head.fit()
    assert head.penalty.item() == pytest.approx(chosen)
    weight = np.linalg.solve(pc.T @ pc + chosen * np.eye(12), pc.T @ yc)
    np.testing.assert_allclose(head.weight.numpy(), weight, rtol=1e-6)


@pytest.mark.parametrize(("rows", "width"), [(30, 29), (40, 100)], ids=["J=n-1", "J>n"])
def test_gcv_penalty_with_as_many_features_as_rows_is_the_explicit_argmin(
    rows: int, width: int
) -> None:
    # The fit interpolates at the smallest penalties: their residual is round-off, and
    # an explicit GCV is large there, not the smallest.
    g = torch.Generator().manual_seed(0)
    phi = torch.randn(rows, width, generator=g, dtype=torch.float64)
    y = phi[:, :1] + torch.randn(rows, 1, generator=g, dtype=torch.float64)
    head = GCVRidgeHead(width, 1)
    head.update(phi, y)
    assert head.statistics is not None
    chosen = gcv_penalty(head.statistics)
    assert chosen == pytest.approx(_gcv_reference(phi.numpy(), y.numpy()), rel=1e-9)


def test_keep_best_hands_back_the_best_validation_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    data = _data(val_fraction=0.25, batch_size=150)
    model = _model(lr=5e-2, keep_best="val/r2")
    keep = [c for c in model.configure_callbacks() if type(c).__name__ == "KeepBest"]
    assert len(keep) == 1 and keep[0].monitor == "val/r2"
    trainer = make_trainer(max_epochs=4)
    trainer.fit(model, data)
    best = next(c for c in trainer.callbacks if type(c).__name__ == "KeepBest")
    assert best.best_epoch is not None and best.best_state is not None
    for key, value in model.kernel_layer.state_dict().items():
        assert torch.equal(value.cpu(), best.best_state[f"kernel_layer.{key}"])
    with pytest.raises(ValueError, match="keep_best"):
        _model(keep_best="val/acc")


@pytest.mark.parametrize("targets", [1, 2])
def test_keep_best_hands_back_the_untrained_map_when_no_epoch_beats_it(
    make_trainer: Callable[..., L.Trainer], targets: int
) -> None:
    data = _data(targets=targets, val_fraction=0.25, batch_size=150)
    model = _model(targets, lr=50.0, keep_best="val/r2")  # a learning rate that wrecks the map
    trainer = make_trainer(max_epochs=3)
    trainer.fit(model, data)
    best = next(c for c in trainer.callbacks if type(c).__name__ == "KeepBest")
    assert best.best_epoch == -1
    assert torch.equal(
        model.kernel_layer.landmarks.cpu(), best.best_state["kernel_layer.landmarks"]
    )
    # the untrained map's score: a GCV ridge read-out on its training features, the R^2
    # of the validation rows in float64 (the read-out refits when validate starts)
    x_train, y_train = data.train_dataset.tensors  # type: ignore[union-attr]
    x_val, y_val = data.val_dataset.tensors  # type: ignore[union-attr]
    with torch.no_grad():
        phi, phi_val = model(x_train).double().numpy(), model(x_val).double().numpy()
    y = y_train.double().numpy().reshape(len(phi), -1)
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    weight = np.linalg.solve(pc.T @ pc + _gcv_reference(phi, y) * np.eye(J), pc.T @ yc)
    predicted = (phi_val - phi.mean(0)) @ weight + y.mean(0)
    truth = y_val.double().numpy().reshape(len(phi_val), -1)
    residual = ((truth - predicted) ** 2).sum(0) / ((truth - truth.mean(0)) ** 2).sum(0)
    expected = float(np.mean(1.0 - residual))  # R^2 averaged over the targets
    assert best.best_score == pytest.approx(expected, abs=1e-4)
    assert trainer.validate(model, data, verbose=False)[0]["val/r2"] == pytest.approx(
        best.best_score, abs=1e-5
    )
