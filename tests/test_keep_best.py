"""Held-out data in Lightning training: KeepBest, KernelClassifier(keep_best=...), val/di,
and the stopping rule on a validation metric."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import lightning as L
import pytest
import torch
from sklearn.datasets import make_classification
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers.callbacks import DISaturationStopping, KeepBest, PlateauDecay, UntrainedBaseline
from kernel_layers.data import TensorDataModule
from kernel_layers.layers.fourier import FourierLayer
from kernel_layers.objectives import discriminant_information
from kernel_layers.training.module import KernelClassifier

#: The scripted validation value of each epoch: best at epoch 2.
SCRIPT = [0.5, 0.7, 0.9, 0.8, 0.6]


class _Scripted(L.LightningModule):
    """A module whose weight is set to the epoch number during the epoch and whose
    ``val/score`` is ``SCRIPT[epoch]``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        with torch.no_grad():
            self.w.fill_(float(self.current_epoch))
        return (self.w * 0).sum() + batch[0].sum() * 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/score", SCRIPT[self.current_epoch], on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)


def test_keep_best_restores_the_best_epochs_weights(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    model, keep = _Scripted(), KeepBest("val/score", verbose=False)
    make_trainer(callbacks=[keep], max_epochs=len(SCRIPT)).fit(model, _loader(), _loader())
    assert keep.best_epoch == 2 and keep.best_score == pytest.approx(0.9)
    torch.testing.assert_close(model.w.detach(), torch.full((3,), 2.0), rtol=0, atol=0)


def test_keep_best_in_min_mode_and_its_message(
    make_trainer: Callable[..., L.Trainer], caplog: pytest.LogCaptureFixture
) -> None:
    model, keep = _Scripted(), KeepBest("val/score", mode="min")
    with caplog.at_level("INFO", logger="kernel_layers.callbacks"):
        make_trainer(callbacks=[keep], max_epochs=len(SCRIPT)).fit(model, _loader(), _loader())
    assert float(model.w[0]) == 0.0  # epoch 0 has the lowest score
    assert "KeepBest: restored the weights of epoch 0, the best on 'val/score' (0.5)" in (
        caplog.text
    )


def test_keep_best_state_survives_a_weights_only_checkpoint() -> None:
    keep = KeepBest("val/score")
    keep.best_score, keep.best_epoch = 0.9, 2
    keep.best_state = {"w": torch.arange(3.0)}
    buffer = io.BytesIO()
    torch.save(keep.state_dict(), buffer)
    buffer.seek(0)
    fresh = KeepBest("val/score")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert (fresh.best_score, fresh.best_epoch) == (0.9, 2)
    assert fresh.best_state is not None
    torch.testing.assert_close(fresh.best_state["w"], torch.arange(3.0))


def test_keep_best_missing_metric_is_named(make_trainer: Callable[..., L.Trainer]) -> None:
    with pytest.raises(RuntimeError, match=r"KeepBest: monitored metric 'val/nothing' is not"):
        make_trainer(callbacks=[KeepBest("val/nothing")], max_epochs=1).fit(
            _Scripted(), _loader(), _loader()
        )


def _data(seed: int = 0) -> TensorDataModule:
    x, y = make_classification(
        n_samples=1300, n_features=8, n_informative=5, n_redundant=0, n_classes=3,
        random_state=seed,
    )  # fmt: skip
    return TensorDataModule(x[:900], y[:900], x[900:], y[900:], batch_size=300, val_fraction=0.2)


def test_val_di_is_the_row_weighted_di_of_the_validation_batches(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    dm = _data()
    model = KernelClassifier(FourierLayer(8, 40, seed=0), num_classes=3)
    trainer = make_trainer(max_epochs=1)
    trainer.fit(model, dm)
    total, rows = 0.0, 0
    model.eval()
    with torch.no_grad():
        for x, y in dm.val_dataloader():
            if len(x) > 40:
                features = model(x).double()
                total += float(discriminant_information(features, y, rho=model.rho)) * len(x)
                rows += len(x)
    assert rows > 0
    assert float(trainer.callback_metrics["val/di"]) == pytest.approx(total / rows, rel=1e-4)


def test_keep_best_option_adds_the_callback_and_hands_back_the_best_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(
        FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best="val/acc"
    )  # a learning rate so large that held-out accuracy falls after the first epoch
    kept = [c for c in model.configure_callbacks() if isinstance(c, KeepBest)]
    assert len(kept) == 1 and kept[0].monitor == "val/acc"
    trainer = make_trainer(max_epochs=4)
    dm = _data()
    trainer.fit(model, dm)
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert keep.best_state is not None and keep.best_epoch == 0  # not the last epoch
    for name, value in model.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value.cpu(), keep.best_state[name], rtol=0, atol=0)
    score = trainer.validate(model, dm, verbose=False)[0]["val/acc"]
    assert score == pytest.approx(keep.best_score, abs=1e-6)


def test_the_stopping_rule_can_watch_validation_accuracy(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, lr=0.05)
    decay = PlateauDecay(monitor="val/acc", patience=1, verbose=False)
    stop = DISaturationStopping(monitor="val/acc")
    seen: list[float] = []

    class Record(L.Callback):
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            seen.append(float(trainer.callback_metrics["val/acc"]))

    trainer = make_trainer(callbacks=[Record(), decay, stop], max_epochs=40)
    trainer.fit(model, _data())
    assert decay.decay_epochs and len(seen) < 40  # decayed, then stopped on val/acc
    assert stop.best_score == pytest.approx(max(seen), abs=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"keep_best": "val/loss"},
            r"KernelClassifier: argument 'keep_best' must be one of .*'val/acc'.*got 'val/loss'",
        ),
        (
            {"keep_best": "val/di", "objective": "ce"},
            r"KernelClassifier: argument 'keep_best' 'val/di' needs objective 'di'.*got "
            r"objective 'ce'",
        ),
    ],
)
def test_bad_keep_best_is_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KernelClassifier(FourierLayer(8, 10, seed=0), num_classes=3, **kwargs)


def test_the_untrained_map_is_handed_back_when_no_epoch_beats_it(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    layer = FourierLayer(8, 30, seed=0)
    start = {k: v.clone() for k, v in layer.state_dict().items()}
    model = KernelClassifier(layer, num_classes=3, lr=50.0, keep_best="val/acc")
    baseline = UntrainedBaseline()
    trainer = make_trainer(callbacks=[baseline], max_epochs=3)
    dm = _data()
    trainer.fit(model, dm)
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert keep.best_epoch == -1  # a learning rate that wrecks the map: nothing beats it
    for name, value in model.kernel_layer.state_dict().items():
        torch.testing.assert_close(value, start[name], rtol=0, atol=0)
    tested = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    assert tested == pytest.approx(baseline.accuracy, abs=1e-6)  # the read-out refitted


def test_include_untrained_needs_a_data_module(make_trainer: Callable[..., L.Trainer]) -> None:
    with pytest.raises(TypeError, match=r"KeepBest: include_untrained needs a KernelClassifier"):
        make_trainer(callbacks=[KeepBest()], max_epochs=1).fit(_Scripted(), _loader(), _loader())


def test_an_epoch_that_ties_with_the_untrained_map_does_not_replace_it(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # 148 of the 180 validation rows right: 148 / 180 rounds up in float32, so a tie is
    # a tie only if the untrained map is scored by the metric that logs val/acc
    L.seed_everything(0)
    layer = FourierLayer(8, 30, seed=2)
    model = KernelClassifier(layer, num_classes=3, lr=1e-30, keep_best="val/acc")
    dm = _data()
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, dm)
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    epoch_score = trainer.validate(model, dm, verbose=False)[0]["val/acc"]
    assert round(epoch_score * 180) == 148
    assert keep.best_score == epoch_score  # the same value, not one rounded differently
    assert keep.best_epoch == -1  # a step of 1e-30 changes no prediction: a tie
