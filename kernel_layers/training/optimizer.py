"""The optimiser of a ``KernelClassifier``: Adam over named parameter groups.

Group ``"kernel"`` holds the kernel map's trainable parameters and the trained read-out
(learning rate ``lr``); group ``"backbone"`` the backbone's (``backbone_lr``, default
``lr``). Learning-rate schedulers and callbacks address the groups by these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = ["build_optimizer"]


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
