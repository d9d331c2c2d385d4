"""KernelClassifier: a LightningModule that trains a kernel feature map with DI, LS or CE.

The model talks to its map through the
:class:`~kernel_layers.layers.base.KernelFeatureMap` contract only. The cross-cutting
parts live beside it: :mod:`~kernel_layers.training.divergence` (undo a diverging
step), :mod:`~kernel_layers.training.deferred` (checks read once per epoch),
:mod:`~kernel_layers.training.group_lasso`, :mod:`~kernel_layers.training.readout`
(fits and staleness of the ridge read-out), :mod:`~kernel_layers.training.landmarks`,
:mod:`~kernel_layers.training.di_epoch`, :mod:`~kernel_layers.training.preflight` and
:mod:`~kernel_layers.training.checkpoint_hooks`.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn
from torchmetrics import MeanSquaredError
from torchmetrics.classification import MulticlassAccuracy

from kernel_layers._validation import (
    check_labels,
    check_nonnegative,
)
from kernel_layers.callbacks.untrained_baseline import SQUARED_ERROR_KEY
from kernel_layers.data.base import ArrayDataModule
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.training import preflight
from kernel_layers.training.architecture import cli_config, module_from
from kernel_layers.training.batch_checks import batch_parts, named_batch_errors
from kernel_layers.training.deferred import CHECK_EVERY
from kernel_layers.training.di_epoch import check_validation_di_logged, log_validation_di
from kernel_layers.training.group_lasso import log_block_norms, model_block_norms
from kernel_layers.training.heads import DEFAULT_HEAD_RHO, one_hot_targets
from kernel_layers.training.kernel_module import KernelModule
from kernel_layers.training.losses import refit_ls_readout
from kernel_layers.training.predictor import Predictor, build_predictor
from kernel_layers.training.readout import check_head_ready, training_statistics
from kernel_layers.training.small_data import AUTO

__all__ = ["OBJECTIVES", "KernelClassifier"]

#: Training objectives: Discriminant Information, the paper's least-squares and
#: cross-entropy baselines.
OBJECTIVES = ("di", "ls", "ce")


class KernelClassifier(KernelModule):
    """Train a kernel layer (optionally atop a backbone) and read it out linearly.

    Objectives (the DI paper's Section 5):

    * ``"di"``: maximise the Discriminant Information of each batch's features, as the
      map computes it (NysDI, eq. 10, for a ``NystromLayer``). Accuracy comes from a
      closed-form ridge classifier (:class:`~kernel_layers.training.heads.RidgeHead`)
      fitted in one pass over the training data
      (:class:`~kernel_layers.training.readout.ReadoutRefit`).
    * ``"ls"``: the least-squares baseline, alternating a closed-form ridge read-out with
      gradient steps against its loss; ``"ce"``: a linear softmax read-out trained
      jointly (:mod:`~kernel_layers.training.losses`).

    A backbone (any module mapping inputs to ``[B, in_features]``) is trained end to end
    by the same objective. Without one, inputs ``[B, ...]`` are flattened.

    Logged: ``train/di`` (``"di"``; per step) and ``train/di_epoch``, the mean of the
    epoch's batches, logged once on the epoch's last batch (the quantity
    :class:`~kernel_layers.callbacks.PlateauDecay` and
    :class:`~kernel_layers.callbacks.DISaturationStopping` watch);
    ``train/loss`` (``"ls"``, ``"ce"``: per step and ``train/loss_epoch``; ``"di"``:
    ``train/loss_epoch = -train/di_epoch`` with ``train/di_epoch``), ``lr``, ``val/acc``,
    ``val/di`` (``"di"``: the mean DI of the validation batches larger than the feature
    width, weighted by their rows), ``val/mse`` (with the ridge read-out: ``"di"`` and
    ``"ls"`` without a group lasso; its mean squared error against the ``{0, 1}``
    one-hot targets of the validation rows) and ``test/acc``.

    Checkpoints hold only tensors and primitive types (``weights_only=True`` loads
    them); the epoch's DI sums are buffers, so a fit resumed mid-epoch reports the same
    ``train/di_epoch``; a checkpoint whose shapes differ raises a ``ValueError`` naming
    each tensor and both shapes.

    Args:
        kernel_layer: a :class:`~kernel_layers.layers.base.KernelFeatureMap`
            (``NystromLayer``, ``FourierLayer``, ``FastfoodLayer``, ``EnsembleNystrom``
            or a user-defined subclass).
        num_classes: number of classes ``L``.
        backbone: optional feature extractor before the kernel layer.
        objective: ``"di"``, ``"ls"`` or ``"ce"``.
        rho: ridge parameter of DI / NysDI and of the LS loss; ``None`` (default): chosen
            when a fit starts by :func:`~kernel_layers.selection.rho.rho_for_epoch`: the
            paper's ``1e-4`` from 8 batches per epoch on, ``0.1`` below (on small data the
            paper's ridge lets DI fit the training rows; benchmarks/README.md, the
            small-data suite). :attr:`rho` gives the value in use.
        lr: Adam learning rate of the kernel layer (and read-out).
        backbone_lr: learning rate of the backbone (default ``lr``).
        lr_schedule: ``"constant"`` (default) or ``"cosine"``: every learning rate
            annealed to zero over the Trainer's ``max_epochs`` (``CosineAnnealingLR``,
            stepped each epoch; use it instead of
            :class:`~kernel_layers.callbacks.PlateauDecay`, not with it).
        head_rho: ridge penalty of the closed-form read-out; ``None`` (default): DI's
            ``rho`` with objective ``"di"`` (the read-out is then the ridge fit whose
            error DI measures, ``DI = ||Y_c||^2 - MRLSE``: a smaller penalty would read
            out the directions DI's ridge left out), ``1e-3`` with ``"ls"`` and ``"ce"``.
        init_landmarks: hand the map the training rows it asks for
            (:meth:`~kernel_layers.layers.base.KernelFeatureMap.data_rows_wanted`: a
            ``NystromLayer`` draws its landmarks from them), through the backbone, when
            fit starts, or when testing or predicting a model that was never fitted (the
            paper's protocol, also for the untrained standard-Nystrom baseline); skipped
            once done, e.g. when resuming.
        return_scores: ``predict_step`` returns ``(classes, scores)`` instead of classes.
        group_lasso: ``lam >= 0``; with ``lam > 0`` (objectives ``"ce"`` and ``"ls"``)
            multiple kernel learning: a trained linear read-out with the penalty
            ``lam * sum_k ||W_k||_F`` over the map's feature blocks
            (:mod:`~kernel_layers.training.group_lasso`); :meth:`block_norms` gives the
            norms (also logged as ``block_norm/<k>`` and ``train/active_blocks``).
        check_every: when the checks of a training step (inputs, labels,
            factorisations, objective, divergence) are read. ``"step"``: each reads its
            device value at once (a host synchronisation on a GPU) and a failure is
            reported at its batch; ``"epoch"``: recorded on the device and read once at
            the epoch's end (:class:`~kernel_layers.training.deferred.EpochChecks`), the
            epoch's start restored on a failure; ``"auto"`` (default): ``"step"`` on the
            CPU, ``"epoch"`` on any other device.
        approximation_rows: log the kernel approximation error on this many validation
            rows (``0``: not logged).
        keep_best: ``"val/acc"`` or ``"val/di"``: the model handed back when ``fit``
            ends is the one of the best epoch on that validation metric
            (:class:`~kernel_layers.callbacks.KeepBest`), not the last; ``None``: the last;
            ``"auto"`` (default): ``"val/acc"`` when an epoch has fewer than
            ``SMALL_DATA_BATCHES`` (8) batches and a :mod:`kernel_layers.data` module
            has validation rows (with a ridge read-out), else the last, silently
            (:mod:`~kernel_layers.training.small_data`).
            With ``"val/acc"`` and a ridge read-out (``"di"``, ``"ls"``), epochs of equal
            accuracy (it moves in steps of one validation row) are told apart by
            ``val/mse``, the lower kept, as the scikit-learn estimators do. The untrained
            map is a candidate too with a ridge read-out and a :mod:`kernel_layers.data`
            module (with plain data loaders only the trained epochs are, with a warning).
            ``"val/di"`` needs a validation batch of more rows than the feature width
            (a ``ValueError`` at the first validation otherwise).

    Raises:
        TypeError: ``kernel_layer`` is not a ``KernelFeatureMap``, or ``backbone`` is
            not an ``nn.Module``.
    """

    KEEP_BEST_MONITOR = "val/acc"

    def __init__(
        self,
        kernel_layer: KernelFeatureMap,
        *,
        num_classes: int,
        backbone: nn.Module | None = None,
        objective: str = "di",
        rho: float | None = None,
        lr: float = 1e-3,
        backbone_lr: float | None = None,
        lr_schedule: str = "constant",
        head_rho: float | None = None,
        init_landmarks: bool = True,
        return_scores: bool = False,
        group_lasso: float = 0.0,
        check_every: str = "auto",
        approximation_rows: int = 0,
        keep_best: str | None = AUTO,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        given = cli_config()  # or, below, a checkpoint's records (load_from_checkpoint)
        kernel_layer = module_from(owner, "kernel_layer", kernel_layer, given)
        backbone = module_from(owner, "backbone", backbone, given)
        group_lasso = check_nonnegative(owner, "group_lasso", group_lasso)
        preflight.check_arguments(
            owner,
            kernel_layer,
            backbone,
            objective=objective,
            group_lasso=group_lasso,
            objectives=OBJECTIVES,
            check_every=check_every,
            check_every_choices=CHECK_EVERY,
            lr_schedule=lr_schedule,
            keep_best=keep_best,
        )
        # The checked values, Python numbers, are the ones recorded below.
        num_classes, lr, backbone_lr, rho, head_rho, approximation_rows = preflight.check_scalars(
            owner,
            outputs=("num_classes", num_classes),
            lr=lr,
            backbone_lr=backbone_lr,
            rho=rho,
            head_rho=head_rho,
            approximation_rows=approximation_rows,
            flags={"init_landmarks": init_landmarks, "return_scores": return_scores},
        )
        self.save_hyperparameters(ignore=["kernel_layer", "backbone"])
        self._build(
            kernel_layer,
            backbone,
            given,
            num_outputs=num_classes,
            head_rho=DEFAULT_HEAD_RHO if head_rho is None else head_rho,
            trained_readout=objective == "ce" or group_lasso > 0,
        )
        self.sync_head_rho()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_mse = MeanSquaredError()
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        #: Whether this validation logged ``val/di``, and the most rows of a batch it left
        #: out (``keep_best="val/di"`` needs one logged).
        self._val_di_logged, self._val_di_left_out = False, 0

    @property
    def head_follows_rho(self) -> bool:
        """Whether the ridge read-out's penalty is DI's ``rho``: ``head_rho=None`` with
        the DI objective."""
        return self.hparams["head_rho"] is None and self.objective == "di"

    def scores(self, features: Tensor) -> Tensor:
        """Class scores ``[B, L]`` of the read-out on ``features (Tensor[B, J])``.

        Raises:
            RuntimeError: the ridge read-out was never fitted, or was fitted on other
                features than the current ones (call :meth:`refit_head`).
        """
        if self.readout is not None:
            return self.readout(features)
        check_head_ready(self)
        return self.head(features)

    def predictor(
        self, datamodule: ArrayDataModule | None = None, *, dtype: torch.dtype | None = None
    ) -> Predictor:
        """The trained model as one frozen inference module ``x -> (classes, scores)``
        (:func:`~kernel_layers.training.predictor.build_predictor`).

        Args:
            datamodule: an ``ArrayDataModule``: the predictor then takes raw rows (its
                scaling first) and a stale ridge read-out is refitted on its training
                split; ``None``: inputs scaled as in training.
            dtype: ``torch.float64`` evaluates the copy in float64; ``None``: as the model is.
        """
        return build_predictor(self, datamodule, dtype)

    def block_norms(self) -> Tensor:
        """``||W_k||_F`` of the trained read-out over each feature block of the map
        (``Tensor[K]``, in block order; blocks with norm 0 are dropped from the model).
        Raises a ``RuntimeError`` without a trained read-out (``"di"``, plain ``"ls"``)."""
        return model_block_norms(self)

    def check_targets(self, y: Tensor) -> Tensor:
        """Integer labels ``Tensor[B]`` in ``[0, num_classes)``.

        Raises:
            TypeError, ValueError: labels that are not integers in range.
        """
        return check_labels(type(self).__name__, "y", y, self.hparams["num_classes"])

    def on_train_start(self) -> None:
        super().on_train_start()
        if self.hparams["objective"] == "ls" and not bool(self.head.fitted):
            # the LS read-out's first closed-form fit, on every process's rows under DDP
            self.head.set_statistics(training_statistics(self))
            refit_ls_readout(self)

    def on_train_epoch_end(self) -> None:
        log_block_norms(self)
        if self.hparams["objective"] == "ls":
            refit_ls_readout(self)  # the alternating closed-form step of the LS baseline

    # ------------------------------------------------------------------ evaluation
    def _evaluate(
        self, batch: Any, batch_idx: int, metric: MulticlassAccuracy, name: str
    ) -> tuple[Tensor, Tensor] | None:
        """Update and log ``metric`` on a batch; its scores ``[B, L]`` and checked labels
        ``[B]`` (``None`` before the read-out's first fit; the labels are checked even
        then)."""
        x, y = batch_parts(type(self).__name__, batch, 2)
        with named_batch_errors(name.split("/")[0], batch_idx):
            y = self.check_targets(y)
        if self.readout is None and not bool(self.head.fitted):
            return None  # sanity check before any fit: nothing to report
        scores = self.scores(self(x))
        metric.update(scores, y)
        self.log(name, metric, on_step=False, on_epoch=True, prog_bar=True)
        return scores, y

    def tie_break(self, monitor: str) -> str | None:
        """``val/mse`` for ``keep_best="val/acc"`` with a ridge read-out, else ``None``."""
        return SQUARED_ERROR_KEY if monitor == "val/acc" and self.readout is None else None

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        evaluated = self._evaluate(batch, batch_idx, self.val_acc, "val/acc")
        if evaluated is not None and self.readout is None:  # the ridge read-out's error
            scores, y = evaluated
            self.val_mse.update(scores, one_hot_targets(y, scores.shape[1], scores.dtype))
            self.log(SQUARED_ERROR_KEY, self.val_mse, on_step=False, on_epoch=True)
        if self.hparams["objective"] == "di":
            left_out = log_validation_di(self, batch)
            self._val_di_left_out = max(self._val_di_left_out, left_out)
            self._val_di_logged = self._val_di_logged or not left_out

    def on_validation_epoch_start(self) -> None:
        self._val_di_logged, self._val_di_left_out = False, 0

    def on_validation_epoch_end(self) -> None:
        if self.hparams["objective"] == "di" and self.trainer.state.fn == TrainerFn.FITTING:
            check_validation_di_logged(self, self._val_di_logged, self._val_di_left_out)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, self.test_acc, "test/acc")

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor | tuple[Tensor, Tensor]:
        (x,) = batch_parts(type(self).__name__, batch, 1)
        scores = self.scores(self(x))
        classes = scores.argmax(1)
        return (classes, scores) if self.hparams["return_scores"] else classes
