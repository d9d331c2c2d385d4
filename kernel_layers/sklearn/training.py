"""The estimators' training loop: Adam on ``-DI`` over mini-batches, stopped by the DI
paper's rule, with the map kept at its best epoch on held-out rows.

The rule is the one of the Lightning recipes, run by the same callbacks:
:class:`~kernel_layers.callbacks.PlateauDecay` multiplies the learning rate by 0.1 when the
epoch's mean DI stops improving for ``PATIENCE`` epochs, and
:class:`~kernel_layers.callbacks.DISaturationStopping` stops training when DI fails to
improve after a decay; ``max_epochs`` caps the epochs.

With held-out rows (the estimators' ``validation_fraction``), a ``score`` of the map on
them (higher is better) is taken before training (the untrained map) and after each
epoch; training also stops after ``n_iter_no_change`` epochs without a better score, and
the map returned is the one of the best score, the untrained map included. The training
DI always rises (the epochs maximise it), while the held-out score shows when the map
starts to fit the training rows rather than the data.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from sklearn.model_selection import train_test_split

from kernel_layers._validation import caller_stacklevel
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.layers.base import KernelFeatureMap

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_COMPONENTS",
    "DEFAULT_LR",
    "DEFAULT_MAX_EPOCHS",
    "PATIENCE",
    "TrainResult",
    "adam_groups",
    "data_extent",
    "default_components",
    "split_rows",
    "train_map",
    "train_sizes",
]

#: The paper's batch size for ``J <= 500``; ``2 J`` above (capped at the data size).
DEFAULT_BATCH = 1000
#: ``n_components=None`` takes ``min(DEFAULT_COMPONENTS, rows // 3)`` (at least 1), so that
#: the default batch ``min(max(1000, 2 J), rows)`` stays at least ``2 J``.
DEFAULT_COMPONENTS = 400
#: The estimators' epoch cap: the held-out score (``n_iter_no_change``) and the DI paper's
#: rule usually stop training well before it.
DEFAULT_MAX_EPOCHS = 100
#: The estimators' Adam learning rate (the recipes' value).
DEFAULT_LR = 1e-2
#: Epochs without a better mean DI before the learning rate is multiplied by 0.1.
PATIENCE = 3

#: The power of the inputs' unit each learnable parameter of a map is measured in:
#: landmarks are points among the rows, frequencies their inverse; phases and log
#: bandwidths have none.
UNIT_POWERS = {"landmarks": 1, "frequencies": -1}
#: Adam's ``eps`` for a parameter of no unit (its default).
ADAM_EPS = 1e-8


def adam_groups(layer: KernelFeatureMap, lr: float, unit: float) -> list[dict[str, Any]]:
    """Adam's parameter groups for ``layer`` trained on rows of extent ``unit``: a
    parameter in the inputs' unit to the power ``p`` (:data:`UNIT_POWERS`) takes
    ``lr * unit**p`` and ``eps * unit**-p``. Adam's steps are then the same fraction of
    the data's extent in any unit: rows multiplied by ``c`` train a map whose
    landmarks are ``c`` times (frequencies ``1 / c`` times) those of the rows as given.
    """
    powers: dict[int, list[torch.nn.Parameter]] = {}
    for name, parameter in layer.named_parameters():
        powers.setdefault(UNIT_POWERS.get(name.rpartition(".")[2], 0), []).append(parameter)
    return [
        {"params": params, "lr": lr * unit**power, "eps": ADAM_EPS * unit**-power}
        for power, params in sorted(powers.items())
    ]


def data_extent(x: np.ndarray) -> float:
    """The extent of the rows ``x [N, D]``, the unit of :func:`adam_groups`: the range of
    all their values (``1`` for min-max scaled rows, and for constant ones)."""
    extent = float(x.max() - x.min()) if x.size else 0.0
    return extent if extent > 0.0 and np.isfinite(extent) else 1.0


#: A held-out score: the map -> a tuple compared lexicographically (higher is better).
Score = Callable[[KernelFeatureMap], tuple[float, ...]]


def default_components(rows: int) -> int:
    """``J`` for ``n_components=None`` on ``rows`` training rows:
    ``min(DEFAULT_COMPONENTS, rows // 3)``, at least 1."""
    return max(1, min(DEFAULT_COMPONENTS, rows // 3))


def train_sizes(
    owner: str, requested: int | None, rows: int, width: int | None, *, warn: bool = True
) -> tuple[int, int]:
    """``(J, batch)`` that DI trains with on ``rows`` rows.

    ``J`` is ``width`` (``None``: :func:`default_components`); the batch is ``requested``
    (``None``: ``max(1000, 2 J)``) capped at the rows. Where that cap leaves a batch not
    larger than ``J`` (or, by default, below ``2 J``), ``J`` is lowered to half the batch,
    with a warning naming both values if ``warn`` (a ``J`` the user set).
    """
    # int(): a NumPy integer (a grid search's value) stays one through the arithmetic
    width = default_components(rows) if width is None else int(width)
    wanted = int(requested) if requested is not None else max(DEFAULT_BATCH, 2 * width)
    batch = max(2, min(wanted, rows))
    enough = batch > width if requested is not None else batch >= 2 * width
    if enough:
        return width, batch
    chosen = max(1, batch // 2)
    if not warn:
        return chosen, batch
    warnings.warn(
        f"{owner}: n_components={width} with a batch of {batch} rows: DI saturates when "
        f"the batch is not well above n_components ({rows} training rows); "
        f"n_components_={chosen} and batch_size_={batch} are used",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )
    return chosen, batch


def split_rows(
    rows: int, fraction: float | None, seed: int, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train [n - m], held_out [m])`` of ``rows`` rows, ``m = ceil(fraction n)``.

    Stratified by ``labels`` where every class has two rows or more; no held-out rows
    (``held_out`` empty) when ``fraction`` is ``None`` or leaves fewer than 2 rows on a
    side.
    """
    every = np.arange(rows)
    held = int(np.ceil((fraction or 0.0) * rows))
    if held < 2 or rows - held < 2:
        return every, every[:0]
    stratify = None
    if labels is not None:
        _, counts = np.unique(labels, return_counts=True)
        if counts.min() >= 2 and held >= len(counts) and rows - held >= len(counts):
            stratify = labels
    train, held_out = train_test_split(every, test_size=held, random_state=seed, stratify=stratify)
    return np.sort(train), np.sort(held_out)


@dataclass
class TrainResult:
    """What :func:`train_map` did.

    Attributes:
        di_history: mean training DI of each epoch.
        score_history: held-out score before training (index 0) and after each epoch;
            empty without held-out rows.
        lr_decay_epochs: epochs after which the learning rate was divided by 10.
        best_epoch: the epoch whose map was kept (0: the untrained map); without held-out
            rows, the last epoch.
    """

    di_history: list[float] = field(default_factory=list)
    score_history: list[tuple[float, ...]] = field(default_factory=list)
    lr_decay_epochs: list[int] = field(default_factory=list)
    best_epoch: int = 0


def train_map(
    layer: KernelFeatureMap,
    x: torch.Tensor,
    targets: torch.Tensor,
    *,
    num_classes: int | None,
    batch: int,
    max_epochs: int,
    lr: float,
    rho: float,
    generator: torch.Generator,
    score: Score | None = None,
    n_iter_no_change: int = 5,
    unit: float = 1.0,
) -> TrainResult:
    """Train ``layer`` in place by Adam on ``-DI`` of shuffled batches of ``batch`` rows.

    Args:
        layer: the map (on the device of ``x``).
        x (Tensor[N, D]): training rows.
        targets (Tensor[N] | Tensor[N, L]): integer labels or a float target matrix.
        num_classes: ``L`` for labels, ``None`` for a target matrix.
        batch: rows per step (the last incomplete batch of an epoch is dropped).
        max_epochs: at most this many epochs.
        lr: Adam's learning rate.
        rho: DI's ridge parameter.
        generator: the source of the batch order.
        score: held-out score of the map (higher is better); ``None``: none, the map of the
            last epoch is kept.
        n_iter_no_change: with a ``score``, stop after this many epochs without a better
            one.
        unit: the extent of the rows (:func:`data_extent`), which scales each parameter's
            step (:func:`adam_groups`).

    Returns:
        TrainResult: the histories and the epoch kept (its parameters are in ``layer``).
    """
    optimizer = torch.optim.Adam(adam_groups(layer, lr, unit))
    loop: Any = _EpochLoop(optimizer)  # read by the callbacks as their Trainer
    decay = PlateauDecay(patience=PATIENCE, verbose=False)
    stop = DISaturationStopping()
    result = TrainResult()
    best_state: dict[str, torch.Tensor] | None = None
    best = 0  # the epoch of the kept map (0: the untrained one)
    if score is not None:
        result.score_history.append(_score(score, layer))
        best_state = copy.deepcopy(layer.state_dict())
    for epoch in range(max_epochs):
        loop.current_epoch = epoch
        stop.on_train_epoch_start(loop, None)  # a stand-in for the Trainer
        order = torch.randperm(len(x), generator=generator).to(x.device)
        layer.train()
        total, rows = 0.0, 0
        for start in range(0, len(x) - batch + 1, batch):
            index = order[start : start + batch]
            di = layer.discriminant_information(
                x[index], targets[index], rho=rho, num_classes=num_classes
            )
            optimizer.zero_grad()
            (-di).backward()
            optimizer.step()
            total += float(di.detach()) * len(index)
            rows += len(index)
        result.di_history.append(total / max(rows, 1))
        loop.callback_metrics = {"train/di_epoch": result.di_history[-1]}
        decay.on_train_epoch_end(loop, None)  # a stand-in for the Trainer
        stop.on_train_epoch_end(loop, None)  # a stand-in for the Trainer
        result.best_epoch = epoch + 1
        if score is not None:
            result.score_history.append(_score(score, layer))
            if result.score_history[-1] > result.score_history[best]:  # ties keep the earlier
                best = epoch + 1
                best_state = copy.deepcopy(layer.state_dict())
            if epoch + 1 - best >= n_iter_no_change:
                break
        if loop.should_stop:
            break
    if score is not None:
        assert best_state is not None
        layer.load_state_dict(best_state)
        result.best_epoch = best
    result.lr_decay_epochs = list(decay.decay_epochs)
    layer.eval()
    return result


def _score(score: Score, layer: KernelFeatureMap) -> tuple[float, ...]:
    layer.eval()
    with torch.no_grad():
        return tuple(float(v) for v in score(layer))


class _EpochLoop:
    """What :class:`PlateauDecay` and :class:`DISaturationStopping` read of a Lightning
    ``Trainer``, for the estimators' plain loop (one process, always fitting)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizers = [optimizer]
        self.lr_scheduler_configs: list[Any] = []
        self.state = _FITTING
        self.sanity_checking = False
        self.fast_dev_run = False
        self.callback_metrics: dict[str, float] = {}
        self.current_epoch = 0
        self.check_val_every_n_epoch = 1  # the monitored value is this epoch's
        self.should_stop = False
        self.strategy = self

    @staticmethod
    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:
        """One process: its own decision."""
        return decision


class _Fitting:
    fn = TrainerFn.FITTING


_FITTING = _Fitting()
