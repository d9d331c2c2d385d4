"""Test accuracy of the map before training: what training the kernel layer adds."""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from torchmetrics import MeanSquaredError
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import override

from kernel_layers.callbacks.monitor import log_on_rank_zero, should_skip
from kernel_layers.training.batch_checks import batch_parts
from kernel_layers.training.heads import one_hot_targets
from kernel_layers.training.modes import eval_mode, model_inputs
from kernel_layers.training.r2 import TargetR2

__all__ = ["SQUARED_ERROR_KEY", "UntrainedBaseline", "untrained_score", "untrained_scores"]

_OWNER = "UntrainedBaseline"
#: The key ``KernelClassifier`` logs the ridge read-out's validation squared error under:
#: the value :func:`untrained_scores` gives beside the accuracy.
SQUARED_ERROR_KEY = "val/mse"


class UntrainedBaseline(Callback):
    """Score the untrained map once, when training starts: the baseline of a fit.

    At the start of the first training epoch (after the model's ``on_train_start``, which
    draws Nyström landmarks from the data), a fresh ridge read-out with the model's
    ``head.rho`` is fitted on the kernel features of every training row, and its accuracy
    (its ``R^2`` for float targets) on the data module's test split is stored in
    :attr:`accuracy` and logged (logger
    ``kernel_layers.callbacks``). The model itself is left untouched. ``kernel-layers fit``
    prints it beside the trained model's ``test/acc``.

    Needs a :class:`~kernel_layers.KernelClassifier` and a data module with
    ``train_eval_dataloader()`` and ``test_dataloader()`` (every
    :mod:`kernel_layers.data` module). The value is checkpointed, so a resumed fit keeps it.

    Attributes:
        accuracy (float | None): test accuracy of the untrained map, ``None`` until measured.
    """

    def __init__(self) -> None:
        super().__init__()
        self.accuracy: float | None = None

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        value = state_dict.get("accuracy")
        self.accuracy = None if value is None else float(value)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.accuracy is not None or trainer.current_epoch != 0 or should_skip(trainer):
            return
        datamodule = getattr(trainer, "datamodule", None)
        head = getattr(pl_module, "head", None)
        if datamodule is None or head is None:
            raise TypeError(
                f"{_OWNER}: needs a KernelClassifier and a kernel_layers data module, got "
                f"{type(pl_module).__name__} and {type(datamodule).__name__}"
            )
        self.accuracy = untrained_score(pl_module, head, datamodule)
        metric = "test/r2" if datamodule.num_classes == 0 else "test/acc"  # 0: float targets
        log_on_rank_zero(
            f"{_OWNER}: {metric} of the untrained map (ridge read-out) {self.accuracy:.4f}"
        )


def untrained_score(
    model: pl.LightningModule, head: Any, datamodule: Any, split: str = "test"
) -> float:
    """The first of :func:`untrained_scores`: the accuracy, or the ``R^2``."""
    return untrained_scores(model, head, datamodule, split)[0]


@torch.no_grad()
def untrained_scores(
    model: pl.LightningModule,
    head: Any,
    datamodule: Any,
    split: str = "test",
    max_batches: int | None = None,
) -> tuple[float, float | None]:
    """Score on a split of a fresh ridge read-out fitted on ``model``'s current features
    of the training rows: the accuracy for class labels, the ``R^2`` (averaged uniformly
    over the targets, as :class:`~kernel_layers.KernelRegressor` logs it) for float
    targets.

    Args:
        model: a :class:`~kernel_layers.KernelClassifier` or
            :class:`~kernel_layers.KernelRegressor` (``model(x)`` gives features).
        head: the model's ridge head; the fresh read-out is a copy of it (its type and
            penalty) fitted anew, so the model's own head is left as it is.
        datamodule: serves ``train_eval_dataloader()`` and ``<split>_dataloader()``.
        split: ``"test"`` or ``"val"``.
        max_batches: score the split's first batches only, as many as this (``None``:
            all), as ``limit_val_batches`` limits validation.

    Returns:
        tuple[float, float | None]: the fraction of the split's rows classified
        correctly, or its ``R^2``; and for class labels the read-out's mean squared
        error against their one-hot targets (``None`` for float targets). Each is
        computed by the metric the model logs (``MulticlassAccuracy``,
        ``MeanSquaredError``, ``TargetR2``), so that the same predictions give the same
        values, to the last bit, as ``val/acc``, ``val/mse`` or ``val/r2`` in one
        process. Under several processes every process scores the whole split, while
        the logged values are synced over the distributed sampler's shards, which may
        repeat a few rows to make them equal.

    Raises:
        ValueError: the split holds no rows.
    """
    fresh = copy.deepcopy(head).to(model.device)
    fresh.reset()
    r2 = TargetR2(split).to(model.device)
    squared_error = MeanSquaredError().to(model.device)
    accuracy: MulticlassAccuracy | None = None  # made at the first class labels
    with eval_mode(model):
        for batch in datamodule.train_eval_dataloader():
            x, y = model_inputs(model, *batch_parts(type(model).__name__, batch, 2))
            fresh.update(model(x), _targets(model, y))
        fresh.fit()
        for index, batch in enumerate(getattr(datamodule, f"{split}_dataloader")()):
            if max_batches is not None and index >= max_batches:
                break
            x, y = model_inputs(model, *batch_parts(type(model).__name__, batch, 2))
            scores = fresh(model(x))
            if y.is_floating_point():
                target = _targets(model, y)
                if fresh.num_outputs == 1:  # R² takes one target as a vector
                    scores, target = scores[:, 0], target[:, 0]
                r2.update(scores, target)
            else:
                if accuracy is None:
                    accuracy = MulticlassAccuracy(fresh.num_outputs, average="micro")
                    accuracy = accuracy.to(model.device)
                accuracy.update(scores, y)
                squared_error.update(scores, one_hot_targets(y, scores.shape[1], scores.dtype))
    if r2.update_called:
        return float(r2.compute()), None
    if accuracy is None:
        needs = (
            "keep_best (KeepBest) needs validation rows: give the data module a validation "
            "split, e.g. val_fraction > 0"
            if split == "val"
            else "UntrainedBaseline needs test rows"
        )
        raise ValueError(
            f"{type(model).__name__}: the data module's {split} split holds no rows to score "
            f"the untrained map on; {needs}"
        )
    return float(accuracy.compute()), float(squared_error.compute())


def _targets(model: pl.LightningModule, y: Tensor) -> Tensor:
    """``y`` checked as ``model`` checks its targets: class labels ``Tensor[B]`` of a
    classifier, float targets ``Tensor[B, L]`` of a regressor."""
    check = getattr(model, "check_targets", None)
    return y if check is None else check(y)
