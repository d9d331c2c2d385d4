"""DI's ridge parameter chosen when a fit starts (``rho=None``): from the batches per
epoch (``KernelClassifier``), or the read-out's penalty shared out over them
(``KernelRegressor``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateFinder
from sklearn.datasets import make_classification, make_regression

from kernel_layers.data import TensorDataModule
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.objectives import discriminant_information
from kernel_layers.selection.rho import rho_for_epoch, rho_from_penalty
from kernel_layers.training.checkpoint_hooks import CHOSEN_RHO_KEY
from kernel_layers.training.heads import GCV_GRID
from kernel_layers.training.module import KernelClassifier
from kernel_layers.training.regression import KernelRegressor


@pytest.mark.parametrize(
    ("batches", "rho"),
    [(1, 0.1), (7, 0.1), (7.5, 0.1), (8, 1e-4), (100, 1e-4), (float("inf"), 1e-4)],
)
def test_rho_for_epoch(batches: float, rho: float) -> None:
    assert rho_for_epoch(batches) == rho


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (0.5, ValueError), (-3, ValueError), (float("nan"), ValueError),
     (True, TypeError), ("8", TypeError), (None, TypeError)],
)  # fmt: skip
def test_rho_for_epoch_refuses_what_is_not_a_batch_count(bad: object, error: type) -> None:
    match = r"rho_for_epoch: argument 'batches' must be a number >= 1 \(or inf\), got "
    with pytest.raises(error, match=match + re.escape(repr(bad))):
        rho_for_epoch(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("penalty", "batches", "rho"),
    [(0.6, 3, 0.2), (5.0, 1, 5.0), (2e-4, 2, 1e-4), (1e-9, 1, 1e-4), (0.0, 7.5, 1e-4)],
)
def test_rho_from_penalty_shares_it_out_over_the_batches(
    penalty: float, batches: float, rho: float
) -> None:
    assert rho_from_penalty(penalty, batches) == pytest.approx(rho, rel=1e-15)
    # NumPy numbers, as a grid hands them, are numbers too
    assert rho_from_penalty(np.float64(penalty), np.float64(batches)) == pytest.approx(rho)
    assert rho_for_epoch(np.int64(3)) == rho_for_epoch(3)


@pytest.mark.parametrize(
    ("penalty", "batches", "match"),
    [
        (-1.0, 1, r"argument 'penalty' must be a finite number >= 0, got -1.0"),
        (float("nan"), 1, r"argument 'penalty' must be a finite number >= 0, got nan"),
        (float("inf"), 10, r"argument 'penalty' must be a finite number >= 0, got inf"),
        (1.0, 0, r"argument 'batches' must be a number >= 1 \(or inf\), got 0"),
    ],
)
def test_rho_from_penalty_refuses_what_is_not_a_penalty_or_a_batch_count(
    penalty: float, batches: float, match: str
) -> None:
    with pytest.raises(ValueError, match=r"rho_from_penalty: " + match):
        rho_from_penalty(penalty, batches)


@pytest.mark.parametrize(
    ("penalty", "batches", "match"),
    [
        ("x", 3, r"argument 'penalty' must be a number >= 0, got 'x'"),
        (1.0, True, r"argument 'batches' must be a number >= 1 \(or inf\), got True"),
        (1.0, "3", r"argument 'batches' must be a number >= 1 \(or inf\), got '3'"),
    ],
)
def test_rho_from_penalty_refuses_what_is_not_a_number_as_a_type_error(
    penalty: object, batches: object, match: str
) -> None:
    with pytest.raises(TypeError, match=r"rho_from_penalty: " + match):
        rho_from_penalty(penalty, batches)


def _data(rows: int, batch: int) -> TensorDataModule:
    x, y = make_classification(n_samples=rows + 100, n_features=6, n_informative=4,
                               n_redundant=0, n_classes=3, random_state=0)  # fmt: skip
    return TensorDataModule(x[:rows], y[:rows], x[rows:], y[rows:], batch_size=batch)


@pytest.mark.parametrize(("rows", "batch", "rho"), [(300, 100, 0.1), (900, 100, 1e-4)])
def test_the_classifier_chooses_rho_from_its_epoch_and_trains_with_it(
    make_trainer: Callable[..., L.Trainer], rows: int, batch: int, rho: float
) -> None:
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3)
    assert model.rho == 1e-4  # the paper's until a fit chooses
    make_trainer(max_epochs=1).fit(model, _data(rows, batch))
    assert model.rho == rho and model.hparams["rho"] is None
    x, y = torch.rand(60, 6, dtype=torch.float64), torch.arange(60) % 3
    model.double()
    expected = discriminant_information(model.kernel_layer(x), y, rho=rho, num_classes=3)
    torch.testing.assert_close(model._di(x, y), expected, rtol=1e-12, atol=0)


def test_a_given_rho_is_kept(make_trainer: Callable[..., L.Trainer]) -> None:
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3, rho=0.5)
    make_trainer(max_epochs=1).fit(model, _data(300, 100))
    assert model.rho == 0.5


def test_a_bad_rho_is_named() -> None:
    with pytest.raises(ValueError, match=r"KernelClassifier: argument 'rho'"):
        KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3, rho=-1.0)


def _regression(rows: int, batch: int) -> TensorDataModule:
    x, y = make_regression(n_samples=rows + 100, n_features=6, noise=20.0, random_state=0)
    return TensorDataModule(
        x[:rows], y[:rows], x[rows:], y[rows:], batch_size=batch, float_targets=True
    )


class _UntrainedFeatures(L.Callback):
    """The map's features of the training rows when the first epoch starts (float64)."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0:
            x, y = trainer.datamodule.train_dataset.tensors[:2]  # type: ignore[attr-defined]
            with torch.no_grad():
                self.features = pl_module(x).double().numpy()
            self.targets = y.double().numpy().reshape(len(y), -1)


def _gcv_reference(features: np.ndarray, targets: np.ndarray) -> float:
    """Float64 reference: the penalty ``g trace(S) / J`` (``g`` in ``GCV_GRID``) whose
    ridge fit with intercept has the least ``n RSS / (n - trace(H))^2``, ``H`` its hat
    matrix written out."""
    n, j = features.shape
    centred = features - features.mean(0)
    residual_of = targets - targets.mean(0)
    scale = np.trace(centred.T @ centred) / j
    scores = []
    for g in GCV_GRID:
        gram = centred.T @ centred + g * scale * np.eye(j)
        hat = centred @ np.linalg.solve(gram, centred.T) + 1.0 / n
        rss = float(((residual_of - (hat - 1.0 / n) @ residual_of) ** 2).sum())
        scores.append(n * rss / (n - np.trace(hat)) ** 2)
    return float(GCV_GRID[int(np.argmin(scores))] * scale)


@pytest.mark.parametrize(("rows", "batch"), [(300, 90), (300, 270)])
def test_the_regressor_trains_with_the_read_outs_penalty_over_its_batches(
    make_trainer: Callable[..., L.Trainer], rows: int, batch: int
) -> None:
    model = KernelRegressor(FourierLayer(6, 20, seed=0))
    untrained = _UntrainedFeatures()
    trainer = make_trainer(callbacks=[untrained], max_epochs=1)
    trainer.fit(model, _regression(rows, batch))
    penalty = _gcv_reference(untrained.features, untrained.targets)
    assert trainer.num_training_batches == 270 // batch
    assert model.rho == pytest.approx(penalty / trainer.num_training_batches, rel=1e-9)
    assert model.hparams["rho"] is None
    with pytest.raises(ValueError, match=r"KernelRegressor: argument 'rho'"):
        KernelRegressor(FourierLayer(6, 20, seed=0), rho=0.0)


def test_a_regressor_whose_features_do_not_vary_gets_the_papers_rho(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """Constant inputs: every feature is constant, GCV's penalty is near zero (a
    multiple of the smallest float), and DI takes the paper's ``1e-4`` instead."""
    x = np.ones((400, 6))
    y = np.random.default_rng(0).normal(size=400)
    data = TensorDataModule(x[:300], y[:300], x[300:], y[300:], batch_size=90, float_targets=True)
    model = KernelRegressor(FourierLayer(6, 20, seed=0))
    make_trainer(max_epochs=1).fit(model, data)
    assert model.rho == 1e-4


def test_the_regressors_rho_is_chosen_once_and_kept_by_later_fits(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """A second fit of the same model keeps the first fit's ``rho``; a new model on the
    trained map's features would choose another."""
    model = KernelRegressor(FourierLayer(6, 20, seed=0), lr=5e-2)
    make_trainer(max_epochs=3).fit(model, _regression(300, 90))
    first = model.rho
    make_trainer(max_epochs=1).fit(model, _regression(300, 90))
    assert model.rho == first
    fresh = KernelRegressor(FourierLayer(6, 20, seed=0), lr=5e-2)
    fresh.load_state_dict(model.state_dict())  # the trained map, no rho chosen
    make_trainer(max_epochs=1).fit(fresh, _regression(300, 90))
    assert fresh.rho != first


def test_the_regressors_rho_survives_the_learning_rate_finder(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    """Lightning's ``LearningRateFinder`` trains a few steps, then restores a checkpoint
    saved before any ``rho`` was chosen: the fit then chooses as a plain fit does, and
    its read-out is refitted on its features."""
    plain = KernelRegressor(FourierLayer(6, 20, seed=0))
    make_trainer(max_epochs=1).fit(plain, _regression(300, 90))
    model = KernelRegressor(FourierLayer(6, 20, seed=0))
    finder = LearningRateFinder(num_training_steps=5)
    make_trainer(max_epochs=1, callbacks=[finder], default_root_dir=tmp_path).fit(
        model, _regression(300, 90)
    )
    assert model.rho == plain.rho


def test_a_checkpoint_without_a_chosen_rho_lets_the_resumed_fit_choose(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    given = KernelRegressor(FourierLayer(6, 20, seed=0), rho=0.5)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(given, _regression(300, 90))
    trainer.save_checkpoint(tmp_path / "given.ckpt")
    assert torch.load(tmp_path / "given.ckpt", weights_only=True)[CHOSEN_RHO_KEY] is None
    resumed = KernelRegressor(FourierLayer(6, 20, seed=0))
    make_trainer(max_epochs=2).fit(
        resumed, _regression(300, 90), ckpt_path=tmp_path / "given.ckpt", weights_only=True
    )
    assert resumed.rho > 1e-4  # chosen from the data, not the unchosen default


def test_the_regressor_shares_out_a_given_read_out_penalty(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    model = KernelRegressor(FourierLayer(6, 20, seed=0), head_rho=0.6)
    make_trainer(max_epochs=1).fit(model, _regression(300, 90))
    assert model.rho == pytest.approx(0.2, rel=1e-12)
    assert model.head.rho == 0.6


def test_a_resumed_regressor_keeps_its_checkpoints_rho(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    model = KernelRegressor(FourierLayer(6, 20, seed=0))
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, _regression(300, 90))
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    checkpoint = torch.load(tmp_path / "model.ckpt", weights_only=True)
    checkpoint[CHOSEN_RHO_KEY] = 0.125  # none the data would choose
    torch.save(checkpoint, tmp_path / "model.ckpt")
    resumed = KernelRegressor(FourierLayer(6, 20, seed=0))
    make_trainer(max_epochs=2).fit(
        resumed, _regression(300, 90), ckpt_path=tmp_path / "model.ckpt", weights_only=True
    )
    assert resumed.rho == 0.125


def _ridge(features: torch.Tensor, y: torch.Tensor, classes: int, rho: float) -> torch.Tensor:
    """Float64 reference: ``(Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y_c`` on one-hot targets."""
    phi = features.double() - features.double().mean(0)
    onehot = torch.nn.functional.one_hot(y, classes).double()
    gram = phi.T @ phi + rho * torch.eye(phi.shape[1], dtype=torch.float64)
    return torch.linalg.solve(gram, phi.T @ (onehot - onehot.mean(0)))


@pytest.mark.parametrize(("rows", "batch", "rho"), [(300, 100, 0.1), (900, 100, 1e-4)])
def test_the_read_out_penalty_is_dis_rho(
    make_trainer: Callable[..., L.Trainer], rows: int, batch: int, rho: float
) -> None:
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3)
    make_trainer(max_epochs=1).fit(model, _data(rows, batch))
    assert model.head.rho == model.rho == rho
    x, y = torch.rand(80, 6), torch.arange(80) % 3
    model.refit_head([(x, y)])
    with torch.no_grad():
        expected = _ridge(model(x), y, 3, rho)
    torch.testing.assert_close(model.head.weight.double(), expected, rtol=1e-4, atol=1e-6)


def test_a_given_rho_is_the_read_outs_from_the_start() -> None:
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3, rho=0.25)
    assert model.head.rho == 0.25


@pytest.mark.parametrize(
    ("options", "head_rho"),
    [
        ({"head_rho": 0.05}, 0.05),  # given: kept
        ({"objective": "ls"}, 1e-3),  # only DI's read-out follows rho
        ({"objective": "ls", "rho": 0.3}, 1e-3),
    ],
)
def test_the_read_out_penalty_that_does_not_follow_rho(
    make_trainer: Callable[..., L.Trainer], options: dict[str, object], head_rho: float
) -> None:
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3, **options)  # type: ignore[arg-type]
    make_trainer(max_epochs=1).fit(model, _data(300, 100))
    assert model.head.rho == head_rho


def test_a_checkpoint_keeps_the_chosen_rho_and_the_read_outs(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    trainer = make_trainer(max_epochs=1)
    model = KernelClassifier(FourierLayer(6, 20, seed=0), num_classes=3)
    trainer.fit(model, _data(300, 100))
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    loaded = KernelClassifier.load_from_checkpoint(tmp_path / "model.ckpt")
    assert loaded.hparams["rho"] is None and loaded.rho == 0.1 and loaded.head.rho == 0.1
