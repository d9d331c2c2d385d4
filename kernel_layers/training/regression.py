"""KernelRegressor: a LightningModule that trains a kernel feature map with DI on float
targets and reads it out by ridge regression.

Everything but the targets and the metrics is shared with
:class:`~kernel_layers.KernelClassifier` through
:class:`~kernel_layers.training.kernel_module.KernelModule`: the layers, the DI training
step, the divergence guard, the read-out refits
(:class:`~kernel_layers.training.readout.ReadoutRefit`), the callbacks watching
``train/di_epoch`` and the ``weights_only`` checkpoints.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torchmetrics import MeanSquaredError, MetricCollection

from kernel_layers._validation import check_choice, check_float_targets
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.objectives import unit_norm_columns
from kernel_layers.selection.rho import rho_from_penalty
from kernel_layers.training import preflight
from kernel_layers.training.architecture import cli_config, module_from
from kernel_layers.training.batch_checks import batch_parts, named_batch_errors
from kernel_layers.training.deferred import CHECK_EVERY
from kernel_layers.training.heads import gcv_penalty
from kernel_layers.training.kernel_module import KernelModule
from kernel_layers.training.r2 import TargetR2
from kernel_layers.training.readout import check_head_ready, training_statistics
from kernel_layers.training.small_data import AUTO

__all__ = ["KEEP_BEST", "KernelRegressor"]

#: ``KernelRegressor(keep_best=...)``: ``"auto"`` (the best on ``val/r2`` on small data
#: only) or the validation metric whose best epoch is kept.
KEEP_BEST = (AUTO, "val/r2")


def _metrics(split: str) -> MetricCollection:
    """R² (averaged uniformly over the targets) and the RMSE over every entry of the
    ``split`` (``"validation"``, ``"test"``) rows."""
    return MetricCollection({"r2": TargetR2(split), "rmse": MeanSquaredError(squared=False)})


class KernelRegressor(KernelModule):
    """Train a kernel layer (optionally atop a backbone) by DI against float targets and
    read it out by ridge regression.

    The DI paper's general form: ``DI = tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T
    Phi_c)`` for any target matrix ``Y``, and ``||Y_c||^2 - DI`` is the minimum ridge
    error of ``Y`` on the features. Each training batch's targets are centred and their
    columns scaled to unit norm (:func:`~kernel_layers.objectives.unit_norm_columns`),
    as a classifier's one-hot columns are: the batch's DI is then the sum over the
    targets of its in-batch ridge ``R^2`` (at most ``L``), in no target's units, so that
    targets of any scale train alike and ``train/di_epoch`` reads the same across data
    sets (under DDP, by the means and norms of the global batch). The read-out
    (:class:`~kernel_layers.training.heads.RidgeHead`, with intercept, fitted exactly in
    one pass over the training data) takes the targets as they are: its predictions
    scale with the targets, so no standardisation is needed; its penalty is chosen by
    generalised cross-validation unless ``head_rho`` is given.

    Logged: ``train/di`` (per step) and ``train/di_epoch`` (the mean of the epoch's
    batches, which :class:`~kernel_layers.callbacks.PlateauDecay` and
    :class:`~kernel_layers.callbacks.DISaturationStopping` watch),
    ``train/loss_epoch = -train/di_epoch``, ``lr``, ``val/r2``, ``val/rmse``,
    ``test/r2`` and ``test/rmse`` (R² averaged over the targets; RMSE over every entry).

    Batches are ``(x Tensor[B, ...], y Tensor[B, L])`` (``y Tensor[B]`` for one target):
    :class:`~kernel_layers.data.tensor.TensorDataModule` with ``float_targets=True``
    serves them. ``predict_step`` returns ``Tensor[B, L]``.

    Args:
        kernel_layer: a :class:`~kernel_layers.layers.base.KernelFeatureMap`.
        num_targets: number of targets ``L``.
        backbone: optional feature extractor before the kernel layer.
        rho: ridge parameter of DI / NysDI; ``None`` (default): the read-out's penalty,
            shared out over the batches of an epoch, chosen when a fit starts
            (:meth:`choose_rho`); :attr:`rho` gives the value in use.
        lr: Adam learning rate of the kernel layer.
        backbone_lr: learning rate of the backbone (default ``lr``).
        lr_schedule: ``"constant"`` (default) or ``"cosine"``: every learning rate
            annealed to zero over the Trainer's ``max_epochs`` (``CosineAnnealingLR``,
            stepped each epoch; use it instead of
            :class:`~kernel_layers.callbacks.PlateauDecay`, not with it).
        head_rho: ridge penalty of the closed-form read-out; ``None`` (default): chosen
            at each fit by generalised cross-validation on the training statistics
            (:class:`~kernel_layers.training.heads.GCVRidgeHead`), as noisy targets need.
        init_landmarks: hand the map the training rows it asks for when fit starts (a
            ``NystromLayer`` draws its landmarks from them), as ``KernelClassifier``.
        check_every: ``"step"``, ``"epoch"`` or ``"auto"``, as ``KernelClassifier``.
        approximation_rows: rows kept to log the kernel approximation error (0: none).
        keep_best: ``"val/r2"``: the model handed back when ``fit`` ends is the one of
            the best epoch on the validation ``R^2``
            (:class:`~kernel_layers.callbacks.KeepBest`), the untrained map included, not
            the last, so that a map that fits the training rows' noise (small data) is not
            returned; ``None``: the last; ``"auto"`` (default): ``"val/r2"`` when an
            epoch has fewer than 8 batches and a :mod:`kernel_layers.data` module has
            validation rows, else the last, silently. The untrained map needs a
            :mod:`kernel_layers.data` module (with plain data loaders only the trained
            epochs are candidates, with a warning).

    Raises:
        TypeError: ``kernel_layer`` is not a ``KernelFeatureMap``, or ``backbone`` is
            not an ``nn.Module``; a training, validation or test batch whose targets
            are not floats (integer labels belong to ``KernelClassifier``).
        ValueError: an argument out of range; targets of the wrong shape or not finite.
    """

    KEEP_BEST_MONITOR = "val/r2"

    def __init__(
        self,
        kernel_layer: KernelFeatureMap,
        *,
        num_targets: int = 1,
        backbone: nn.Module | None = None,
        rho: float | None = None,
        lr: float = 1e-3,
        backbone_lr: float | None = None,
        lr_schedule: str = "constant",
        head_rho: float | None = None,
        init_landmarks: bool = True,
        check_every: str = "auto",
        approximation_rows: int = 0,
        keep_best: str | None = AUTO,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        given = cli_config()  # or, below, a checkpoint's records (load_from_checkpoint)
        kernel_layer = module_from(owner, "kernel_layer", kernel_layer, given)
        backbone = module_from(owner, "backbone", backbone, given)
        preflight.check_arguments(
            owner,
            kernel_layer,
            backbone,
            objective="di",
            group_lasso=0.0,
            objectives=("di",),
            check_every=check_every,
            check_every_choices=CHECK_EVERY,
            lr_schedule=lr_schedule,
        )
        # The checked values, Python numbers, are the ones recorded below.
        num_targets, lr, backbone_lr, rho, head_rho, approximation_rows = preflight.check_scalars(
            owner,
            outputs=("num_targets", num_targets),
            lr=lr,
            backbone_lr=backbone_lr,
            rho=rho,
            head_rho=head_rho,
            approximation_rows=approximation_rows,
            flags={"init_landmarks": init_landmarks},
        )
        if keep_best is not None:
            check_choice(owner, "keep_best", keep_best, KEEP_BEST)
        self.save_hyperparameters(ignore=["kernel_layer", "backbone"])
        self._build(kernel_layer, backbone, given, num_outputs=num_targets, head_rho=head_rho)
        self.val_metrics = _metrics("validation").clone(prefix="val/")
        self.test_metrics = _metrics("test").clone(prefix="test/")

    def choose_rho(self, batches: float) -> float:
        """DI's ridge parameter when ``rho`` is not given: the read-out's penalty shared
        out over ``batches``, the batches an epoch runs.

        DI is then the in-batch fit of the ridge regression that will read the features
        out, each batch's scatter carrying its share of the penalty. The penalty is
        ``head_rho`` if given, else the one generalised cross-validation chooses for the
        map's features of the training rows when the model's first fit starts (gathered
        in a scratch read-out), shared out by
        :func:`~kernel_layers.selection.rho.rho_from_penalty` (never below ``1e-4``);
        under several processes, process 0's value. A smaller ``rho`` lets DI reward
        features that fit the training rows' noise, which a read-out with the larger
        penalty never uses. The value is chosen once: a later fit of the same model,
        and a fit restored from a checkpoint that recorded one, keep it.
        """
        if self._chosen_rho is not None:
            return self._chosen_rho
        penalty = self.hparams["head_rho"]
        if penalty is None:
            penalty = gcv_penalty(training_statistics(self))
        return float(self.trainer.strategy.broadcast(rho_from_penalty(float(penalty), batches)))

    def check_targets(self, y: Tensor) -> Tensor:
        """``y`` checked as float targets: ``Tensor[B, L]`` (``Tensor[B]`` for one).

        Raises:
            TypeError: not a float tensor (e.g. integer labels).
            ValueError: another shape, or a NaN / Inf target.
        """
        return check_float_targets(type(self).__name__, "y", y, self.hparams["num_targets"])

    def training_targets(self, y: Tensor) -> Tensor:
        """The batch's targets centred, their columns scaled to unit norm
        (``Tensor[B, L]``); under several processes by the global batch's means and
        norms, so that DI is the global batch's."""
        return unit_norm_columns(self.check_targets(y), sync_dist=self._world_size > 1)

    def predict(self, features: Tensor) -> Tensor:
        """Predicted targets ``[B, L]`` of the ridge read-out on ``features (Tensor[B, J])``.

        Raises:
            RuntimeError: the read-out was never fitted, or was fitted on other features
                than the current ones (call :meth:`refit_head`).
        """
        check_head_ready(self)
        return self.head(features)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, batch: Any, batch_idx: int, metrics: MetricCollection, split: str) -> None:
        x, y = batch_parts(type(self).__name__, batch, 2)
        with named_batch_errors(split, batch_idx):
            y = self.check_targets(y)  # even in the sanity check, before any fit
        if not bool(self.head.fitted):
            return  # sanity check before any fit: nothing to report
        # In float64: R²'s sum of squares about the mean cancels in float32 for targets
        # whose mean is large against their spread.
        prediction, y = self.predict(self(x)).double(), y.double()
        if self.hparams["num_targets"] == 1:
            prediction, y = prediction[:, 0], y[:, 0]
        metrics["r2"].update(prediction, y)
        metrics["rmse"].update(prediction.flatten(), y.flatten())
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, self.val_metrics, "validation")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, self.test_metrics, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        (x,) = batch_parts(type(self).__name__, batch, 1)
        return self.predict(self(x))
