"""The epoch callbacks and ``keep_best`` where validation does not run once at each
epoch's end: checkpoints written at a validation resume as the uninterrupted fit runs,
and ``keep_best`` hands back the weights its validation scored."""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from sklearn.datasets import make_classification

from kernel_layers import KernelClassifier, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, KeepBest, PlateauDecay
from kernel_layers.data import TensorDataModule


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


def _data(val_fraction: float = 0.2) -> TensorDataModule:
    x, y = make_classification(
        n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=0
    )
    return TensorDataModule(
        x[:240], y[:240], x[240:], y[240:], batch_size=50, val_fraction=val_fraction
    )


def _model(**kwargs: Any) -> KernelClassifier:
    L.seed_everything(0, verbose=False)
    return KernelClassifier(NystromLayer(10, 20, gamma=0.1), num_classes=3, lr=1e-2, **kwargs)


def _epoch_callbacks(objective: str) -> list[L.Callback]:
    # DI's epoch value is logged on the epoch's last batch, CE's loss at the epoch's end
    # (by Lightning): at a validation before it, the value there is an earlier epoch's.
    watch = {"monitor": "train/loss_epoch", "mode": "min"} if objective == "ce" else {}
    return [
        PlateauDecay(patience=1, threshold=0.003, verbose=False, **watch),
        DISaturationStopping(patience=2, threshold=0.003, **watch),
    ]


@pytest.mark.parametrize(
    ("validation", "objective"),
    [
        ({"check_val_every_n_epoch": 2}, "di"),
        ({"val_check_interval": 0.5}, "di"),
    ],
    ids=["every-2-epochs", "twice-an-epoch"],
)
def test_a_fit_resumed_from_a_validation_checkpoint_decides_as_the_uninterrupted_one(
    validation: dict[str, Any],
    objective: str,
    make_trainer: Callable[..., L.Trainer],
    tmp_path: Path,
) -> None:
    # Lightning writes these checkpoints at a validation, before the epoch's end where
    # the callbacks decide, and replays that end on resume with no metric logged: the
    # resume raised (the monitor missing), or skipped the epoch and decided later.
    saver = ModelCheckpoint(tmp_path, filename="{epoch}-{step}", save_top_k=-1)
    whole = make_trainer(
        [*_epoch_callbacks(objective), saver],
        max_epochs=8,
        enable_checkpointing=True,
        **validation,
    )
    whole.fit(_model(keep_best="val/acc", objective=objective), _data())
    decays, stopped = whole.callbacks[0].decay_epochs, whole.callbacks[1].stopped_epoch
    kept = next(c for c in whole.callbacks if isinstance(c, KeepBest))
    assert decays  # the case tested: decisions after the checkpoint resumed from
    # the last of epoch 1: written at its final validation, before its end
    checkpoint = max(tmp_path.glob("epoch=1-*.ckpt"), key=lambda p: p.stat().st_mtime)
    resumed = make_trainer(_epoch_callbacks(objective), max_epochs=8, **validation)
    resumed.fit(_model(keep_best="val/acc", objective=objective), _data(), ckpt_path=checkpoint)
    assert resumed.callbacks[0].decay_epochs == decays
    assert resumed.callbacks[1].stopped_epoch == stopped
    again = next(c for c in resumed.callbacks if isinstance(c, KeepBest))
    assert (again.best_epoch, again.best_score) == (kept.best_epoch, kept.best_score)


def test_keep_best_hands_back_the_weights_its_validation_scored(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # Validation at the 4th of 7 steps: the copy was taken at the epoch's end, two
    # steps after the validation whose score it kept.
    model = _model(keep_best="val/acc")
    x, y = make_classification(
        n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=0
    )
    data = TensorDataModule(x[:240], y[:240], x[240:], y[240:], batch_size=30, val_fraction=0.2)
    trainer = make_trainer(max_epochs=5, val_check_interval=4)
    trainer.fit(model, data)
    kept = next(c for c in trainer.callbacks if isinstance(c, KeepBest))
    assert kept.best_epoch is not None and kept.best_epoch >= 0
    scored = trainer.validate(model, data, verbose=False)[0]
    assert scored["val/acc"] == pytest.approx(kept.best_score, abs=0)
    assert scored["val/mse"] == pytest.approx(kept.best_tie, rel=1e-6)


def test_callbacks_read_this_epochs_loss_epoch(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    # train/loss_epoch (-DI) was logged at the module's epoch end, after a user's
    # callbacks had read the previous epoch's value (or found none at epoch 0); it
    # stays an epoch value on the logger's epoch rows.
    seen: list[tuple[float, float]] = []

    class Reader(L.Callback):
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            logs = trainer.callback_metrics
            seen.append((float(logs["train/loss_epoch"]), float(logs["train/di_epoch"])))

    plateau = PlateauDecay(monitor="train/loss_epoch", mode="min", verbose=False)
    logger = CSVLogger(tmp_path, name="run")
    make_trainer([Reader(), plateau], max_epochs=3, logger=logger).fit(_model(), _data())
    assert len(seen) == 3
    assert all(loss == -di for loss, di in seen)
    assert plateau.best_score == min(loss for loss, _ in seen)
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as file:
        rows = [r for r in csv.DictReader(file) if r.get("train/loss_epoch")]
    assert [(int(r["epoch"]), float(r["train/loss_epoch"])) for r in rows] == [
        (epoch, loss) for epoch, (loss, _) in enumerate(seen)
    ]


def test_keep_best_on_a_training_metric_reads_it_at_each_epochs_end(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # A metric that validation does not log is read where training logged it.
    values: list[float] = []

    class Reader(L.Callback):
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            values.append(float(trainer.callback_metrics["train/di_epoch"]))

    keep = KeepBest("train/di_epoch", include_untrained=False, verbose=False)
    make_trainer([Reader(), keep], max_epochs=4).fit(_model(), _data(val_fraction=0.0))
    best = max(range(len(values)), key=values.__getitem__)
    assert (keep.best_epoch, keep.best_score) == (best, values[best])


def test_keep_best_without_validation_rows_is_refused(
    make_trainer: Callable[..., L.Trainer],
) -> None:
    # It handed back the untrained map, scored 0 on no rows.
    with pytest.raises(
        ValueError,
        match=r"val split holds no rows to score the untrained map on; keep_best \(KeepBest\) "
        r"needs validation rows",
    ):
        make_trainer(max_epochs=2).fit(_model(keep_best="val/acc"), _data(val_fraction=0.0))


def test_a_resume_at_a_validation_before_lightnings_epoch_loss_skips_that_epoch(
    make_trainer: Callable[..., L.Trainer], tmp_path: Path
) -> None:
    # CE's train/loss_epoch is aggregated at the epoch's end: a checkpoint written at
    # the epoch's last validation cannot know it. The resume raised that it was missing.
    saver = ModelCheckpoint(tmp_path, filename="{epoch}-{step}", save_top_k=-1)
    make_trainer(
        [*_epoch_callbacks("ce"), saver], max_epochs=3, enable_checkpointing=True,
        val_check_interval=0.5,
    ).fit(_model(objective="ce"), _data())  # fmt: skip
    checkpoint = max(tmp_path.glob("epoch=1-*.ckpt"), key=lambda p: p.stat().st_mtime)
    resumed = make_trainer(_epoch_callbacks("ce"), max_epochs=3, val_check_interval=0.5)
    resumed.fit(_model(objective="ce"), _data(), ckpt_path=checkpoint)
    assert resumed.current_epoch == 3


def test_keep_best_warns_when_no_validation_ran(make_trainer: Callable[..., L.Trainer]) -> None:
    model = _model()
    keep = KeepBest(include_untrained=False, strict=False)
    trainer = make_trainer([keep], max_epochs=2, limit_val_batches=0)
    with pytest.warns(
        RuntimeWarning, match=r"no validation scored 'val/acc' after a training epoch"
    ):
        trainer.fit(model, _data())
    assert torch.isfinite(model.kernel_layer.landmarks).all()
