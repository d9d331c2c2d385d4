"""What a ``KernelClassifier`` adds to its checkpoints and checks when loading one.

Saving records whether the saved ridge read-out was fitted on the saved features
(:data:`~kernel_layers.training.readout.HEAD_CURRENT_KEY`): it lags them when a
checkpoint is written between two validations, e.g. with ``check_val_every_n_epoch``.
Before a model is rebuilt from a checkpoint alone, :func:`check_rebuildable` checks
that the checkpoint records its kernel layer. Loading checks every tensor's shape first,
and marks a lagging read-out unfitted, so that testing or predicting refits it from the
data and ``scores()`` refuses until then.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from kernel_layers.training.preflight import check_layer_recorded
from kernel_layers.training.readout import HEAD_CURRENT_KEY, head_current

if TYPE_CHECKING:
    from kernel_layers.training.module import KernelClassifier

__all__ = ["check_rebuildable", "on_load_checkpoint", "on_save_checkpoint"]


def on_save_checkpoint(model: KernelClassifier, checkpoint: dict[str, Any]) -> None:
    """Record in ``checkpoint`` whether ``model``'s read-out is current."""
    checkpoint[HEAD_CURRENT_KEY] = head_current(model)


def on_load_checkpoint(model: KernelClassifier, checkpoint: dict[str, Any]) -> None:
    """Check ``checkpoint``'s shapes against ``model`` and distrust a lagging read-out.

    Raises:
        ValueError: a tensor's shape differs from the model's
            (:meth:`~kernel_layers.training.module.KernelClassifier.check_state_shapes`).
    """
    state = checkpoint.get("state_dict", {})
    model.check_state_shapes(state)
    model.di_epoch_seen = None  # di_epoch_index is about to change
    if checkpoint.get(HEAD_CURRENT_KEY) is False and "head.fitted" in state:
        state["head.fitted"] = torch.zeros_like(state["head.fitted"])


def check_rebuildable(
    owner: str, checkpoint_path: str | Path, hparams_key: str, overrides: dict[str, Any]
) -> None:
    """Raise unless the checkpoint records its kernel layer or ``overrides`` (the keyword
    arguments of ``load_from_checkpoint``) give one.

    Raises:
        ValueError: as :func:`~kernel_layers.training.preflight.check_layer_recorded`.
    """
    if "kernel_layer" not in overrides:
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        check_layer_recorded(owner, checkpoint_path, checkpoint.get(hparams_key, {}))
