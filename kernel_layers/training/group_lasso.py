"""Multiple kernel learning: the group-lasso penalty on a read-out's feature blocks.

``lam * sum_k ||W_k||_F`` over the blocks ``k`` of the kernel map's features
(:attr:`~kernel_layers.layers.base.KernelFeatureMap.feature_blocks`) is applied as an
exact proximal step after each optimiser step (block soft-thresholding), so blocks whose
weights reach zero drop out of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "block_norms",
    "group_lasso_prox",
    "log_block_norms",
    "model_block_norms",
    "model_prox_step",
]


@torch.no_grad()
def block_norms(weight: Tensor, blocks: Sequence[range]) -> Tensor:
    """``||W_k||_F`` of ``weight (Tensor[L, J])`` over each block of columns.

    Returns:
        Tensor[K]: one norm per block, in block order.
    """
    return torch.stack([weight[:, block.start : block.stop].norm() for block in blocks])


@torch.no_grad()
def group_lasso_prox(weight: Tensor, optimizer: Any, blocks: Sequence[range], lam: float) -> None:
    """The proximal step of ``lam * sum_k ||W_k||_F`` on ``weight (Tensor[L, J])``, in place.

    Shrinks each block's norm by its step size times ``lam``, exactly to zero below it.
    Adam's step size of a block is ``lr / (sqrt(v_hat) + eps)`` averaged over the block
    (a block-diagonal proximal Adam); plain ``lr`` for other optimisers.

    Args:
        weight (Tensor[L, J]): the read-out's weight, a parameter of ``optimizer``.
        optimizer: the optimiser that just stepped.
        blocks: the feature blocks (column ranges).
        lam: the penalty ``>= 0``.
    """
    group = next(g for g in optimizer.param_groups if any(p is weight for p in g["params"]))
    state = optimizer.state.get(weight, {})
    scale = torch.ones_like(weight)
    if "exp_avg_sq" in state and "step" in state:
        beta2 = group["betas"][1]
        correction = 1.0 - beta2 ** float(state["step"])
        scale = 1.0 / ((state["exp_avg_sq"] / correction).sqrt() + group["eps"])
    for block in blocks:
        part = weight[:, block.start : block.stop]
        threshold = group["lr"] * lam * scale[:, block.start : block.stop].mean()
        part.mul_(torch.clamp(1.0 - threshold / part.norm().clamp_min(1e-30), min=0.0))


def model_block_norms(model: KernelModule) -> Tensor:
    """:func:`block_norms` of ``model``'s trained read-out over its map's feature blocks.

    Returns:
        Tensor[K]: one norm per block, in block order.

    Raises:
        RuntimeError: the model has no trained read-out (objective ``"di"``, plain ``"ls"``).
    """
    if model.readout is None:
        raise RuntimeError(
            f"{type(model).__name__}: block_norms() needs a trained read-out (objective "
            "'ce', or 'ls' with group_lasso > 0)"
        )
    return block_norms(model.readout.weight, model.kernel_layer.feature_blocks)


def model_prox_step(model: KernelModule, optimizer: Any) -> None:
    """:func:`group_lasso_prox` on ``model``'s read-out with its ``group_lasso`` penalty;
    nothing without a penalty or a trained read-out."""
    lam = model.hparams.get("group_lasso", 0.0)
    if lam > 0 and model.readout is not None:
        group_lasso_prox(model.readout.weight, optimizer, model.kernel_layer.feature_blocks, lam)


def log_block_norms(model: KernelModule) -> None:
    """Log ``block_norm/<k>`` and ``train/active_blocks`` (blocks of nonzero norm) at an
    epoch's end, when ``model`` has a group-lasso penalty."""
    if model.hparams.get("group_lasso", 0.0) > 0:
        norms = model_block_norms(model)
        model.log_dict({f"block_norm/{k}": value for k, value in enumerate(norms)})
        model.log("train/active_blocks", (norms > 0).sum().to(norms.dtype))
