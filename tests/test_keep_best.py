"""Held-out data in Lightning training: KeepBest, KernelClassifier(keep_best=...), val/di,
and the stopping rule on a validation metric."""

from __future__ import annotations

import io
import math
import warnings
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
    model, keep = _Scripted(), KeepBest("val/score", mode="max", verbose=False)
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
    keep = KeepBest("val/score", mode="max")
    keep.best_score, keep.best_epoch = 0.9, 2
    keep.best_state = {"w": torch.arange(3.0)}
    buffer = io.BytesIO()
    torch.save(keep.state_dict(), buffer)
    buffer.seek(0)
    fresh = KeepBest("val/score", mode="max")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert (fresh.best_score, fresh.best_epoch) == (0.9, 2)
    assert fresh.best_state is not None
    torch.testing.assert_close(fresh.best_state["w"], torch.arange(3.0))


def test_keep_best_missing_metric_is_named(make_trainer: Callable[..., L.Trainer]) -> None:
    with pytest.raises(RuntimeError, match=r"KeepBest: monitored metric 'val/nothing' is not"):
        make_trainer(callbacks=[KeepBest("val/nothing", mode="max")], max_epochs=1).fit(
            _Scripted(), _loader(), _loader()
        )


def _data(seed: int = 0) -> TensorDataModule:
    x, y = make_classification(
        n_samples=1300, n_features=8, n_informative=5, n_redundant=0, n_classes=3,
        random_state=seed,
    )  # fmt: skip
    return TensorDataModule(x[:900], y[:900], x[900:], y[900:], batch_size=300, val_fraction=0.2)


def test_val_di_and_val_mse_of_the_validation_rows(
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
    # val/mse: the ridge read-out's squared error against the one-hot targets
    x, y = dm.val_dataset.tensors[:2]  # type: ignore[union-attr]
    with torch.no_grad():
        expected = _one_hot_mse(model.head(model(x)), y)
    assert float(trainer.callback_metrics["val/mse"]) == pytest.approx(expected, rel=1e-5)


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
    # the best epoch is restored before the read-out's refit at the end of fit: the
    # read-out is current for the restored features and scores as validation did
    x, y = dm.val_dataset.tensors[:2]  # type: ignore[union-attr]
    assert _accuracy(model, x, y) == pytest.approx(keep.best_score, abs=1e-6)
    score = trainer.validate(model, dm, verbose=False)[0]["val/acc"]
    assert score == pytest.approx(keep.best_score, abs=1e-6)


def _accuracy(model: KernelClassifier, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fitted model's accuracy on rows ``x``, labels ``y``, without a refit."""
    with torch.no_grad():
        return float((model.scores(model(x)).argmax(1) == y).double().mean())


def test_a_read_out_trained_by_gradient_leaves_the_untrained_map_out(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # objective "ce": the untrained map's read-out is the random initial one, not the
    # ridge fit its candidate score would be measured with
    L.seed_everything(0)
    model = KernelClassifier(
        FourierLayer(8, 30, seed=0), num_classes=3, objective="ce", lr=1e-4, keep_best="val/acc"
    )
    trainer = make_trainer(max_epochs=2)
    dm = _data()
    trainer.fit(model, dm)
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert keep.best_epoch in (0, 1)
    score = trainer.validate(model, dm, verbose=False)[0]["val/acc"]
    assert score == pytest.approx(keep.best_score, abs=1e-6)


def test_keep_best_with_plain_loaders_keeps_the_best_trained_epoch(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    L.seed_everything(0)
    dm = _data()
    dm.setup("fit")
    splits = (dm.train_dataset, dm.val_dataset)
    rows = [TensorDataset(*split.tensors[:2]) for split in splits]  # type: ignore[union-attr]
    train, val = (DataLoader(d, batch_size=300) for d in rows)
    model = KernelClassifier(
        FourierLayer(8, 30, seed=0), num_classes=3, lr=1.0, keep_best="val/acc"
    )
    trainer = make_trainer(max_epochs=3)
    with pytest.warns(
        UserWarning,
        match=r"KernelClassifier: keep_best='val/acc' keeps the best trained epoch only: the "
        r"untrained map is a candidate with a kernel_layers data module .*got NoneType",
    ):
        trainer.fit(model, train, val)
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert keep.best_epoch is not None and keep.best_epoch >= 0
    assert _accuracy(model, *rows[1].tensors) == pytest.approx(keep.best_score, abs=1e-6)
    with warnings.catch_warnings():  # the warning is the fit's: predict stays quiet
        warnings.filterwarnings("error", message=".*keep_best=")
        trainer.predict(model, val)


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


def test_an_untrained_score_that_is_not_finite_is_no_candidate(
    make_trainer: Callable[..., L.Trainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a NaN best could never be beaten: every trained epoch would lose to it
    from kernel_layers.callbacks import keep_best

    monkeypatch.setattr(keep_best, "untrained_scores", lambda *args: (math.nan, None))
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=0), num_classes=3, keep_best="val/acc")
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, _data())
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert keep.best_epoch is not None and keep.best_epoch >= 0


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


#: A scripted monitor with a three-way tie at 0.9 (epochs 1 to 3) and a tie metric.
TIE_SCRIPT = [0.5, 0.9, 0.9, 0.9, 0.7]
TIE_VALUES = [5.0, 4.0, 2.0, 3.0, 1.0]


class _ScriptedTie(_Scripted):
    """``_Scripted`` with ``val/score`` from ``TIE_SCRIPT`` and ``val/tie`` from
    ``TIE_VALUES``."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/score", TIE_SCRIPT[self.current_epoch], on_epoch=True)
        self.log("val/tie", TIE_VALUES[self.current_epoch], on_epoch=True)


@pytest.mark.parametrize(("tie_break", "kept"), [("val/tie", 2), (None, 1)])
def test_tie_break_decides_between_epochs_of_equal_value(
    make_trainer: Callable[..., L.Trainer], tie_break: str | None, kept: int
) -> None:
    model = _ScriptedTie()
    keep = KeepBest("val/score", mode="max", verbose=False, tie_break=tie_break)
    make_trainer(callbacks=[keep], max_epochs=len(TIE_SCRIPT)).fit(model, _loader(), _loader())
    assert keep.best_epoch == kept  # epoch 4's lower tie value does not beat a higher score
    assert keep.best_tie == (TIE_VALUES[kept] if tie_break else None)
    torch.testing.assert_close(model.w.detach(), torch.full((3,), float(kept)), rtol=0, atol=0)


def test_a_missing_tie_break_metric_is_named(make_trainer: Callable[..., L.Trainer]) -> None:
    keep = KeepBest("val/score", mode="max", tie_break="val/nothing")
    with pytest.raises(RuntimeError, match=r"KeepBest: monitored metric 'val/nothing' is not"):
        make_trainer(callbacks=[keep], max_epochs=1).fit(_Scripted(), _loader(), _loader())


@pytest.mark.parametrize(("value", "error"), [("", ValueError), (3, TypeError)])
def test_a_bad_tie_break_is_named(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"KeepBest: argument 'tie_break' must be a non-empty str"):
        KeepBest("val/acc", tie_break=value)


def test_the_tie_value_survives_a_checkpoint() -> None:
    keep = KeepBest("val/score", mode="max", tie_break="val/tie")
    keep.best_score, keep.best_epoch, keep.best_tie = 0.9, 2, 0.25
    buffer = io.BytesIO()
    torch.save(keep.state_dict(), buffer)
    buffer.seek(0)
    fresh = KeepBest("val/score", mode="max", tie_break="val/tie")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert (fresh.best_score, fresh.best_epoch, fresh.best_tie) == (0.9, 2, 0.25)


def _one_hot_mse(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean squared error of ``scores [N, L]`` against one-hot ``labels [N]``, float64."""
    targets = torch.nn.functional.one_hot(labels.long(), scores.shape[1]).double()
    return float(((scores.double() - targets) ** 2).mean())


def test_the_untrained_maps_squared_error_is_a_fresh_ridge_fit_on_the_training_rows(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """``untrained_scores``' squared error, against a ridge regression with intercept
    written out in float64 on the same features."""
    from kernel_layers.callbacks.untrained_baseline import untrained_scores

    L.seed_everything(0)
    dm = _data()
    dm.setup("fit")
    model = KernelClassifier(FourierLayer(8, 40, seed=0), num_classes=3)
    accuracy, squared_error = untrained_scores(model, model.head, dm, "val")
    x_fit, y_fit = dm.train_dataset.tensors[:2]  # type: ignore[union-attr]
    x_val, y_val = dm.val_dataset.tensors[:2]  # type: ignore[union-attr]
    with torch.no_grad():
        phi, phi_val = model(x_fit).double(), model(x_val).double()
    targets = torch.nn.functional.one_hot(y_fit.long(), 3).double()
    mean, target_mean = phi.mean(0), targets.mean(0)
    centred = phi - mean
    gram = centred.T @ centred + model.head.rho * torch.eye(40, dtype=torch.float64)
    weight = torch.linalg.solve(gram, centred.T @ (targets - target_mean))
    scores = (phi_val - mean) @ weight + target_mean
    assert squared_error == pytest.approx(_one_hot_mse(scores, y_val), rel=1e-4)
    assert accuracy == pytest.approx(float((scores.argmax(1) == y_val).double().mean()), abs=1e-6)


@pytest.mark.parametrize("objective", ["di", "ce"])
def test_keep_best_val_acc_breaks_ties_by_val_mse_with_a_ridge_read_out(objective: str) -> None:
    model = KernelClassifier(
        FourierLayer(8, 30, seed=0), num_classes=3, objective=objective, keep_best="val/acc"
    )
    (keep,) = [c for c in model.configure_callbacks() if isinstance(c, KeepBest)]
    assert keep.tie_break == ("val/mse" if objective == "di" else None)


def test_an_epoch_that_ties_with_the_untrained_map_on_accuracy_wins_on_squared_error(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """At a small learning rate no epoch changes the validation accuracy of the
    untrained map (151 of 180 rows), but each lowers the read-out's squared error: the
    epoch kept is the one of the least error, not the untrained map."""
    from kernel_layers.callbacks.untrained_baseline import untrained_scores

    L.seed_everything(0)
    model = KernelClassifier(
        FourierLayer(8, 30, seed=0), num_classes=3, lr=1e-3, keep_best="val/acc"
    )
    seen: list[tuple[float, float]] = []

    class Record(L.Callback):
        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            if trainer.current_epoch == 0:
                with torch.random.fork_rng():  # the fit's draws stay as they are
                    score, error = untrained_scores(
                        pl_module, pl_module.head, trainer.datamodule, "val"
                    )
                assert error is not None
                seen.append((score, error))

        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            logs = trainer.callback_metrics
            seen.append((float(logs["val/acc"]), float(logs["val/mse"])))

    trainer = make_trainer(callbacks=[Record()], max_epochs=6)
    trainer.fit(model, _data())
    keep = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert {round(score * 180) for score, _ in seen} == {151}  # every epoch ties
    least = min(range(len(seen)), key=lambda i: seen[i][1])
    assert least > 0 and keep.best_epoch == least - 1  # epochs count from 0 after it
    assert keep.best_tie == seen[least][1]


class _ScriptedThreshold(_Scripted):
    """``val/score`` 0.5, 0.505, 0.5 and ``val/tie`` 3, 1, 2: epoch 1 is better than
    epoch 2 on both, yet within a threshold of 0.01 of epoch 0."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/score", [0.5, 0.505, 0.5][self.current_epoch], on_epoch=True)
        self.log("val/tie", [3.0, 1.0, 2.0][self.current_epoch], on_epoch=True)


def test_a_tie_within_the_threshold_goes_to_the_tie_break(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    keep = KeepBest("val/score", mode="max", threshold=0.01, verbose=False, tie_break="val/tie")
    make_trainer(callbacks=[keep], max_epochs=3).fit(_ScriptedThreshold(), _loader(), _loader())
    assert (keep.best_epoch, keep.best_tie) == (1, 1.0)


def test_a_missing_tie_break_metric_warns_when_not_strict(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    keep = KeepBest("val/score", mode="max", strict=False, verbose=False, tie_break="val/nothing")
    with pytest.warns(RuntimeWarning, match=r"KeepBest: monitored metric 'val/nothing' is not"):
        make_trainer(callbacks=[keep], max_epochs=len(SCRIPT)).fit(
            _Scripted(), _loader(), _loader()
        )
    assert keep.best_epoch == 2 and keep.best_tie is None  # chosen on val/score alone


def test_the_untrained_map_has_a_tie_value_for_val_mse_only(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    """Its squared error is not a value of another ``tie_break`` metric: with
    ``val/di`` it has none, so no epoch wins a tie against it."""
    L.seed_everything(0)
    model = KernelClassifier(FourierLayer(8, 30, seed=2), num_classes=3, lr=1e-30)
    keep = KeepBest("val/acc", verbose=False, tie_break="val/di")
    make_trainer(callbacks=[keep], max_epochs=1).fit(model, _data())
    assert keep.best_epoch == -1 and keep.best_tie is None


def test_val_di_judges_the_global_batch_against_the_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under DDP a validation shard of 20 rows is half of a 40-row global batch: DI can
    # use it with J = 24 (40 > 24), though 20 <= 24; a global batch of 24 it cannot.
    from kernel_layers.training.di_epoch import log_validation_di

    model = KernelClassifier(FourierLayer(8, 24, seed=0), num_classes=3)
    monkeypatch.setattr(KernelClassifier, "_world_size", property(lambda self: 2))
    seen: list[int] = []
    monkeypatch.setattr(model, "_di", lambda h, y: seen.append(len(h)) or torch.tensor(1.0))
    monkeypatch.setattr(model, "log", lambda *args, **kwargs: None)
    x, y = torch.rand(20, 8), torch.arange(20) % 3
    log_validation_di(model, (x, y))
    log_validation_di(model, (x[:12], y[:12]))
    assert seen == [20]


def test_keep_best_val_di_without_a_batch_larger_than_the_width_is_named(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # 180 validation rows in batches of 100 (100 and 80 rows), J = 120: no batch is
    # larger than the width, so val/di is never logged and there is no epoch to judge.
    x, y = make_classification(
        n_samples=1200, n_features=8, n_informative=5, n_redundant=0, n_classes=3,
        random_state=0,
    )  # fmt: skip
    dm = TensorDataModule(x[:900], y[:900], x[900:], y[900:], batch_size=100, val_fraction=0.2)
    model = KernelClassifier(FourierLayer(8, 120, seed=0), num_classes=3, keep_best="val/di")
    with pytest.raises(
        ValueError,
        match=r"KernelClassifier: argument 'keep_best' 'val/di' needs validation batches of "
        r"more rows than the feature width 120 .* at most 100 rows; use keep_best='val/acc'",
    ):
        make_trainer(max_epochs=2).fit(model, dm)
    # larger batches: val/di is logged and the fit keeps its best epoch
    dm = TensorDataModule(x[:900], y[:900], x[900:], y[900:], batch_size=300, val_fraction=0.2)
    model = KernelClassifier(FourierLayer(8, 120, seed=0), num_classes=3, keep_best="val/di")
    trainer = make_trainer(max_epochs=2)
    trainer.fit(model, dm)
    assert "val/di" in trainer.callback_metrics
    # validation outside a fit with small batches is not refused (nothing is kept there)
    dm_small = TensorDataModule(x[:900], y[:900], x[900:], y[900:], batch_size=50, val_fraction=0.2)
    assert trainer.validate(model, dm_small, verbose=False)[0]["val/acc"] > 0
