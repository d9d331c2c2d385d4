"""KernelClassifier: a LightningModule that trains kernel layers with DI, LS or CE."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from kernel_layers._validation import (
    check_bool,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
)
from kernel_layers.data.base import ArrayDataModule
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.numerics.linalg import distance_limit
from kernel_layers.objectives import (
    DEFAULT_RHO,
    DIStatistics,
    discriminant_information,
    least_squares_loss,
    merge_statistics,
)
from kernel_layers.training.architecture import build_module, describe_module, is_spec
from kernel_layers.training.checkpoint_io import AtomicCheckpointIO
from kernel_layers.training.deferred import DeferredChecks, deferred_checks
from kernel_layers.training.heads import DEFAULT_HEAD_RHO, RidgeHead
from kernel_layers.training.predictor import Predictor

__all__ = ["OBJECTIVES", "KernelClassifier"]


def _cli_config() -> dict[str, Any]:
    """The ``class_path`` / ``init_args`` configs LightningCLI is instantiating this
    model from (empty outside the CLI): they rebuild modules that have no
    ``get_config()``, such as a torchvision backbone."""
    try:  # Lightning's context of CLI-given hyper-parameters (no public accessor)
        from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters
    except ImportError:  # pragma: no cover - another Lightning version
        return {}
    given = _given_hyperparameters.get()
    return dict(given) if isinstance(given, Mapping) else {}


#: Training objectives: Discriminant Information, the paper's least-squares and
#: cross-entropy baselines.
OBJECTIVES = ("di", "ls", "ce")
#: When the training step's checks are read: at each step, or once per epoch.
CHECK_EVERY = ("step", "epoch")

#: Checkpoint key: whether the saved ridge read-out was fitted on the saved features.
HEAD_CURRENT_KEY = "kernel_layers_head_current"


class KernelClassifier(LightningModule):
    """Train a kernel layer (optionally atop a backbone) and read it out linearly.

    Objectives (the DI paper's Section 5):

    * ``"di"``: maximise the Discriminant Information of each batch's features (NysDI,
      eq. 10, for a :class:`~kernel_layers.NystromLayer`; DI of the features, RFDI, for
      any other layer). No read-out is trained by gradient; accuracy comes from a
      closed-form ridge classifier (:class:`~kernel_layers.training.heads.RidgeHead`) fitted
      exactly in one streamed pass over the training data whenever validation runs, at
      the end of fit, and before testing or predicting if it was never fitted.
    * ``"ls"``: the least-squares baseline: a ridge read-out (0/1 one-hot targets)
      trained jointly, alternating a closed-form ridge solve (on the statistics of the
      previous epoch's features, merged over processes) with gradient steps on the
      kernel parameters against the ridge loss; that read-out is also the one evaluated.
    * ``"ce"``: a linear softmax read-out trained jointly with cross-entropy.

    A backbone (any module mapping inputs to ``[B, in_features]``) is trained end to end
    by the same objective. Without one, inputs ``[B, ...]`` are flattened.

    Logged: ``train/di`` (``"di"``; per step) and ``train/di_epoch``, the mean of the
    epoch's batches, logged once on the epoch's last batch (the quantity
    :class:`~kernel_layers.callbacks.PlateauDecay` and
    :class:`~kernel_layers.callbacks.DISaturationStopping` watch);
    ``train/loss`` (``"ls"``, ``"ce"``: per step and ``train/loss_epoch``; ``"di"``:
    ``train/loss_epoch = -train/di_epoch`` once per epoch), ``lr``, ``val/acc`` and
    ``test/acc``.

    Checkpoints (``ModelCheckpoint``) hold only tensors and primitive types, so they load
    with ``torch.load(path, weights_only=True)`` and ``trainer.fit(..., weights_only=True)``.
    The running sums of the epoch's DI are buffers, so a fit killed mid-epoch and resumed
    with ``ckpt_path="last"`` reports the same ``train/di_epoch`` (Lightning's own epoch
    aggregates restart from zero on resume). Loading a checkpoint into a model whose
    layers have other shapes raises a ``ValueError`` naming each parameter and both shapes.

    Args:
        kernel_layer: a module with ``out_features`` (``NystromLayer``, ``FourierLayer``).
        num_classes: number of classes ``L``.
        backbone: optional feature extractor before the kernel layer.
        objective: ``"di"``, ``"ls"`` or ``"ce"``.
        rho: ridge parameter of DI / NysDI and of the LS loss.
        lr: Adam learning rate of the kernel layer (and read-out).
        backbone_lr: learning rate of the backbone (default ``lr``).
        head_rho: ridge penalty of the closed-form read-out.
        init_landmarks: initialise a ``NystromLayer``'s landmarks from a random subset of
            the training data (through the backbone) when fit starts, or when testing or
            predicting a model that was never fitted (the paper's protocol, also for the
            untrained standard-Nystrom baseline); skipped once done, e.g. when resuming.
        return_scores: ``predict_step`` returns ``(classes, scores)`` instead of classes.
        group_lasso: ``lam >= 0``; with ``lam > 0`` (objectives ``"ce"`` and ``"ls"``)
            multiple kernel learning: the linear read-out is trained by gradient with the
            group-lasso penalty ``lam * sum_k ||W_k||_F`` over the kernel layer's feature
            blocks (``FourierLayer(..., blocks=..., separable=True)``: one block per
            channel), applied as an exact proximal step after each optimiser step, so
            channels whose block reaches zero are dropped; :meth:`block_norms` gives the
            norms (also logged as ``block_norm/<k>`` and ``train/active_blocks``).
        check_every: ``"step"`` (default) or ``"epoch"``. The training step checks its
            inputs, labels, factorisations and objective, and guards against divergence;
            each check reads a device value, which on a GPU waits for the queued work (a
            host synchronisation). With ``"epoch"`` the checks are recorded on the device
            (:mod:`kernel_layers.training.deferred`) and read once at the epoch's end: a
            failure then raises (bad inputs) or stops the fit (divergence) with the
            parameters from the epoch's start, not those from before the failing step,
            and a failed Cholesky factorisation is reported instead of retried with a
            jitter. For GPU runs; on a CPU the reads cost next to nothing.
    """

    landmarks_initialised: Tensor
    di_epoch_sum: Tensor
    di_epoch_rows: Tensor
    di_epoch_index: Tensor

    def __init__(
        self,
        kernel_layer: nn.Module,
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
        check_every: str = "step",
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        given = _cli_config()
        if is_spec(kernel_layer):  # a checkpoint's record (load_from_checkpoint)
            given.setdefault("kernel_layer", kernel_layer)
            kernel_layer = build_module(
                owner, "kernel_layer", cast(Mapping[str, Any], kernel_layer)
            )
        if is_spec(backbone):
            given.setdefault("backbone", backbone)
            backbone = build_module(owner, "backbone", cast(Mapping[str, Any], backbone))
        check_choice(owner, "objective", objective, OBJECTIVES)
        check_choice(owner, "check_every", check_every, CHECK_EVERY)
        # The features' width: a layer with truncation says so (NystromLayer(rank=k)).
        width = getattr(kernel_layer, "feature_width", getattr(kernel_layer, "out_features", None))
        if not isinstance(kernel_layer, nn.Module) or not isinstance(width, int):
            raise TypeError(
                f"{owner}: argument 'kernel_layer' must be an nn.Module with an int "
                f"'out_features', got {type(kernel_layer).__name__}"
            )
        check_int(owner, "num_classes", num_classes, minimum=2)
        check_positive(owner, "rho", rho)
        check_positive(owner, "lr", lr)
        check_positive(owner, "head_rho", head_rho)
        group_lasso = check_nonnegative(owner, "group_lasso", group_lasso)
        blocks = getattr(kernel_layer, "feature_blocks", None)
        if group_lasso > 0 and objective not in ("ce", "ls"):
            raise ValueError(
                f"{owner}: argument 'group_lasso' needs objective 'ce' or 'ls' (a trained "
                f"read-out to sparsify), got group_lasso={group_lasso} with {objective!r}"
            )
        if group_lasso > 0 and (blocks is None or len(blocks) < 2):
            raise ValueError(
                f"{owner}: argument 'group_lasso' needs a kernel layer with feature blocks, "
                "e.g. FourierLayer(..., ard=True, blocks=..., separable=True), got "
                f"{type(kernel_layer).__name__} with "
                f"{0 if blocks is None else len(blocks)} block(s)"
            )
        if backbone_lr is not None:
            check_positive(owner, "backbone_lr", backbone_lr)
        if backbone is not None and not isinstance(backbone, nn.Module):
            raise TypeError(
                f"{owner}: argument 'backbone' must be an nn.Module or None, "
                f"got {type(backbone).__name__}"
            )
        check_bool(owner, "init_landmarks", init_landmarks)
        check_bool(owner, "return_scores", return_scores)
        self.save_hyperparameters(ignore=["kernel_layer", "backbone"])
        # The architecture as primitives, so that the checkpoint alone rebuilds the model.
        self.hparams["kernel_layer"] = describe_module(kernel_layer, given.get("kernel_layer"))
        self.hparams["backbone"] = (
            None if backbone is None else describe_module(backbone, given.get("backbone"))
        )
        self.kernel_layer = kernel_layer
        self.backbone = backbone
        self.num_features = width
        self.head = RidgeHead(width, num_classes, rho=head_rho)
        trained_readout = objective == "ce" or group_lasso > 0
        self.readout = nn.Linear(width, num_classes) if trained_readout else None
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.register_buffer("landmarks_initialised", torch.tensor(False))
        #: :meth:`_feature_state` when the ridge read-out was last fitted (this process).
        self._head_state: tuple[tuple[int, int], ...] | None = None
        #: Why the fit stopped early on a diverging step, or ``None``.
        self.stop_reason: str | None = None
        #: The parameters and their values before the last optimiser step.
        self._before_step: list[tuple[Tensor, Tensor]] | None = None
        # Running DI sums of the current epoch (sum of DI x rows, rows, epoch): in the
        # checkpoint, so a mid-epoch resume logs the exact epoch mean.
        self.register_buffer("di_epoch_sum", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("di_epoch_rows", torch.tensor(0, dtype=torch.long))
        self.register_buffer("di_epoch_index", torch.tensor(-1, dtype=torch.long))
        #: ``di_epoch_index`` as the host knows it (``None``: read it once).
        self._di_epoch_seen: int | None = None
        #: The checks of the current epoch with ``check_every="epoch"``.
        self._deferred: DeferredChecks | None = None

    # Lightning declares this through a restricted-classmethod descriptor that mypy cannot
    # match with a classmethod; the call signature is Lightning's.
    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> KernelClassifier:
        """Rebuild a model from its checkpoint alone (layer, backbone, objective, read-out).

        Keyword arguments override the saved hyper-parameters (``kernel_layer=`` and
        ``backbone=`` modules included, e.g. for a backbone that was passed as a live
        object and cannot be rebuilt). Checkpoints are read with ``weights_only=True``.

        Raises:
            ValueError: the checkpoint was written before checkpoints recorded the layer
                (kernel-layers < 0.2) and no ``kernel_layer=`` is given, or a recorded
                module cannot be rebuilt (the message names the argument to pass).
        """
        if "kernel_layer" not in kwargs:
            checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
            saved = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY, {})
            if not is_spec(saved.get("kernel_layer")):
                raise ValueError(
                    f"{cls.__name__}: argument 'kernel_layer' must be passed to "
                    f"load_from_checkpoint for {str(checkpoint_path)!r}: the checkpoint "
                    "does not record its kernel layer (written by kernel-layers < 0.2); "
                    "pass kernel_layer=NystromLayer(...) / FourierLayer(...) with the "
                    "settings it was trained with (and backbone=... if it had one)"
                )
        kwargs.setdefault("weights_only", True)
        return super().load_from_checkpoint(
            checkpoint_path, map_location, hparams_file, strict, **kwargs
        )

    # ------------------------------------------------------------------ features
    def embed(self, x: Tensor) -> Tensor:
        """Inputs of the kernel layer: ``backbone(x)``, or ``x`` flattened to ``[B, D]``."""
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
        if self._head_needs_fit():
            raise RuntimeError(
                f"{type(self).__name__}: the ridge read-out is "
                + ("not fitted" if not bool(self.head.fitted) else "older than the features")
                + "; call refit_head(loader) with the training data (trainer.test and "
                "trainer.predict with a data module do it)"
            )
        return self.head(features)

    def predictor(
        self, datamodule: ArrayDataModule | None = None, *, dtype: torch.dtype | None = None
    ) -> Predictor:
        """The trained model as one inference module ``x -> (classes, scores)``.

        A frozen copy (eval mode, no gradients) of the backbone, the kernel layer and the
        read-out the model is evaluated with, ready for ``torch.onnx.export``,
        ``torch.export`` or ``torch.jit.trace``
        (:class:`~kernel_layers.training.predictor.Predictor`).
        With ``datamodule`` it starts with the data's min-max scaling
        (:meth:`~kernel_layers.data.ArrayDataModule.input_scaling`), so it takes raw rows
        in the units of the data files, and a ridge read-out that is not fitted on the
        current features is first refitted on the data's training split, as ``test`` and
        ``predict`` do. Without it, the module takes inputs scaled as in training.

        Args:
            datamodule: a :class:`~kernel_layers.data.ArrayDataModule` (every
                :mod:`kernel_layers.data` module), or ``None``.
            dtype: ``torch.float64`` evaluates the copy in float64 (for a kernel layer whose
                float32 round-off moves the scores); ``None``: as the model is.

        Returns:
            Predictor: ``x (Tensor[B, ...]) -> (classes Tensor[B] int64, scores Tensor[B, L])``.

        Raises:
            TypeError: ``datamodule`` is not an ``ArrayDataModule``.
            ValueError: the data's feature count differs from the model's.
            RuntimeError: the landmarks were never initialised, or the ridge read-out
                needs a fit and no ``datamodule`` was given.
        """
        owner = f"{type(self).__name__}.predictor"
        scaling = None
        if datamodule is not None:
            if not isinstance(datamodule, ArrayDataModule):
                raise TypeError(
                    f"{owner}: argument 'datamodule' must be a kernel_layers.data "
                    f"ArrayDataModule or None, got {type(datamodule).__name__}"
                )
            self.check_data_sizes(datamodule)
            scaling = datamodule.input_scaling().to(self.device)  # float64 kept
        if self._landmarks_pending():
            raise RuntimeError(
                f"{owner}: the Nystrom landmarks were never initialised from the data "
                "(init_landmarks); fit or test the model first"
            )
        readout: nn.Module | None = self.readout
        if readout is None:
            if self._head_needs_fit():
                if datamodule is None:
                    raise RuntimeError(
                        f"{owner}: the ridge read-out is not fitted on the current features; "
                        "pass argument 'datamodule' (its training split refits it) or call "
                        "refit_head(loader) first"
                    )
                self.refit_head(datamodule.train_eval_dataloader())
            readout = self.head
        return Predictor(
            self.kernel_layer, readout, backbone=self.backbone, scaling=scaling, dtype=dtype
        )

    # ------------------------------------------------------------------ training
    def _check_batch(self, batch: int) -> None:
        if batch <= self.num_features:
            raise ValueError(
                f"{type(self).__name__}: the DI objective needs batches larger than the "
                f"feature width J={self.num_features}, got a batch of {batch} rows "
                f"(DI saturates when B <= J); set the data module's batch_size to at least "
                f"{2 * self.num_features} (the paper uses max(1000, 2J)) with drop_last=True"
            )

    @property
    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _di(self, h: Tensor, y: Tensor) -> Tensor:
        """DI of the global batch (all processes' rows under DDP).

        The layer states how its DI is computed (``NystromLayer``: NysDI from inputs and
        landmarks) through a ``discriminant_information(x, targets, *, rho, num_classes,
        sync_dist)`` method; a layer without one gets the DI of its features.
        """
        layer, hp = self.kernel_layer, self.hparams
        sync = self._world_size > 1
        layer_di = getattr(layer, "discriminant_information", None)
        if callable(layer_di):
            return layer_di(h, y, rho=hp["rho"], num_classes=hp["num_classes"], sync_dist=sync)
        return discriminant_information(
            layer(h), y, rho=hp["rho"], num_classes=hp["num_classes"], sync_dist=sync
        )

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        try:
            return self._training_step(batch, batch_idx)
        except (RuntimeError, ValueError) as err:
            if self._before_step is None or self._world_size > 1:
                raise  # not after a step of ours (bad data), or other processes would hang
            # With deferred checks, what is restored is the epoch's start.
            where = None if self._deferred is not None else batch_idx
            self._stop_diverged(f"the objective failed after it ({err})", where)
            return None

    def _restore_before_step(self) -> None:
        """Put back the parameters saved before the last step (or the epoch's start)."""
        if self._before_step is not None:
            with torch.no_grad():
                for param, saved in self._before_step:
                    param.copy_(saved)
                    param.grad = None

    def _stop_diverged(self, what: str, batch_idx: int | None) -> None:
        """Restore the parameters from before the last optimiser step (``batch_idx``
        ``None``: from the epoch's start, checks deferred) and stop the fit."""
        self._restore_before_step()
        where = "" if batch_idx is None else f", batch {batch_idx}"
        kept = (
            "the parameters from the epoch's start (checks read once per epoch: "
            "check_every='epoch')"
            if batch_idx is None
            else "the parameters before the last optimiser step"
        )
        self.stop_reason = (
            f"{type(self).__name__}: training diverged at epoch {self.current_epoch}{where}: "
            f"{what}; {kept} are kept (is the learning rate too large?) and training stops"
        )
        rank_zero_warn(self.stop_reason)
        self.trainer.should_stop = True

    def _training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        x, y = batch[0], batch[1]
        h = self.embed(x)
        objective = self.hparams["objective"]
        if objective == "di":
            self._check_batch(h.shape[0] * self._world_size)
            di = self._di(h, y)
            # DDP averages gradients over processes, but each process holds only its
            # rows' share of dDI: scale so the average is the single-process gradient.
            loss = -di * self._world_size
            if self._logs_this_step(batch_idx):
                # The progress bar reads its values on the host (a synchronisation).
                bar = self._deferred is None
                self.log(
                    "train/di",
                    di.detach(),
                    on_step=True,
                    on_epoch=False,
                    prog_bar=bar,
                    batch_size=len(y),
                )
            self._add_to_di_epoch(di, len(y))
        else:
            features = self.kernel_layer(h)
            y = y.long()
            if self.readout is not None and objective == "ls":  # group lasso: trained
                onehot = nn.functional.one_hot(y, self.hparams["num_classes"])
                residual = self.readout(features) - onehot.to(features.dtype)
                loss = 0.5 * residual.square().sum(1).mean()
            elif objective == "ls":
                self.head.update(features.detach(), y)
                onehot = nn.functional.one_hot(y, self.hparams["num_classes"]).to(features.dtype)
                weight = self.head.weight.to(features.dtype)
                bias = self.head.bias.to(features.dtype)
                loss = least_squares_loss(features, onehot, weight, bias, rho=self.hparams["rho"])
                loss = loss / len(y)
            else:
                assert self.readout is not None  # objective "ce" builds it
                loss = nn.functional.cross_entropy(self.readout(features), y)
            self.log("train/loss", loss, on_step=True, on_epoch=True, batch_size=len(y))
        if self._deferred is not None:  # read at the epoch's end
            self._deferred.record(
                FloatingPointError, "a non-finite training objective", ~torch.isfinite(loss)
            )
        elif not bool(torch.isfinite(loss)):
            what = f"non-finite training objective ({loss.item()})"
            if self._world_size > 1:  # skipping on one process would hang the others
                raise FloatingPointError(
                    f"{type(self).__name__}: {what} at epoch {self.current_epoch}, "
                    f"batch {batch_idx}"
                )
            self._stop_diverged(what, batch_idx)
            return None
        return loss if loss.requires_grad else None

    @torch.no_grad()
    def _add_to_di_epoch(self, di: Tensor, rows: int) -> None:
        """Add a batch's DI to the epoch's running sums (buffers, so they resume)."""
        if self._di_epoch_seen is None:  # one read per fit (the buffer may be resumed)
            self._di_epoch_seen = int(self.di_epoch_index)
        if self._di_epoch_seen != self.current_epoch:  # a new epoch: restart the sums
            self._di_epoch_seen = self.current_epoch
            self.di_epoch_index.fill_(self.current_epoch)
            self.di_epoch_sum.zero_()
            self.di_epoch_rows.zero_()
        self.di_epoch_sum += di.detach().to(self.di_epoch_sum) * rows
        self.di_epoch_rows += rows

    def _logs_this_step(self, batch_idx: int) -> bool:
        """Whether the step's ``train/di`` is logged: on the steps whose values the
        trainer writes to its logger (every ``log_every_n_steps``) and on the epoch's
        last batch (the progress bar's final value). Each ``self.log`` costs Lightning
        about 0.55 ms (2026-11-27, Lightning 2.6), which the other steps no longer pay."""
        if self._trainer is None:
            return True
        # Set by Lightning's logger connector (not a declared Trainer attribute).
        every = max(int(getattr(self.trainer, "log_every_n_steps", 1)), 1)
        return (self.global_step + 1) % every == 0 or self._epoch_ends_here(batch_idx)

    def _epoch_ends_here(self, batch_idx: int) -> bool:
        """Whether the training epoch ends after this batch (last batch, or a stop)."""
        trainer = self.trainer
        return (
            trainer.should_stop
            or not math.isfinite(trainer.num_training_batches)  # length unknown: every batch
            or batch_idx + 1 >= trainer.num_training_batches
            or 0 <= trainer.max_steps <= trainer.global_step
        )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # train/di_epoch once, on the epoch's last batch (before the callbacks' epoch end,
        # where PlateauDecay and DISaturationStopping read it): each self.log costs about
        # 2.7 ms of Lightning's time, a twentieth of the MNIST recipe's DI step.
        seen = self._di_epoch_seen == self.current_epoch and self.hparams["objective"] == "di"
        if seen and self._epoch_ends_here(batch_idx):
            mean = self.di_epoch_sum / self.di_epoch_rows.clamp_min(1)
            self.log("train/di_epoch", mean.float(), on_step=True, on_epoch=False)

    # ------------------------------------------------------------------ checkpoints
    def check_state_shapes(self, state_dict: dict[str, Any]) -> None:
        """Raise if a checkpoint's tensors do not fit this model's (before loading them).

        Args:
            state_dict: a checkpoint's ``state_dict``.

        Raises:
            ValueError: one message naming every mismatched parameter or buffer with the
                checkpoint's and the model's shapes.
        """
        own = self.state_dict()
        wrong = [
            f"'{name}': checkpoint {list(value.shape)}, model {list(own[name].shape)}"
            for name, value in state_dict.items()
            if isinstance(value, Tensor)
            and isinstance(own.get(name), Tensor)
            and value.shape != own[name].shape
        ]
        if wrong:
            raise ValueError(
                f"{type(self).__name__}: the checkpoint does not fit the model's layers: "
                + "; ".join(wrong)
                + " (build the model with the checkpoint's sizes, e.g. the kernel layer's "
                "in_features / out_features, before loading it)"
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Whether the saved read-out was fitted on the saved features (it lags them when
        # a checkpoint is written between two validations, e.g. check_val_every_n_epoch).
        checkpoint[HEAD_CURRENT_KEY] = (
            not self._refits_head
            or self.readout is not None
            or (bool(self.head.fitted) and self._head_state == self._feature_state())
        )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("state_dict", {})
        self.check_state_shapes(state)
        self._di_epoch_seen = None  # di_epoch_index is about to change
        if checkpoint.get(HEAD_CURRENT_KEY) is False and "head.fitted" in state:
            # A read-out older than the saved features is not trusted: test / predict
            # refit it from the data, and scores() refuses until then.
            state["head.fitted"] = torch.zeros_like(state["head.fitted"])

    # ------------------------------------------------------------------ read-out fits
    def _train_eval_batches(self) -> Iterable[Any]:
        """Every training row once: the data module's ``train_eval_dataloader`` if it has
        one, else the training loader of the running fit."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and hasattr(datamodule, "train_eval_dataloader"):
            return datamodule.train_eval_dataloader()
        if self.trainer.train_dataloader is not None:
            return self.trainer.train_dataloader
        raise RuntimeError(
            f"{type(self).__name__}: fitting the ridge read-out needs the training data; "
            "pass a data module with train_eval_dataloader() (every kernel_layers.data "
            "module has one) or call refit_head(loader) first"
        )

    def _eval_modes(self) -> dict[nn.Module, bool]:
        """Put every submodule in eval mode; return the modes to restore."""
        modes = {m: m.training for m in self.modules()}
        self.eval()
        return modes

    @staticmethod
    def _restore_modes(modes: dict[nn.Module, bool]) -> None:
        for module, training in modes.items():
            module.training = training

    @torch.no_grad()
    def refit_head(self, batches: Iterable[Any] | None = None) -> None:
        """Fit the ridge read-out exactly, in one pass over ``batches`` (default: train).

        Args:
            batches: an iterable of ``(x, y, ...)`` batches, e.g. a ``DataLoader`` over
                the training set.
        """
        modes = self._eval_modes()
        try:
            self.head.reset()
            for batch in self._train_eval_batches() if batches is None else batches:
                x, y = batch[0].to(self.device), batch[1].to(self.device)
                self.head.update(self(x), y.long())
            self.head.fit()
            self._head_state = self._feature_state()
        finally:
            self._restore_modes(modes)

    def _feature_state(self) -> tuple[tuple[int, int], ...]:
        """Identity and version of every tensor the features depend on: any in-place
        change (an optimiser step, new landmarks, a loaded state) changes it."""
        modules = [self.kernel_layer] + ([self.backbone] if self.backbone is not None else [])
        return tuple(
            (id(t), t._version)
            for m in modules
            for t in (*m.parameters(), *m.buffers())
            if not t.is_inference()  # caches made under inference mode carry no version
        )

    def _landmarks_pending(self) -> bool:
        """Whether :meth:`_init_landmarks` still has to draw the landmarks."""
        layer = self.kernel_layer
        return (
            bool(self.hparams["init_landmarks"])
            and isinstance(layer, NystromLayer)
            and not getattr(layer, "landmarks_given", False)
            and not bool(self.landmarks_initialised)
        )

    @torch.no_grad()
    def _init_landmarks(self) -> None:
        """Landmarks := the first rows of the (shuffled) training batches, embedded.

        Skipped unless ``init_landmarks``, for layers other than ``NystromLayer``, for
        landmarks the user gave (``landmarks=`` or ``from_data``), and once done.
        """
        layer = self.kernel_layer
        if not self._landmarks_pending() or not isinstance(layer, NystromLayer):
            return
        loader = self.trainer.train_dataloader
        if loader is None:  # test / predict without fit: ask the data module
            datamodule = getattr(self.trainer, "datamodule", None)
            if datamodule is None:
                return
            loader = datamodule.train_dataloader()
        needed = layer.out_features
        rows: list[Tensor] = []
        modes = self._eval_modes()  # no batch-norm updates, no dropout on landmarks
        try:
            for batch in loader:
                rows.append(self.embed(batch[0].to(self.device)))
                if sum(len(r) for r in rows) >= needed:
                    break
        finally:
            self._restore_modes(modes)
        data = torch.cat(rows)
        if len(data) < needed:
            raise ValueError(
                f"{type(self).__name__}: init_landmarks needs {needed} training rows, "
                f"the training data has {len(data)}"
            )
        layer.landmarks.copy_(data[:needed].to(layer.landmarks))
        if self._world_size > 1:  # every process starts from rank 0's landmarks
            torch.distributed.broadcast(layer.landmarks.data, src=0)
        self.landmarks_initialised.fill_(True)

    def check_data_sizes(self, datamodule: object) -> None:
        """Raise before any step when the data and the layers disagree on a size.

        Checked: the kernel layer's ``in_features`` against the backbone's
        ``out_features`` (with a backbone) or the data module's ``in_features``
        (without); the data module's ``num_features`` (the ``J`` of its batch-size rule)
        against the layer's feature width.

        Raises:
            ValueError: naming both values.
        """
        owner = type(self).__name__
        layer_in = getattr(self.kernel_layer, "in_features", None)
        if self.backbone is not None:
            source, width = (
                "the backbone's out_features",
                getattr(self.backbone, "out_features", None),
            )
        else:
            source, width = "the data's in_features", getattr(datamodule, "in_features", None)
        if isinstance(layer_in, int) and isinstance(width, int) and layer_in != width:
            raise ValueError(
                f"{owner}: the kernel layer's in_features={layer_in} must equal {source}="
                f"{width}; set in_features to {width}"
            )
        j = getattr(datamodule, "num_features", None)
        if isinstance(j, int) and j not in (
            self.num_features,
            getattr(self.kernel_layer, "out_features", None),
        ):
            raise ValueError(
                f"{owner}: the data's num_features={j} must equal the kernel layer's "
                f"out_features={self.num_features} (J: it sets the batch size max(1000, 2 J)); "
                "set J once, on the kernel layer"
            )

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is not None:
            self.check_data_sizes(datamodule)
        if stage == "fit" and self._trainer is not None:
            strategy = self.trainer.strategy
            if type(strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's default
                strategy.checkpoint_io = AtomicCheckpointIO()  # same files, atomic writes
            self._check_checkpoint_dirs()

    def _check_checkpoint_dirs(self) -> None:
        """Fail before the first step when a ``ModelCheckpoint`` cannot write its files."""
        for callback in self.trainer.checkpoint_callbacks:
            dirpath = getattr(callback, "dirpath", None)
            if not isinstance(callback, ModelCheckpoint) or not dirpath:
                continue
            probe = Path(dirpath) / f".kernel-layers-write-test-{os.getpid()}"
            try:
                Path(dirpath).mkdir(parents=True, exist_ok=True)
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as err:
                raise PermissionError(
                    f"{type(self).__name__}: ModelCheckpoint's dirpath '{dirpath}' must be a "
                    f"writable directory, got {type(err).__name__}: {err.strerror or err}; "
                    "choose another dirpath before training (no epoch is lost this way)"
                ) from err

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Adam's step, keeping the parameters from before it until the next step succeeds.

        A step that makes a parameter non-finite, or after which the objective fails or
        is non-finite (a diverging run: too large a learning rate), is undone and the
        fit stops with the reason (warned, and kept in :attr:`stop_reason`), so the
        checkpoints written as it stops hold the last good parameters.
        """
        if self.stop_reason is not None:  # diverged: no further step (Lightning still
            if optimizer_closure is not None:  # needs the closure to run)
                optimizer_closure()
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self._deferred is not None:  # checks recorded on the device, read per epoch
            with deferred_checks(self._deferred):
                optimizer.step(closure=optimizer_closure)
                if self.hparams["group_lasso"] > 0:
                    self._group_lasso_prox(optimizer)
            if params and not torch.compiler.is_compiling():
                top = torch.stack([p.detach().abs().amax() for p in params]).amax()
                limit = distance_limit(
                    params[0].dtype, getattr(self.kernel_layer, "in_features", 1)
                )
                self._deferred.record(
                    FloatingPointError,
                    f"an optimiser step made a parameter reach beyond {limit:.3g} (where "
                    "the kernel's squared distances overflow) or NaN",
                    ~(top <= limit),
                )
            return
        pending = [(p, p.detach().clone()) for p in params]
        optimizer.step(closure=optimizer_closure)  # runs training_step (the closure)
        if self.hparams["group_lasso"] > 0 and self.stop_reason is None:
            self._group_lasso_prox(optimizer)
        if self.stop_reason is not None:  # training_step found the previous step diverged
            return
        self._before_step = pending  # what a failure at the next step goes back to
        if torch.compiler.is_compiling() or not params or self._world_size > 1:
            return
        # One read: the largest parameter magnitude, NaN if any is NaN.
        largest = float(torch.stack([p.detach().abs().amax() for p in params]).amax())
        limit = distance_limit(params[0].dtype, getattr(self.kernel_layer, "in_features", 1))
        if not largest <= limit:
            self._stop_diverged(
                f"the optimiser step made a parameter reach {largest:.3g} (beyond {limit:.3g}, "
                "where the kernel's squared distances overflow)",
                batch_idx,
            )

    @torch.no_grad()
    def block_norms(self) -> Tensor:
        """``||W_k||_F`` of the trained read-out over each feature block of the kernel layer.

        Returns:
            Tensor[K]: one norm per block, in block order (channels with norm 0 are dropped
            from the model); a single entry for a layer without blocks.

        Raises:
            RuntimeError: the objective has no trained read-out (``"di"``, plain ``"ls"``).
        """
        if self.readout is None:
            raise RuntimeError(
                f"{type(self).__name__}: block_norms() needs a trained read-out (objective "
                "'ce', or 'ls' with group_lasso > 0)"
            )
        weight = self.readout.weight  # [L, J]
        blocks = getattr(self.kernel_layer, "feature_blocks", [range(weight.shape[1])])
        return torch.stack([weight[:, block.start : block.stop].norm() for block in blocks])

    @torch.no_grad()
    def _group_lasso_prox(self, optimizer: Any) -> None:
        """The proximal step of ``lam * sum_k ||W_k||_F`` after an optimiser step: shrink
        each block's norm by its step size times ``lam``, exactly to zero below it (block
        soft-thresholding). Adam's step size of a block is ``lr / (sqrt(v_hat) + eps)``
        averaged over the block (a block-diagonal proximal Adam); plain ``lr`` for
        other optimisers."""
        assert self.readout is not None
        weight = self.readout.weight
        group = next(g for g in optimizer.param_groups if any(p is weight for p in g["params"]))
        state = optimizer.state.get(weight, {})
        scale = torch.ones_like(weight)
        if "exp_avg_sq" in state and "step" in state:
            beta2 = group["betas"][1]
            correction = 1.0 - beta2 ** float(state["step"])
            scale = 1.0 / ((state["exp_avg_sq"] / correction).sqrt() + group["eps"])
        blocks: list[range] = getattr(self.kernel_layer, "feature_blocks", [])
        for block in blocks:
            part = weight[:, block.start : block.stop]
            threshold = (
                group["lr"]
                * self.hparams["group_lasso"]
                * scale[:, block.start : block.stop].mean()
            )
            part.mul_(torch.clamp(1.0 - threshold / part.norm().clamp_min(1e-30), min=0.0))

    def on_train_epoch_start(self) -> None:
        # Once per epoch (a per-step log costs about a millisecond of Lightning's time).
        groups = [g for opt in self.trainer.optimizers for g in opt.param_groups]
        if groups:
            self.log("lr", float(groups[0]["lr"]), on_step=False, on_epoch=True)
        if self.hparams.get("check_every", "step") == "epoch" and self.stop_reason is None:
            # What a failure found at the epoch's end goes back to.
            self._before_step = [(p, p.detach().clone()) for g in groups for p in g["params"]]
            self._deferred = DeferredChecks()

    def _read_deferred_checks(self) -> None:
        """The epoch's one read of its deferred checks: raise (bad inputs, a failed
        factorisation) or stop the fit (divergence), with the epoch's first parameters."""
        checks, self._deferred = self._deferred, None
        failure = None if checks is None else checks.first_failure()
        if failure is None:
            return
        if isinstance(failure, FloatingPointError):
            self._stop_diverged(f"{failure} in one of its steps", None)
            return
        self._restore_before_step()
        raise type(failure)(
            f"{failure} (in a training batch of epoch {self.current_epoch}; the checks were "
            "read at the epoch's end, check_every='epoch', and the parameters from its "
            "start are restored)"
        )

    def on_train_start(self) -> None:
        # The buffer may come from a checkpoint: read it once here, not in a step.
        self._di_epoch_seen = int(self.di_epoch_index)
        self._init_landmarks()
        if self.hparams["objective"] == "ls" and not bool(self.head.fitted):
            self.refit_head()  # the LS read-out's first closed-form fit
            self.head.reset()

    def _gather_head_statistics(self) -> None:
        """Merge the ridge head's statistics over processes (DDP), exactly."""
        stats = self.head.statistics
        if self._world_size == 1 or stats is None:
            return
        gathered = [self.all_gather(field) for field in stats]  # each [W, ...]
        merged = None
        for rank in range(self._world_size):
            part = DIStatistics(*(field[rank] for field in gathered))
            merged = part if merged is None else merge_statistics(merged, part)
        self.head.set_statistics(merged)

    def on_train_epoch_end(self) -> None:
        self._read_deferred_checks()
        ran = int(self.di_epoch_index) == self.current_epoch and int(self.di_epoch_rows) > 0
        if self.hparams["objective"] == "di" and ran:
            # -DI of the epoch, once (each per-step log costs about a millisecond of
            # Lightning's time, an eighth of a small DI step).
            epoch_di = self.di_epoch_sum / self.di_epoch_rows
            self.log("train/loss_epoch", -epoch_di.float(), on_step=False, on_epoch=True)
        if self.hparams["group_lasso"] > 0:
            norms = self.block_norms()
            self.log_dict({f"block_norm/{k}": value for k, value in enumerate(norms)})
            self.log("train/active_blocks", (norms > 0).sum().to(norms.dtype))
        if self.hparams["objective"] == "ls" and self.head.statistics is not None:
            self._gather_head_statistics()
            self.head.fit()  # the alternating closed-form step of the LS baseline
            self.head.reset()

    @property
    def _refits_head(self) -> bool:
        """Whether the read-out is refitted by a pass over the data (DI objective)."""
        return self.hparams["objective"] == "di"

    def on_validation_epoch_start(self) -> None:
        if self._refits_head and not self.trainer.sanity_checking:
            self._init_landmarks()  # validate() of a model that was never fitted
            self.refit_head()

    def on_fit_end(self) -> None:
        if self._refits_head:
            self.refit_head()

    def _ensure_head(self) -> None:
        """Before test / predict: a read-out fitted on the current features.

        Refitted when never fitted, or (DI objective) when the features changed since its
        last fit in this process; a head restored from a checkpoint is trusted, as the
        checkpoint holds the parameters it was fitted on.
        """
        self._init_landmarks()  # an untrained baseline evaluated without fit
        if self.readout is None and self._head_needs_fit():
            self.refit_head()

    def _head_needs_fit(self) -> bool:
        """Whether the ridge read-out was never fitted, or (DI objective) was fitted in
        this process on other features than the current ones."""
        stale = self._refits_head and self._head_state not in (None, self._feature_state())
        return not bool(self.head.fitted) or stale

    def on_test_epoch_start(self) -> None:
        self._ensure_head()

    def on_predict_epoch_start(self) -> None:
        self._ensure_head()

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, batch: Any, metric: MulticlassAccuracy, name: str) -> None:
        if self.readout is None and not bool(self.head.fitted):
            return  # sanity check before any fit: nothing to report
        x, y = batch[0], batch[1]
        metric.update(self.scores(self(x)), y)
        self.log(name, metric, on_step=False, on_epoch=True, prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, self.val_acc, "val/acc")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, self.test_acc, "test/acc")

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor | tuple[Tensor, Tensor]:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        scores = self.scores(self(x))
        classes = scores.argmax(1)
        return (classes, scores) if self.hparams["return_scores"] else classes

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        hp = self.hparams
        groups = []
        own = [p for p in self.kernel_layer.parameters() if p.requires_grad]
        if self.readout is not None:
            own += list(self.readout.parameters())
        if own:
            groups.append({"params": own, "lr": hp["lr"], "name": "kernel"})
        if self.backbone is not None:
            params = [p for p in self.backbone.parameters() if p.requires_grad]
            if params:
                groups.append(
                    {"params": params, "lr": hp["backbone_lr"] or hp["lr"], "name": "backbone"}
                )
        if not groups:
            return None
        return torch.optim.Adam(groups)
