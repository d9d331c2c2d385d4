"""A warning for rows that skipped the scaling a model was fitted with.

A :mod:`kernel_layers.data` module min-max scales every row it serves with its training
rows' statistics, inside the module: a model fitted through one has only seen rows in
about ``[0, 1]``. Tested or asked to predict through plain loaders of raw rows, it
would answer as if they were scaled, and its accuracy falls to chance with no error.
:class:`ScaledInputsCheck` records the data module at fit (in the checkpoint too) and
looks at the first batch of each later test or prediction that a plain loader serves
(not a data module's :class:`~kernel_layers.data.loaders.EvaluationLoader`): far
outside that range, it warns once, naming the ways to scale the rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from kernel_layers.data.loaders import EvaluationLoader
from kernel_layers.training.batch_checks import batch_parts

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["SCALED_BY_KEY", "SCALED_LIMIT", "ScaledInputsCheck", "scaling_module"]

#: The checkpoint key of the data module whose scaled rows the model was fitted on.
SCALED_BY_KEY = "kernel_layers_scaled_by"
#: Scaled rows lie in ``[0, 1]`` for the training rows and a little beyond for others:
#: a batch with an entry of larger magnitude than this was not scaled that way.
SCALED_LIMIT = 2.0


def scaling_module(datamodule: object) -> str | None:
    """The class name of ``datamodule`` if it scales the rows it serves (a
    :mod:`kernel_layers.data` module: it has ``input_scaling``), else ``None``."""
    return type(datamodule).__name__ if hasattr(datamodule, "input_scaling") else None


class ScaledInputsCheck(Callback):
    """Record at fit whether the model's rows came scaled from a :mod:`kernel_layers.data`
    module (``pl_module.scaled_by``); warn when a test or prediction reads, from a loader
    that is not a data module's (Lightning keeps a fit's data module on the Trainer when
    loaders are passed to ``test``, so the loader is what tells), a first batch with an
    entry beyond :data:`SCALED_LIMIT`."""

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        model = cast("KernelModule", pl_module)
        model.scaled_by = scaling_module(getattr(trainer, "datamodule", None))

    def on_test_batch_start(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx != 0:  # the first batch of each loader only
            return
        stage = trainer.state.stage  # "test" or "predict"
        name = "test" if stage is None else stage.value
        loaders = trainer.test_dataloaders if name == "test" else trainer.predict_dataloaders
        if isinstance(loaders, list | tuple):
            loaders = loaders[dataloader_idx] if dataloader_idx < len(loaders) else None
        if not isinstance(loaders, EvaluationLoader):
            self._check(pl_module, batch, name)

    on_predict_batch_start = on_test_batch_start

    @staticmethod
    def _check(pl_module: LightningModule, batch: Any, stage: str) -> None:
        fitted_on = getattr(pl_module, "scaled_by", None)
        if fitted_on is None:
            return
        try:
            (x,) = batch_parts(type(pl_module).__name__, batch, 1)
        except TypeError:  # a batch of another kind: the step itself reports it
            return
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or not x.numel():
            return
        peak = float(x.detach().abs().amax())
        if peak > SCALED_LIMIT:
            rank_zero_warn(
                f"{type(pl_module).__name__}: the model was fitted on rows that {fitted_on} "
                f"min-max scaled to [0, 1], and the first {stage} batch holds an entry of "
                f"magnitude {peak:.3g}, beyond what that scaling gives rows like the "
                "training rows: rows that skipped it get meaningless answers; pass the "
                f"data module (trainer.{stage}(model, datamodule=...)), scale the rows "
                "with its transform(rows), or predict raw rows with "
                "model.predictor(datamodule)",
                category=UserWarning,
            )
