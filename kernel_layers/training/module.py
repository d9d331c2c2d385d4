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

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch import Callback, LightningModule
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from kernel_layers._validation import (
    check_labels,
    check_nonnegative,
)
from kernel_layers.callbacks.keep_best import KeepBest
from kernel_layers.data.base import ArrayDataModule
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.objectives import DEFAULT_RHO
from kernel_layers.training import checkpoint_hooks, preflight
from kernel_layers.training.approximation import KernelApproximationLogging
from kernel_layers.training.architecture import cli_config, describe_module, module_from
from kernel_layers.training.batch_checks import named_batch_errors
from kernel_layers.training.deferred import CHECK_EVERY, EpochChecks
from kernel_layers.training.di_epoch import EpochDILogging, log_validation_di, register_epoch_sums
from kernel_layers.training.divergence import DivergenceGuard
from kernel_layers.training.group_lasso import log_block_norms, model_block_norms, model_prox_step
from kernel_layers.training.heads import DEFAULT_HEAD_RHO, RidgeHead
from kernel_layers.training.landmarks import init_map_from_data
from kernel_layers.training.losses import refit_ls_readout, training_loss
from kernel_layers.training.optimizer import build_optimizer
from kernel_layers.training.predictor import Predictor, build_predictor
from kernel_layers.training.readout import (
    ReadoutRefit,
    ReadoutTracker,
    check_head_ready,
    head_needs_fit,
)
from kernel_layers.training.readout import refit_head as fit_ridge_head

__all__ = ["OBJECTIVES", "KernelClassifier"]

#: Training objectives: Discriminant Information, the paper's least-squares and
#: cross-entropy baselines.
OBJECTIVES = ("di", "ls", "ce")
#: When the training step's checks are read: at each step, or once per epoch.


class KernelClassifier(LightningModule):
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
    ``train/loss_epoch = -train/di_epoch`` once per epoch), ``lr``, ``val/acc``,
    ``val/di`` (``"di"``: the mean DI of the validation batches larger than the feature
    width, weighted by their rows) and ``test/acc``.

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
        rho: ridge parameter of DI / NysDI and of the LS loss.
        lr: Adam learning rate of the kernel layer (and read-out).
        backbone_lr: learning rate of the backbone (default ``lr``).
        head_rho: ridge penalty of the closed-form read-out.
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
            (:class:`~kernel_layers.callbacks.KeepBest`), not the last; ``None``: the last.

    Raises:
        TypeError: ``kernel_layer`` is not a ``KernelFeatureMap``, or ``backbone`` is
            not an ``nn.Module``.
    """

    landmarks_initialised: Tensor
    di_epoch_sum: Tensor
    di_epoch_rows: Tensor
    di_epoch_index: Tensor
    #: ``di_epoch_index`` as the host knows it (``None``: read it once).
    di_epoch_seen: int | None
    guard: DivergenceGuard
    head_tracker: ReadoutTracker

    def __init__(
        self,
        kernel_layer: KernelFeatureMap,
        *,
        num_classes: int,
        backbone: nn.Module | None = None,
        objective: str = "di",
        rho: float = DEFAULT_RHO,
        lr: float = 1e-3,
        backbone_lr: float | None = None,
        head_rho: float = DEFAULT_HEAD_RHO,
        init_landmarks: bool = True,
        return_scores: bool = False,
        group_lasso: float = 0.0,
        check_every: str = "auto",
        approximation_rows: int = 0,
        keep_best: str | None = None,
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
            keep_best=keep_best,
        )
        preflight.check_scalars(
            owner,
            num_classes=num_classes,
            positive={"rho": rho, "lr": lr, "head_rho": head_rho},
            optional_positive={"backbone_lr": backbone_lr},
            flags={"init_landmarks": init_landmarks, "return_scores": return_scores},
            approximation_rows=approximation_rows,
        )
        self.save_hyperparameters(ignore=["kernel_layer", "backbone"])
        # The architecture as primitives, so that the checkpoint alone rebuilds the model.
        self.hparams["kernel_layer"] = describe_module(kernel_layer, given.get("kernel_layer"))
        self.hparams["backbone"] = (
            None if backbone is None else describe_module(backbone, given.get("backbone"))
        )
        self.kernel_layer = kernel_layer
        self.backbone = backbone
        width = kernel_layer.feature_width
        self.num_features = width
        self.head = RidgeHead(width, num_classes, rho=head_rho)
        trained_readout = objective == "ce" or group_lasso > 0
        self.readout = nn.Linear(width, num_classes) if trained_readout else None
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        # Whether init_map_from_data ran (the name predates the contract: checkpoints).
        self.register_buffer("landmarks_initialised", torch.tensor(False))
        self.guard = DivergenceGuard(owner, kernel_layer.in_features)
        #: DI batches skipped as too small: the epochs' short last batches (one warning).
        self.short_batches_skipped = 0
        self.head_tracker = ReadoutTracker()
        register_epoch_sums(self)  # the current epoch's running DI sums (checkpointed)

    @property
    def stop_reason(self) -> str | None:
        """Why the fit stopped early on a diverging step, or ``None``."""
        return self.guard.stop_reason

    # Lightning declares this through a restricted-classmethod descriptor that mypy cannot
    # match with a classmethod; the call signature is Lightning's.
    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path | IO[bytes],
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> KernelClassifier:
        """Rebuild a model from its checkpoint alone, read with ``weights_only=True`` (a
        local file, an fsspec or an ``http(s)://`` URL:
        :func:`~kernel_layers.training.checkpoint_io.load_checkpoint_file`).

        Keyword arguments override the saved hyper-parameters (``kernel_layer=`` and
        ``backbone=`` modules included, e.g. for a backbone that cannot be rebuilt); a
        module passed must have the settings the checkpoint records.

        Raises:
            ValueError: ``weights_only=False``; the checkpoint cannot be read, holds
                objects other than tensors and primitive types, does not record its
                kernel layer (kernel-layers < 0.2) and no ``kernel_layer=`` is given, or
                records a layer that does not build the tensors it carries; a module
                passed differs from the recorded one; a tensor is missing, of another
                shape, or not finite. Each message names the checkpoint.
        """
        key = cls.CHECKPOINT_HYPER_PARAMS_KEY
        read = checkpoint_hooks.read_for_load(cls.__name__, checkpoint_path, key, kwargs)
        with checkpoint_hooks.missing_tensors_named(cls.__name__, checkpoint_path):
            return super().load_from_checkpoint(
                read, map_location, hparams_file, strict, weights_only=True, **kwargs
            )

    def configure_callbacks(self) -> list[Callback]:
        """The parts of training that are callbacks: read-out refits, the epoch's DI
        (objective ``"di"``), the deferred checks (unless ``check_every="step"``), the
        kernel approximation error (``approximation_rows > 0``) and the best epoch kept
        (``keep_best``)."""
        callbacks: list[Callback] = [ReadoutRefit()]
        if self.hparams["objective"] == "di":
            callbacks.append(EpochDILogging())
        check_every = self.hparams["check_every"]
        if check_every != "step":
            callbacks.insert(0, EpochChecks(check_every))  # read before anything logs
        if self.hparams.get("approximation_rows", 0):
            callbacks.append(KernelApproximationLogging(self.hparams["approximation_rows"]))
        if self.hparams.get("keep_best"):
            callbacks.append(KeepBest(self.hparams["keep_best"]))
        return callbacks

    # ------------------------------------------------------------------ features
    def embed(self, x: Tensor) -> Tensor:
        """Inputs of the kernel map: ``backbone(x)``, or ``x`` flattened to ``[B, D]``."""
        if self.backbone is not None:
            return self.backbone(x)
        return x.flatten(1) if x.ndim > 2 else x

    def forward(self, x: Tensor) -> Tensor:
        """Kernel features ``x (Tensor[B, ...]) -> Tensor[B, J]``."""
        return self.kernel_layer(self.embed(x))

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

    # ------------------------------------------------------------------ training
    @property
    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _di(self, h: Tensor, y: Tensor) -> Tensor:
        """DI of the global batch (all processes' rows under DDP), as the map computes
        it (``NystromLayer``: NysDI from inputs and landmarks)."""
        hp = self.hparams
        return self.kernel_layer.discriminant_information(
            h, y, rho=hp["rho"], num_classes=hp["num_classes"], sync_dist=self._world_size > 1
        )

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        with named_batch_errors("training", batch_idx, self.current_epoch):
            loss = training_loss(self, batch, batch_idx)
        if loss is None:  # skipped (a short last batch under DI) or stopped
            return None
        if not self.guard.check_objective(self, loss, batch_idx, self._world_size):
            return None
        return loss if loss.requires_grad else None

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Adam's step under the divergence guard (:class:`DivergenceGuard`), with the
        group-lasso proximal step after it."""

        prox = partial(model_prox_step, self, optimizer)
        self.guard.step(self, optimizer, optimizer_closure, batch_idx, prox, self._world_size)

    def block_norms(self) -> Tensor:
        """``||W_k||_F`` of the trained read-out over each feature block of the map
        (``Tensor[K]``, in block order; blocks with norm 0 are dropped from the model).
        Raises a ``RuntimeError`` without a trained read-out (``"di"``, plain ``"ls"``)."""
        return model_block_norms(self)

    def on_train_epoch_start(self) -> None:
        groups = [g for opt in self.trainer.optimizers for g in opt.param_groups]
        if groups:
            self.log("lr", float(groups[0]["lr"]), on_step=False, on_epoch=True)

    def on_train_start(self) -> None:
        # The buffer may come from a checkpoint: read it once here, not in a step.
        self.di_epoch_seen = int(self.di_epoch_index)
        init_map_from_data(self)
        if self.hparams["objective"] == "ls" and not bool(self.head.fitted):
            self.refit_head()  # the LS read-out's first closed-form fit
            self.head.reset()

    def on_train_epoch_end(self) -> None:
        log_block_norms(self)
        if self.hparams["objective"] == "ls":
            refit_ls_readout(self)  # the alternating closed-form step of the LS baseline

    # ------------------------------------------------------------------ read-out fits
    @property
    def refits_head(self) -> bool:
        """Whether the read-out is refitted by a pass over the data (DI objective)."""
        return self.hparams["objective"] == "di"

    def refit_head(self, batches: Iterable[Any] | None = None) -> None:
        """Fit the ridge read-out exactly, in one pass over ``batches`` (default: train;
        :func:`~kernel_layers.training.readout.refit_head`).

        Args:
            batches: an iterable of ``(x, y, ...)`` batches, e.g. a ``DataLoader`` over
                the training set.
        """
        fit_ridge_head(self, batches)

    def _head_needs_fit(self) -> bool:
        """Whether the ridge read-out must be (re)fitted before it scores
        (:func:`~kernel_layers.training.readout.head_needs_fit`)."""
        return head_needs_fit(self)

    # ------------------------------------------------------------------ checks, checkpoints
    def check_state_shapes(self, state_dict: dict[str, Any]) -> None:
        """Raise a ``ValueError`` naming every tensor of ``state_dict`` (a checkpoint's)
        whose shape differs from this model's, with both shapes."""
        preflight.check_state_shapes(type(self).__name__, self.state_dict(), state_dict)

    def check_data_sizes(self, datamodule: object) -> None:
        """Raise a ``ValueError`` naming both values when the data and the layers
        disagree on a size (:func:`~kernel_layers.training.preflight.check_data_sizes`)."""
        preflight.check_data_sizes(
            type(self).__name__, self.kernel_layer, self.backbone, datamodule
        )

    def setup(self, stage: str) -> None:
        preflight.at_setup(self, stage)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint_hooks.on_save_checkpoint(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint_hooks.on_load_checkpoint(self, checkpoint)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, batch: Any, batch_idx: int, metric: MulticlassAccuracy, name: str) -> None:
        if self.readout is None and not bool(self.head.fitted):
            return  # sanity check before any fit: nothing to report
        x, y = batch[0], batch[1]
        with named_batch_errors(name.split("/")[0], batch_idx):
            y = check_labels(type(self).__name__, "y", y, self.hparams["num_classes"])
        metric.update(self.scores(self(x)), y)
        self.log(name, metric, on_step=False, on_epoch=True, prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, self.val_acc, "val/acc")
        if self.hparams["objective"] == "di":
            log_validation_di(self, batch)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, self.test_acc, "test/acc")

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor | tuple[Tensor, Tensor]:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        scores = self.scores(self(x))
        classes = scores.argmax(1)
        return (classes, scores) if self.hparams["return_scores"] else classes

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        """Adam over the groups ``"kernel"`` and ``"backbone"``
        (:func:`~kernel_layers.training.optimizer.build_optimizer`)."""
        return build_optimizer(self)
