"""``keep_best="auto"`` (the default): the best epoch on validation on small data only."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from sklearn.datasets import make_classification, make_regression

from kernel_layers import KernelClassifier, KernelRegressor
from kernel_layers.callbacks import KeepBest
from kernel_layers.data import TensorDataModule
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.selection.rho import SMALL_DATA_BATCHES, is_small_data
from kernel_layers.training.readout import ReadoutRefit
from kernel_layers.training.small_data import SmallDataKeepBest


def _classes(batch_size: int, val_fraction: float = 0.2) -> TensorDataModule:
    x, y = make_classification(
        n_samples=1300, n_features=8, n_informative=5, n_redundant=0, n_classes=3,
        random_state=0,
    )  # fmt: skip
    return TensorDataModule(
        x[:900], y[:900], x[900:], y[900:], batch_size=batch_size, val_fraction=val_fraction
    )


def _fit(
    make_trainer: Callable[..., L.Trainer], dm: TensorDataModule, epochs: int = 4, **kwargs: Any
) -> tuple[KernelClassifier, L.Trainer]:
    L.seed_everything(0)
    # a learning rate so large that held-out accuracy falls after the first epoch
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, **kwargs)
    trainer = make_trainer(max_epochs=epochs)
    trainer.fit(model, dm)
    return model, trainer


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether every tensor of the two modules' states is equal (extra states aside)."""
    one, two = a.state_dict(), b.state_dict()
    assert one.keys() == two.keys()
    return all(torch.equal(one[k], two[k]) for k in one if isinstance(one[k], torch.Tensor))


def test_small_data_is_fewer_than_eight_batches() -> None:
    assert SMALL_DATA_BATCHES == 8
    assert is_small_data(7) and not is_small_data(8) and not is_small_data(float("inf"))


def test_auto_keeps_the_best_epoch_on_small_data(make_trainer: Callable[..., L.Trainer]) -> None:
    # 720 training rows in batches of 300: 3 batches an epoch
    auto, trainer = _fit(make_trainer, _classes(300))
    assert auto.hparams["keep_best"] == "auto"
    keep = next(c for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))
    assert keep.active and keep.best_epoch is not None and keep.best_epoch < 3
    explicit, _ = _fit(make_trainer, _classes(300), keep_best="val/acc")
    last, _ = _fit(make_trainer, _classes(300), keep_best=None)
    assert _same_weights(auto, explicit)
    assert not _same_weights(auto, last)


def test_auto_keeps_the_last_epoch_with_many_batches(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # 720 training rows in batches of 90: 8 batches an epoch
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        auto, trainer = _fit(make_trainer, _classes(90))
    keep = next(c for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))
    assert not keep.active and keep.best_state is None
    last, _ = _fit(make_trainer, _classes(90), keep_best=None)
    assert _same_weights(auto, last)


def test_auto_without_validation_rows_keeps_the_last_epoch_silently(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        auto, _ = _fit(make_trainer, _classes(300, val_fraction=0.0))
    last, _ = _fit(make_trainer, _classes(300, val_fraction=0.0), keep_best=None)
    assert _same_weights(auto, last)


def test_auto_steps_aside_for_a_users_keep_best(make_trainer: Callable[..., L.Trainer]) -> None:
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0)
    theirs = KeepBest("val/acc", verbose=False)
    trainer = make_trainer(callbacks=[theirs], max_epochs=3)
    trainer.fit(model, _classes(300))
    assert theirs in trainer.callbacks and theirs.best_epoch is not None
    assert not any(isinstance(c, SmallDataKeepBest) for c in trainer.callbacks)


def test_auto_with_a_trained_read_out_keeps_the_last_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    auto, trainer = _fit(make_trainer, _classes(300), epochs=2, objective="ce")
    keep = next(c for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))
    assert not keep.active
    last, _ = _fit(make_trainer, _classes(300), epochs=2, objective="ce", keep_best=None)
    assert _same_weights(auto, last)


def test_auto_keeps_the_regressors_best_epoch_on_small_data(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = make_regression(n_samples=500, n_features=6, noise=20.0, random_state=0)
    y = (y - y.mean()) / y.std()

    def fit(**kwargs: Any) -> KernelRegressor:
        L.seed_everything(0)
        dm = TensorDataModule(
            x[:400], y[:400], x[400:], y[400:], float_targets=True, batch_size=200,
            val_fraction=0.25,
        )  # fmt: skip
        model = KernelRegressor(FourierLayer(6, 40, seed=0), lr=1.0, **kwargs)
        make_trainer(max_epochs=4).fit(model, dm)
        return model

    auto, explicit, last = fit(), fit(keep_best="val/r2"), fit(keep_best=None)
    assert auto.hparams["keep_best"] == "auto"
    assert _same_weights(auto, explicit) and not _same_weights(auto, last)


def test_keep_best_that_scored_only_the_untrained_map_keeps_the_last_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # validation every 5 epochs, 2 epochs run: only the untrained map was scored
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best=None)
    keep = KeepBest("val/acc", verbose=False)
    trainer = make_trainer(callbacks=[keep], max_epochs=2, check_val_every_n_epoch=5)
    with pytest.warns(RuntimeWarning, match=r"no validation scored 'val/acc' after a training"):
        trainer.fit(model, _classes(300))
    assert keep.best_epoch == -1  # the untrained map was scored, and is not handed back
    last = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best=None)
    L.seed_everything(0)
    make_trainer(max_epochs=2, check_val_every_n_epoch=5).fit(last, _classes(300))
    assert _same_weights(model, last)


def test_the_fit_summary_names_the_epoch_handed_back(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    from kernel_layers.cli.output import fit_summary

    _, trainer = _fit(make_trainer, _classes(300))
    keep = next(c for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))
    assert keep.restored_epoch == keep.best_epoch and keep.best_epoch != 3
    which = "the untrained map" if keep.best_epoch == -1 else f"epoch {keep.best_epoch}"
    # no checkpoint written: nothing said of one
    expected = f"  model: {which}, the best on val/acc ({keep.best_score:.4f}; keep_best)"
    assert expected in fit_summary(trainer, None, None)
    # the last epoch handed back: no such line
    _, trainer = _fit(make_trainer, _classes(300), keep_best=None)
    assert not any(line.startswith("  model:") for line in fit_summary(trainer, None, None))


def test_the_fit_summary_says_the_last_checkpoint_holds_the_last_epoch(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    from kernel_layers.cli.output import fit_summary

    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = make_trainer(max_epochs=4, callbacks=[checkpoint], enable_checkpointing=True)
    trainer.fit(model, _classes(300))
    lines = fit_summary(trainer, None, None)
    model_line = next(line for line in lines if line.startswith("  model:"))
    assert model_line.endswith("; the checkpoint below holds the last epoch")
    assert f"  checkpoint: {checkpoint.last_model_path}" in lines


def test_one_trainer_fitting_a_second_model_keeps_that_models_own_best(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # the SmallDataKeepBest of the first fit is not a user's KeepBest: the second fit
    # gets its own, and never the first model's weights
    L.seed_everything(0)
    first = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0)
    second = KernelClassifier(FourierLayer(8, 30, seed=1), num_classes=3, lr=1.0)
    trainer = make_trainer(max_epochs=3)
    trainer.fit(first, _classes(300))
    trainer.fit_loop.max_epochs = 5
    trainer.fit(second, _classes(300))
    keepers = [c for c in trainer.callbacks if isinstance(c, KeepBest)]
    assert len(keepers) == 1 and keepers[0].active
    assert not _same_weights(first, second)


def test_a_checkpoint_of_keep_best_none_is_not_refused_under_auto() -> None:
    from kernel_layers.training.checkpoint_checks import configuration_differences

    saved = {"keep_best": None, "lr": 0.01}
    assert configuration_differences(saved, {"keep_best": "auto", "lr": 0.01}, None, None) == []
    assert configuration_differences(saved, {"keep_best": "auto", "lr": 0.1}, None, None) == [
        "model.lr: checkpoint 0.01, configuration 0.1"
    ]


def test_auto_resumed_from_a_checkpoint_without_its_state_keeps_the_last_epoch(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    # written with keep_best=None: no SmallDataKeepBest state, the epochs before the
    # checkpoint unscored; the resumed fit keeps the last epoch, as that fit would
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best=None)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    make_trainer(max_epochs=2, callbacks=[checkpoint], enable_checkpointing=True).fit(
        model, _classes(300)
    )
    resumed = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0)
    trainer = make_trainer(max_epochs=4)
    trainer.fit(resumed, _classes(300), ckpt_path=checkpoint.last_model_path)
    keep = next(c for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))
    assert not keep.active and keep.restored_epoch is None
    last = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best=None)
    make_trainer(max_epochs=4).fit(last, _classes(300), ckpt_path=checkpoint.last_model_path)
    assert _same_weights(resumed, last)


def test_the_untrained_map_is_scored_on_the_validation_batches_the_epochs_are(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # 180 validation rows in batches of 100 and 80, limit_val_batches=1: the epochs are
    # scored on the first 100 rows, and so is the untrained map. With a learning rate of
    # 1e-30 an epoch leaves the map as it was: the two scores tie.
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=1e-30)
    keep = KeepBest("val/acc", verbose=False)
    trainer = make_trainer(callbacks=[keep], max_epochs=1, limit_val_batches=1)
    trainer.fit(model, _classes(100))
    assert keep.best_epoch == -1
    assert keep.best_score == pytest.approx(float(trainer.callback_metrics["val/acc"]), abs=1e-7)


def test_validation_batches_count_every_process_and_the_fraction() -> None:
    from types import SimpleNamespace

    from kernel_layers.callbacks.keep_best import validation_batches

    def trainer(limit: float, world: int = 1) -> Any:
        return SimpleNamespace(limit_val_batches=limit, world_size=world)

    assert validation_batches(trainer(1.0), 4) == 4
    assert validation_batches(trainer(1), 4) == 1
    assert validation_batches(trainer(1, world=2), 4) == 2  # one batch on each process
    assert validation_batches(trainer(3, world=2), 4) == 4
    assert validation_batches(trainer(0.5), 4) == 2


def test_float_targets_to_a_classifier_under_auto_are_refused_as_labels(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    x, y = make_classification(n_samples=300, n_features=8, random_state=0)
    dm = TensorDataModule(
        x[:200], y[:200, None], x[200:], y[200:, None], float_targets=True, batch_size=100
    )
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=2)
    with pytest.raises(TypeError, match=r"KernelClassifier: argument 'y' must be integer labels"):
        make_trainer(max_epochs=1).fit(model, dm)


def _notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages Lightning's callback connector gives with ``rank_zero_info``."""
    from lightning.pytorch.trainer.connectors import callback_connector

    said: list[str] = []
    monkeypatch.setattr(callback_connector, "rank_zero_info", said.append)
    return said


def test_a_later_stage_replaces_the_module_callbacks_unannounced(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # test after fit: the module's callbacks of the fit are replaced by the test's, and
    # Lightning's notice about a user's callbacks being overridden is not given
    dm = _classes(300)
    model, trainer = _fit(make_trainer, dm, epochs=1)
    fitted = list(trainer.callbacks)
    said = _notices(monkeypatch)
    trainer.test(model, dm, verbose=False)
    assert not any("will override" in message for message in said)
    kinds = [type(c) for c in trainer.callbacks]
    assert kinds.count(SmallDataKeepBest) == 1
    assert not any(c in fitted for c in trainer.callbacks if isinstance(c, SmallDataKeepBest))


def test_a_users_own_callback_is_still_announced_when_replaced(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3)
    trainer = make_trainer(max_epochs=1, callbacks=[ReadoutRefit()])
    said = _notices(monkeypatch)
    trainer.fit(model, _classes(300))
    assert any(
        "will override existing callbacks passed to Trainer: ReadoutRefit" in message
        for message in said
    )


def test_auto_is_kept_after_another_models_keep_best_on_the_same_trainer(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # the KeepBest that model A's keep_best made is A's, not a user's: model B's "auto"
    # must not give way to it
    dm = _classes(300)
    trainer = make_trainer(max_epochs=1)
    first = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, keep_best="val/acc")
    trainer.validate(first, dm, verbose=False)
    second = KernelClassifier(FourierLayer(8, 30, seed=1), num_classes=3)
    trainer.fit(second, dm)
    kinds = [type(c) for c in trainer.callbacks]
    assert kinds.count(SmallDataKeepBest) == 1 and kinds.count(KeepBest) == 0
