"""KernelModule: what the kernel LightningModules share (classifier and regressor).

A kernel feature map (optionally atop a backbone) trained by the map's Discriminant
Information of each batch against a target matrix, a closed-form ridge read-out
(:class:`~kernel_layers.training.heads.RidgeHead`) refitted from the training data
(:class:`~kernel_layers.training.readout.ReadoutRefit`), the divergence guard, the
epoch's DI, the checks at setup and the self-describing, ``weights_only`` checkpoints.
:class:`~kernel_layers.training.module.KernelClassifier` adds labels, the LS and CE
baselines and accuracy; :class:`~kernel_layers.training.regression.KernelRegressor`
adds float targets, R² and RMSE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO, Any, ClassVar

import torch
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from typing_extensions import Self

from kernel_layers.callbacks.keep_best import KeepBest, scores_untrained
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.objectives import DEFAULT_RHO
from kernel_layers.selection.rho import rho_for_epoch
from kernel_layers.training import checkpoint_hooks, preflight
from kernel_layers.training.approximation import KernelApproximationLogging
from kernel_layers.training.architecture import describe_module, floating_dtype
from kernel_layers.training.batch_checks import named_batch_errors
from kernel_layers.training.deferred import EpochChecks
from kernel_layers.training.di_epoch import EpochDILogging, register_epoch_sums
from kernel_layers.training.divergence import DivergenceGuard
from kernel_layers.training.group_lasso import model_prox_step
from kernel_layers.training.heads import GCVRidgeHead, RidgeHead
from kernel_layers.training.input_scale import ScaledInputsCheck
from kernel_layers.training.landmarks import init_map_from_data
from kernel_layers.training.losses import training_loss
from kernel_layers.training.optimizer import (
    build_optimizer,
    build_schedule,
    warn_plateau_callbacks,
)
from kernel_layers.training.readout import (
    ReadoutRefit,
    ReadoutTracker,
    adopt_loaded_readout,
)
from kernel_layers.training.readout import refit_head as fit_ridge_head
from kernel_layers.training.small_data import AUTO, auto_keep_best

__all__ = ["KernelModule"]

#: Marks the callbacks ``configure_callbacks`` made, so that the next stage's (``test``
#: after ``fit``) replace them without Lightning's "will override existing callbacks
#: passed to Trainer", which is meant for a user's own.
_MODULE_OWNED = "_kernel_layers_module_owned"


class KernelModule(LightningModule):
    """Base of :class:`~kernel_layers.KernelClassifier` and
    :class:`~kernel_layers.KernelRegressor`; not used on its own.

    A subclass's ``__init__`` checks its arguments, calls ``save_hyperparameters``
    (``rho``, ``lr``, ``backbone_lr``, ``lr_schedule``, ``init_landmarks``,
    ``check_every`` and ``approximation_rows`` among them), then :meth:`_build` with the
    read-out's width, and implements :meth:`check_targets` (and :meth:`training_targets`
    when the objective takes the targets in another form).
    """

    kernel_layer: KernelFeatureMap
    backbone: nn.Module | None
    head: RidgeHead
    readout: nn.Linear | None
    num_features: int
    landmarks_initialised: Tensor
    di_epoch_sum: Tensor
    di_epoch_rows: Tensor
    di_epoch_index: Tensor
    #: ``di_epoch_index`` as the host knows it (``None``: read it once).
    di_epoch_seen: int | None
    guard: DivergenceGuard
    head_tracker: ReadoutTracker
    #: The validation metric ``keep_best="auto"`` keeps the best epoch of.
    KEEP_BEST_MONITOR: ClassVar[str]

    def _build(
        self,
        kernel_layer: KernelFeatureMap,
        backbone: nn.Module | None,
        given: dict[str, Any],
        *,
        num_outputs: int,
        head_rho: float | None,
        trained_readout: bool = False,
    ) -> None:
        """The shared modules and buffers: the map, the backbone, the ridge read-out of
        ``num_outputs`` outputs (penalty ``head_rho``; ``None``: chosen by generalised
        cross-validation at each fit, :class:`~kernel_layers.training.heads.GCVRidgeHead`)
        and a trained linear one when ``trained_readout``, the
        divergence guard and the epoch's DI sums; the architecture recorded as primitives
        in the hyper-parameters, so that the checkpoint alone rebuilds the model."""
        owner = type(self).__name__
        architecture = {
            "kernel_layer": describe_module(kernel_layer, given.get("kernel_layer")),
            "backbone": (
                None if backbone is None else describe_module(backbone, given.get("backbone"))
            ),
        }
        # Saved again with them: the loggers write the initial hyper-parameters
        # (hparams.yaml, which load_from_checkpoint(hparams_file=...) reads back).
        self.save_hyperparameters({**self.hparams, **architecture})
        self.kernel_layer = kernel_layer
        self.backbone = backbone
        width = kernel_layer.feature_width
        self.num_features = width
        self.head = (
            GCVRidgeHead(width, num_outputs)
            if head_rho is None
            else RidgeHead(width, num_outputs, rho=head_rho)
        )
        self.readout = nn.Linear(width, num_outputs) if trained_readout else None
        wide = floating_dtype(kernel_layer) == torch.float64  # a float64 map's features
        if wide:  # are read out in float64 too, not rounded to the default dtype
            self.head.double()
            if self.readout is not None:
                self.readout.double()
        # Whether init_map_from_data ran (the name predates the contract: checkpoints).
        self.register_buffer("landmarks_initialised", torch.tensor(False))
        self.guard = DivergenceGuard(owner, kernel_layer.in_features)
        self._lr_logged_epoch = -1  # the epoch whose ``lr`` was logged in this run
        #: DI batches skipped as too small: the epochs' short last batches (one warning).
        self.short_batches_skipped = 0
        self.head_tracker = ReadoutTracker()
        #: Whether the checkpoint being loaded records a current read-out.
        self.readout_loaded_current = False
        self.register_load_state_dict_post_hook(adopt_loaded_readout)
        register_epoch_sums(self)  # the current epoch's running DI sums (checkpointed)
        #: The ``rho`` a fit (or the checkpoint this model was restored from) chose with
        #: ``rho=None``; ``None`` until one is chosen.
        self._chosen_rho: float | None = None
        #: The :mod:`kernel_layers.data` module whose scaled rows the last fit read (its
        #: class name; :class:`~kernel_layers.training.input_scale.ScaledInputsCheck`).
        self.scaled_by: str | None = None

    @property
    def objective(self) -> str:
        """The training objective (``"di"`` unless the subclass offers others)."""
        return str(self.hparams.get("objective", "di"))

    def check_targets(self, y: Tensor) -> Tensor:
        """A batch's targets ``y`` checked, as the ridge read-out takes them: labels
        ``Tensor[B]`` or a float matrix ``Tensor[B, L]``.

        Raises:
            TypeError, ValueError: targets of the wrong kind, shape or range (named).
        """
        raise NotImplementedError

    def training_targets(self, y: Tensor) -> Tensor:
        """A training batch's targets ``y`` checked, in the form the objective takes:
        labels ``Tensor[B]`` or a float matrix ``Tensor[B, L]`` (by default as
        :meth:`check_targets` gives them).

        Raises:
            TypeError, ValueError: targets the model cannot train on.
        """
        return self.check_targets(y)

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
    ) -> Self:
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
        read = checkpoint_hooks.read_for_load(cls.__name__, checkpoint_path, key, kwargs, model=cls)
        with checkpoint_hooks.missing_tensors_named(cls.__name__, checkpoint_path):
            loaded = super().load_from_checkpoint(
                read, map_location, hparams_file, strict, weights_only=True, **kwargs
            )
        assert isinstance(loaded, cls)
        return loaded

    def configure_callbacks(self) -> list[Callback]:
        """The parts of training that are callbacks: read-out refits, the epoch's DI
        (objective ``"di"``), the deferred checks (unless ``check_every="step"``), the
        kernel approximation error (``approximation_rows > 0``) and the best epoch kept
        (``keep_best``)."""
        if self._trainer is not None:  # those of an earlier stage give way, unannounced
            earlier = getattr(self._trainer, "callbacks", [])
            kept = [c for c in earlier if not getattr(c, _MODULE_OWNED, False)]
            self._trainer.callbacks = kept  # type: ignore[attr-defined]  # a list property
        callbacks: list[Callback] = []
        check_every = self.hparams["check_every"]
        if check_every != "step":
            callbacks.append(EpochChecks(check_every))  # read before anything logs
        keep_best = self.hparams.get("keep_best")  # restores it before the refit below
        if keep_best == AUTO:
            callbacks.extend(auto_keep_best(self))
        elif keep_best:
            callbacks.append(self._keep_best(keep_best))
        callbacks.append(ReadoutRefit())
        callbacks.append(ScaledInputsCheck())
        if self.objective == "di":
            callbacks.append(EpochDILogging())
        if self.hparams.get("approximation_rows", 0):
            callbacks.append(KernelApproximationLogging(self.hparams["approximation_rows"]))
        for callback in callbacks:
            setattr(callback, _MODULE_OWNED, True)
        return callbacks

    def _keep_best(self, monitor: str) -> KeepBest:
        """``KeepBest`` of ``keep_best``; the untrained map a candidate when the data
        module can score it (a :mod:`kernel_layers.data` module), else with a warning."""
        datamodule = getattr(self._trainer, "datamodule", None)
        # no trainer: no data to judge yet
        untrained = self._trainer is None or scores_untrained(datamodule)
        if not untrained and self.trainer.state.fn == TrainerFn.FITTING:
            rank_zero_warn(
                f"{type(self).__name__}: keep_best={monitor!r} keeps the best trained epoch "
                "only: the untrained map is a candidate with a kernel_layers data module "
                "(train_eval_dataloader and val_dataloader), got "
                f"{type(datamodule).__name__}",
                category=UserWarning,
            )
        return KeepBest(monitor, tie_break=self.tie_break(monitor), include_untrained=untrained)

    def tie_break(self, monitor: str) -> str | None:
        """The validation metric (lower is better) that decides between epochs equal on
        ``monitor`` under ``keep_best``; ``None`` (default): the earlier is kept."""
        return None

    # ------------------------------------------------------------------ features
    def embed(self, x: Tensor) -> Tensor:
        """Inputs of the kernel map: ``backbone(x)``, or ``x`` flattened to ``[B, D]``;
        float32 rows cast up (exactly) to a float64 module's dtype, so that a model
        trained or loaded in float64 takes the rows a default Trainer serves."""
        if self.backbone is not None:
            return _cast_up(self.backbone(_cast_up(x, self.backbone)), self.kernel_layer)
        return _cast_up(x.flatten(1) if x.ndim > 2 else x, self.kernel_layer)

    def forward(self, x: Tensor) -> Tensor:
        """Kernel features ``x (Tensor[B, ...]) -> Tensor[B, J]``."""
        return self.kernel_layer(self.embed(x))

    # ------------------------------------------------------------------ training
    @property
    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _di(self, h: Tensor, y: Tensor) -> Tensor:
        """DI of the global batch (all processes' rows under DDP), as the map computes
        it (``NystromLayer``: NysDI from inputs and landmarks), against labels or a float
        target matrix ``y``."""
        hp = self.hparams
        return self.kernel_layer.discriminant_information(
            h,
            y,
            rho=self.rho,
            num_classes=hp.get("num_classes"),
            sync_dist=self._world_size > 1,
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

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # ``lr`` once per epoch, at its first batch of this run: an epoch resumed mid-way
        # runs no ``on_train_epoch_start``.
        if self._lr_logged_epoch == self.current_epoch:
            return
        self._lr_logged_epoch = self.current_epoch
        groups = [g for opt in self.trainer.optimizers for g in opt.param_groups]
        if groups:
            self.log("lr", float(groups[0]["lr"]), on_step=False, on_epoch=True)

    @property
    def rho(self) -> float:
        """DI's ridge parameter in use: ``rho`` as given, or (``rho=None``) the one
        :meth:`choose_rho` chose when a fit started (the paper's ``1e-4`` before any
        fit)."""
        chosen = self.hparams["rho"] if self.hparams["rho"] is not None else self._chosen_rho
        return float(chosen) if chosen is not None else DEFAULT_RHO

    def choose_rho(self, batches: float) -> float:
        """DI's ridge parameter for a fit of ``batches`` batches per epoch when ``rho``
        is not given (called when the fit starts, the map set up from the data):
        :func:`~kernel_layers.selection.rho.rho_for_epoch`."""
        return rho_for_epoch(batches)

    def on_train_start(self) -> None:
        self._lr_logged_epoch = -1
        if self.trainer.ckpt_path is None:  # a new fit: an earlier fit's sums are not its own
            self.di_epoch_index.fill_(-1)
        # The buffer may come from a checkpoint: read it once here, not in a step.
        self.di_epoch_seen = int(self.di_epoch_index)
        init_map_from_data(self)
        if self.hparams["rho"] is None:
            self._chosen_rho = self.choose_rho(max(float(self.trainer.num_training_batches), 1.0))
        self.sync_head_rho()

    @property
    def head_follows_rho(self) -> bool:
        """Whether the ridge read-out's penalty is DI's ``rho`` (``False`` here; a
        subclass says when)."""
        return False

    def sync_head_rho(self) -> None:
        """Give the ridge read-out DI's ``rho`` as its penalty when it follows it
        (``head_follows_rho``): the read-out is then the ridge fit whose error DI
        measures (``DI = ||Y_c||^2 - MRLSE``)."""
        if self.head_follows_rho:
            self.head.rho = self.rho

    # ------------------------------------------------------------------ read-out fits
    @property
    def refits_head(self) -> bool:
        """Whether the read-out is refitted by a pass over the data (DI objective)."""
        return self.objective == "di"

    def refit_head(self, batches: Iterable[Any] | None = None) -> None:
        """Fit the ridge read-out exactly, in one pass over ``batches`` (default: train;
        :func:`~kernel_layers.training.readout.refit_head`).

        Args:
            batches: an iterable of ``(x, y, ...)`` batches, e.g. a ``DataLoader`` over
                the training set.
        """
        fit_ridge_head(self, batches)

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

    def configure_optimizers(self) -> Any:
        """Adam over the groups ``"kernel"`` and ``"backbone"``
        (:func:`~kernel_layers.training.optimizer.build_optimizer`), with the epoch-wise
        scheduler of ``lr_schedule``
        (:func:`~kernel_layers.training.optimizer.build_schedule`) when it is not
        ``"constant"``."""
        optimizer = build_optimizer(self)
        if optimizer is None:
            return None
        owner = type(self).__name__
        # Checkpoints of releases before lr_schedule do not record it: a constant rate.
        schedule = self.hparams.get("lr_schedule", "constant")
        max_epochs = self.trainer.max_epochs if self._trainer is not None else None
        scheduler = build_schedule(owner, optimizer, schedule, max_epochs)
        if scheduler is None:
            return optimizer
        # A scheduler implies a trainer (build_schedule needs its max_epochs).
        # Trainer.callbacks is set in its __init__, which mypy does not see typed.
        warn_plateau_callbacks(owner, getattr(self.trainer, "callbacks", []))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"},
        }


def _cast_up(x: Tensor, module: nn.Module) -> Tensor:
    """``x`` in float64 where it is float32 and ``module`` is float64
    (:func:`~kernel_layers.training.architecture.floating_dtype`; a lossless cast), else
    ``x`` as it is."""
    if x.dtype != torch.float32:
        return x
    return x.double() if floating_dtype(module) == torch.float64 else x
