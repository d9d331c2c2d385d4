"""Whether a closed-form read-out is still current: staleness tracking of its features.

The DI objective trains no read-out by gradient: a ridge classifier is fitted on the
features in one pass over the training data. :class:`ReadoutTracker` remembers which
parameter versions it was fitted on, so that an optimiser step or new landmarks make
it stale; the flag :data:`HEAD_CURRENT_KEY` carries whether it is current through a
checkpoint, and a checkpoint's load trusts that flag for the state it loads.
:func:`refit_head` fits the read-out; :class:`ReadoutRefit` refits it at the end of fit,
and before validating, testing or predicting when it is not current.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn

from kernel_layers.objectives.statistics import DIStatistics
from kernel_layers.training.batch_checks import batch_parts, named_batch_errors
from kernel_layers.training.heads import RidgeHead
from kernel_layers.training.landmarks import init_map_from_data
from kernel_layers.training.modes import eval_mode, model_inputs, side_loader

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "HEAD_CURRENT_KEY",
    "ReadoutRefit",
    "ReadoutTracker",
    "adopt_loaded_readout",
    "check_head_ready",
    "feature_modules",
    "feature_state",
    "head_current",
    "head_needs_fit",
    "refit_head",
    "train_eval_batches",
    "training_statistics",
]

#: Checkpoint key: whether the saved ridge read-out was fitted on the saved features.
HEAD_CURRENT_KEY = "kernel_layers_head_current"


def feature_state(modules: Iterable[nn.Module]) -> tuple[tuple[int, int], ...]:
    """Identity and version of every tensor of ``modules``' state (parameters and
    persistent buffers): any in-place change (an optimiser step, new landmarks, a loaded
    state) changes it, while caches derived from them (non-persistent buffers, such as a
    map's projection, rebuilt at ``eval()``) do not."""
    return tuple(
        (id(t), t._version)
        for m in modules
        for t in m.state_dict(keep_vars=True).values()
        if isinstance(t, Tensor) and not t.is_inference()  # inference tensors: no version
    )


class ReadoutTracker:
    """The :func:`feature_state` a read-out was last fitted on (in this process)."""

    def __init__(self) -> None:
        self.fitted_on: tuple[tuple[int, int], ...] | None = None

    def mark_fitted(self, modules: Iterable[nn.Module]) -> None:
        """The read-out was just fitted on the features of ``modules``."""
        self.fitted_on = feature_state(modules)

    def stale(self, modules: Iterable[nn.Module]) -> bool:
        """Whether it was fitted in this process on other features than the current ones."""
        return self.fitted_on not in (None, feature_state(modules))

    def current(self, modules: Iterable[nn.Module]) -> bool:
        """Whether it was fitted in this process on exactly the current features."""
        return self.fitted_on == feature_state(modules)


def adopt_loaded_readout(model: nn.Module, incompatible_keys: object) -> None:
    """``load_state_dict`` post-hook of the kernel modules: a checkpoint whose read-out
    was fitted on its features (:data:`HEAD_CURRENT_KEY`, read by ``on_load_checkpoint``
    into ``model.readout_loaded_current``) leaves it current for the state just loaded,
    so that the first change of the features makes it stale; any other load (a plain
    state dict included) leaves the tracker as it was, which the load's new tensor
    versions make stale."""
    kernel_model = cast("KernelModule", model)
    if kernel_model.readout_loaded_current:
        kernel_model.head_tracker.mark_fitted(feature_modules(kernel_model))
    kernel_model.readout_loaded_current = False


def train_eval_batches(trainer: Trainer, owner: str) -> Iterable[Any]:
    """Every training row once: the data module's ``train_eval_dataloader`` if it has
    one, else the training loader of the running fit.

    Raises:
        RuntimeError: neither is there.
    """
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and hasattr(datamodule, "train_eval_dataloader"):
        return datamodule.train_eval_dataloader()
    if trainer.train_dataloader is not None:
        return side_loader(trainer.train_dataloader, ordered=True)
    raise RuntimeError(
        f"{owner}: fitting the ridge read-out needs the training data; pass a data module "
        "with train_eval_dataloader() (every kernel_layers.data module has one) or call "
        "refit_head(loader) first"
    )


def feature_modules(model: KernelModule) -> list[nn.Module]:
    """The modules the read-out's features depend on: the kernel map and the backbone."""
    return [model.kernel_layer] + ([model.backbone] if model.backbone is not None else [])


def _accumulate(model: KernelModule, head: RidgeHead, batches: Iterable[Any] | None) -> None:
    """Add ``model``'s features and checked targets of ``batches`` (default: every
    training row once) to ``head``'s statistics, the model in eval mode.

    Raises:
        ValueError: ``batches`` held no row.
    """
    owner = type(model).__name__
    if batches is None:
        batches = train_eval_batches(model.trainer, owner)
    rows = 0
    with eval_mode(model):
        for index, batch in enumerate(batches):
            x, y = model_inputs(model, *batch_parts(owner, batch, 2))
            with named_batch_errors("read-out fit", index):
                head.update(model(x), model.check_targets(y))
            rows += len(y)
    if rows == 0:
        raise ValueError(
            f"{owner}: the ridge read-out needs training rows to be fitted on, and the "
            "training data held none (an empty training set or loader)"
        )


@torch.no_grad()
def refit_head(model: KernelModule, batches: Iterable[Any] | None = None) -> None:
    """Fit ``model``'s ridge read-out exactly, in one pass over ``batches``.

    Args:
        model: the ``KernelClassifier`` whose ``head`` is fitted.
        batches: an iterable of ``(x, y, ...)`` batches; ``None``: every training row
            once (:func:`train_eval_batches`).

    Raises:
        ValueError: ``batches`` held no row.
    """
    model.head.reset()
    _accumulate(model, model.head, batches)
    model.head.fit()
    model.head_tracker.mark_fitted(feature_modules(model))


@torch.no_grad()
def training_statistics(model: KernelModule, batches: Iterable[Any] | None = None) -> DIStatistics:
    """The ridge read-out's statistics of ``model``'s current features of ``batches``
    (default: every training row once), gathered in a scratch head: ``model``'s own
    read-out is left as it is.

    Raises:
        ValueError: ``batches`` held no row.
    """
    scratch = RidgeHead(model.head.in_features, model.head.num_outputs).to(model.device)
    _accumulate(model, scratch, batches)
    assert scratch.statistics is not None  # rows were added
    return scratch.statistics


def head_needs_fit(model: KernelModule) -> bool:
    """Whether the ridge read-out was never fitted, or (DI objective) was fitted in
    this process on other features than the current ones."""
    stale = model.refits_head and model.head_tracker.stale(feature_modules(model))
    return not bool(model.head.fitted) or stale


def head_current(model: KernelModule) -> bool:
    """Whether the read-out in use was fitted on the current features (always true of a
    trained read-out and of the ridge read-out of objectives other than DI)."""
    return (
        not model.refits_head
        or model.readout is not None
        or (bool(model.head.fitted) and model.head_tracker.current(feature_modules(model)))
    )


def check_head_ready(model: KernelModule) -> None:
    """Raise unless the ridge read-out may score the current features.

    Raises:
        RuntimeError: it was never fitted, or was fitted on other features.
    """
    if head_needs_fit(model):
        raise RuntimeError(
            f"{type(model).__name__}: the ridge read-out is "
            + ("not fitted" if not bool(model.head.fitted) else "older than the features")
            + "; call refit_head(loader) with the training data (trainer.test and "
            "trainer.predict with a data module do it)"
        )


class ReadoutRefit(Callback):
    """Refits the closed-form ridge read-out of a ``KernelClassifier`` (DI objective) at
    the end of fit; before validating, testing or predicting, sets the map up from the
    data (an untrained baseline) and refits a read-out that was never fitted or is stale
    (one restored from a checkpoint is trusted as it records)."""

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        model = cast("KernelModule", pl_module)
        if model.refits_head and not trainer.sanity_checking:
            init_map_from_data(model)  # validate() of a model that was never fitted
            if head_needs_fit(model):  # trained since its last fit, or never fitted
                model.refit_head()

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        model = cast("KernelModule", pl_module)
        if model.refits_head:
            model.refit_head()

    def on_test_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_head(cast("KernelModule", pl_module))

    def on_predict_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_head(cast("KernelModule", pl_module))

    @staticmethod
    def _ensure_head(model: KernelModule) -> None:
        init_map_from_data(model)
        if model.readout is None and head_needs_fit(model):
            model.refit_head()
