"""The kernel approximation error on validation: :class:`KernelApproximationLogging`.

``KernelClassifier(approximation_rows=m)`` adds this callback: it keeps the map's inputs
of the first ``m`` validation rows (``embed(x)``, computed again for the batches that
supply them: the map's inputs are not kept by the validation step) and, at the end of
each validation epoch, logs the relative errors of
:class:`~kernel_layers.kernels.approximation.KernelApproximationError` of the model's
kernel layer on them: ``val/kernel_error`` (Frobenius norm) and
``val/kernel_error_spectral``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from kernel_layers._validation import check_int
from kernel_layers.kernels.approximation import KernelApproximationError
from kernel_layers.training.batch_checks import batch_parts

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["METRIC_NAMES", "KernelApproximationLogging"]

#: The logged names of the Frobenius and spectral relative errors.
METRIC_NAMES = {"fro": "val/kernel_error", "spectral": "val/kernel_error_spectral"}


class KernelApproximationLogging(Callback):
    """Logs the kernel layer's relative approximation errors on validation rows.

    Args:
        max_rows: the number of validation rows (the first ones of the first validation
            loader) the errors are measured on, an integer ``>= 1``.

    Raises:
        TypeError: ``max_rows`` is not an integer.
        ValueError: ``max_rows < 1``.
    """

    def __init__(self, max_rows: int) -> None:
        self.max_rows = check_int(type(self).__name__, "max_rows", max_rows)
        self.metric: KernelApproximationError | None = None

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        model = cast("KernelModule", pl_module)
        metric = KernelApproximationError(model.kernel_layer, max_rows=self.max_rows, norm="both")
        self.metric = metric.to(model.device)

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        metric = self.metric
        if trainer.sanity_checking or dataloader_idx != 0 or metric is None or metric.full:
            return
        model = cast("KernelModule", pl_module)
        with torch.no_grad():
            (x,) = batch_parts(type(model).__name__, batch, 1)
            metric.update(model.embed(x))

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        metric, self.metric = self.metric, None
        if trainer.sanity_checking or metric is None or not metric.update_called:
            return
        errors = metric.compute()
        assert isinstance(errors, dict)  # norm="both"
        for norm, name in METRIC_NAMES.items():
            pl_module.log(name, errors[norm].float(), on_step=False, on_epoch=True, sync_dist=True)
