"""The optimiser of a ``KernelClassifier``: Adam over named parameter groups.

Group ``"kernel"`` holds the kernel map's trainable parameters and the trained read-out
(learning rate ``lr``); group ``"backbone"`` the backbone's (``backbone_lr``, default
``lr``). Learning-rate schedulers and callbacks address the groups by these names.

``lr_schedule="cosine"`` anneals every group's rate from its own value to zero over the
trainer's ``max_epochs`` (PyTorch's ``CosineAnnealingLR``, stepped once per epoch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from kernel_layers.callbacks import DISaturationStopping, PlateauDecay

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "LR_SCHEDULES",
    "build_optimizer",
    "build_schedule",
    "check_schedule_span",
    "warn_plateau_callbacks",
]

#: The choices of ``lr_schedule``: a constant rate, or cosine annealing to zero.
LR_SCHEDULES = ("constant", "cosine")


def build_optimizer(model: KernelModule) -> torch.optim.Optimizer | None:
    """Adam over ``model``'s trainable parameters, or ``None`` when there are none."""
    hp = model.hparams
    groups: list[dict[str, Any]] = []
    own = [p for p in model.kernel_layer.parameters() if p.requires_grad]
    if model.readout is not None:
        own += list(model.readout.parameters())
    if own:
        groups.append({"params": own, "lr": hp["lr"], "name": "kernel"})
    if model.backbone is not None:
        params = [p for p in model.backbone.parameters() if p.requires_grad]
        if params:
            lr = hp["backbone_lr"] or hp["lr"]
            groups.append({"params": params, "lr": lr, "name": "backbone"})
    if not groups:
        return None
    return torch.optim.Adam(groups)


def build_schedule(
    owner: str, optimizer: torch.optim.Optimizer, schedule: str, max_epochs: int | None
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The learning-rate scheduler of ``schedule`` (one of :data:`LR_SCHEDULES`), or
    ``None`` for ``"constant"``; ``"cosine"`` spans ``max_epochs`` epochs.

    Raises:
        ValueError: ``"cosine"`` with no finite ``max_epochs`` (``None`` or ``-1``).
    """
    if schedule == "constant":
        return None
    if max_epochs is None or max_epochs < 1:
        raise ValueError(
            f"{owner}: argument 'lr_schedule' 'cosine' anneals over the Trainer's "
            f"max_epochs, which must be a positive number of epochs, got "
            f"max_epochs={max_epochs}"
        )
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max_epochs)


def check_schedule_span(
    owner: str, source: object, checkpoint: Mapping[str, Any], max_epochs: int | None
) -> None:
    """Refuse to resume a ``"cosine"`` schedule over another number of epochs: the
    restored scheduler keeps the span it was saved with (``T_max``), so a longer fit
    would raise the learning rate again after it reached zero.

    Raises:
        ValueError: naming ``max_epochs``, the checkpoint's span and the given value.
    """
    for state in checkpoint.get("lr_schedulers") or ():
        span = state.get("T_max") if isinstance(state, Mapping) else None
        if span is not None and max_epochs is not None and int(span) != max_epochs:
            raise ValueError(
                f"{owner}: checkpoint {str(source)!r} anneals the learning rate "
                f"(lr_schedule 'cosine') over max_epochs={int(span)}; resume it with the "
                f"same Trainer max_epochs, got {max_epochs}"
            )


def warn_plateau_callbacks(owner: str, callbacks: Iterable[object]) -> None:
    """Warn, naming them, when ``callbacks`` hold the plateau callbacks beside
    ``lr_schedule="cosine"``: ``PlateauDecay``'s decays would compound with the annealing,
    and ``DISaturationStopping`` reads every annealed epoch as a decay, so it stops at the
    first epoch whose DI does not improve."""
    names = sorted(
        {type(c).__name__ for c in callbacks if isinstance(c, PlateauDecay | DISaturationStopping)}
    )
    if names:
        rank_zero_warn(
            f"{owner}: lr_schedule 'cosine' lowers the learning rate every epoch, which "
            f"the callbacks {', '.join(names)} read as plateau decays (decays that compound, "
            "a stop at the first epoch whose DI does not improve); the schedule ends the fit "
            "at max_epochs without them",
            category=UserWarning,
        )
