"""A trained classifier as one inference module: raw inputs to classes and scores.

What :meth:`KernelClassifier.predictor <kernel_layers.training.module.KernelClassifier.predictor>`
returns: a frozen copy of the model's inference path (the data's scaling, the backbone,
the kernel layer and the read-out) in one plain :class:`torch.nn.Module`, which
``torch.onnx.export``, ``torch.export`` and ``torch.jit.trace`` take as it is.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from kernel_layers.data.base import ArrayDataModule
from kernel_layers.data.scaling import InputScaling
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.training.architecture import floating_dtype
from kernel_layers.training.landmarks import rows_pending
from kernel_layers.training.readout import head_needs_fit

if TYPE_CHECKING:
    from kernel_layers.training.module import KernelClassifier

__all__ = ["NO_CLASS", "Predictor", "build_predictor"]

#: The class an exported :class:`Predictor` gives a row with a NaN or infinite input or
#: score, or a kernel-layer input beyond the map's
#: :meth:`~kernel_layers.layers.base.KernelFeatureMap.input_limit` (in PyTorch the kernel
#: layer refuses such a row with a ``ValueError`` instead).
NO_CLASS = -1


class Predictor(nn.Module):
    """``x -> (classes, scores)``: scaling, backbone, kernel layer and read-out.

    Built from copies of the given modules, put in eval mode, so later training of the
    classifier does not change it. Without ``scaling`` it takes inputs as the model saw
    them in training (scaled); with it, raw rows in the units of the data files.

    Args:
        kernel_layer: the trained kernel layer.
        readout: the read-out mapping features ``[B, J]`` to scores ``[B, L]`` (the
            fitted ridge head or the trained linear read-out).
        backbone: the feature extractor before the kernel layer, or ``None`` (inputs are
            then flattened to ``[B, D]``).
        scaling: the data module's scaling of raw rows (:class:`InputScaling`), or ``None``.
        dtype: evaluate in this dtype (e.g. ``torch.float64`` where float32 round-off,
            amplified by an ill-conditioned ``K_Z``, moves the scores); ``None``: the
            modules' own (float32 for models trained in the default precision, float64
            for ``precision="64-true"``). The scaling hands the first module rows in this
            dtype (it computes in float64); without it, narrower floating rows are
            widened to it, other rows handed on as they are.

    Shape:
        ``x (Tensor[B, ...])`` -> ``(classes Tensor[B] int64, scores Tensor[B, L])``.

    Rows the kernel layer refuses: in PyTorch the kernel layer refuses a batch with a NaN
    or infinite input, or with an entry larger than its
    :meth:`~kernel_layers.layers.base.KernelFeatureMap.input_limit` (``ValueError``). An
    exported graph (ONNX, ``torch.export``) raises nothing; there a row whose input or
    scores are not all finite, or whose kernel-layer input (after the scaling and the
    backbone) has an entry beyond that limit, gets class :data:`NO_CLASS` (``-1``), and
    its scores are not meaningful: test ``classes >= 0`` before using a class as an index.
    """

    def __init__(
        self,
        kernel_layer: nn.Module,
        readout: nn.Module,
        *,
        backbone: nn.Module | None = None,
        scaling: InputScaling | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if dtype is not None and dtype not in (torch.float32, torch.float64):
            raise ValueError(
                "Predictor: argument 'dtype' must be torch.float32, torch.float64 or None, "
                f"got {dtype}"
            )
        self.scaling = copy.deepcopy(scaling)
        self.backbone = copy.deepcopy(backbone)
        self.kernel_layer = copy.deepcopy(kernel_layer)
        self.readout = copy.deepcopy(readout)
        if dtype is not None:
            for layer in self.kernel_layer.modules():  # the trained map, in another dtype
                if isinstance(layer, NystromLayer):
                    layer.keep_jitter()
            for module in (self.backbone, self.kernel_layer, self.readout):
                if module is not None:
                    module.to(dtype)
        first = self.backbone if self.backbone is not None else self.kernel_layer
        #: The dtype the first module reads: rows are handed to it in that dtype.
        self.input_dtype = dtype or floating_dtype(first) or torch.get_default_dtype()
        if self.scaling is not None:
            self.scaling.dtype = self.input_dtype  # its statistics stay float64
        self.eval()
        self.requires_grad_(False)

    def layer_input(self, x: Tensor) -> Tensor:
        """The kernel layer's input ``Tensor[B, D]`` of inputs ``x (Tensor[B, ...])``:
        ``x`` scaled, through the backbone (or flattened)."""
        if self.scaling is not None:
            x = self.scaling(x)
        elif x.is_floating_point() and x.itemsize < self.input_dtype.itemsize:
            x = x.to(self.input_dtype)  # widened exactly, as the model's own forward does
        if self.backbone is not None:
            x = self.backbone(x)
        elif x.ndim > 2:
            x = x.flatten(1)
        return x

    def scores(self, x: Tensor) -> Tensor:
        """Class scores ``Tensor[B, L]`` of inputs ``x (Tensor[B, ...])``."""
        return self.readout(self.kernel_layer(self.layer_input(x)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.layer_input(x)
        scores = self.readout(self.kernel_layer(h))
        classes = torch.argmax(scores, dim=1)
        # An exported graph runs no input checks: a row with a NaN / Inf input (or
        # score), or whose kernel-layer input exceeds the map's input limit, gets class
        # NO_CLASS, never a class of its own (argmax of NaN is 0; beyond the limit the
        # kernel underflows or the phases lose all precision). NaN fails `<=` as well.
        valid = torch.isfinite(x.flatten(1)).all(1) & torch.isfinite(scores).all(1)
        limit = _input_limit(self.kernel_layer, h.dtype)
        if limit is not None:
            valid = valid & (h.abs() <= h.new_tensor(limit)).flatten(1).all(1)
        return torch.where(valid, classes, torch.full_like(classes, NO_CLASS)), scores


def _input_limit(kernel_layer: nn.Module, dtype: torch.dtype) -> float | None:
    """``kernel_layer``'s :meth:`~kernel_layers.layers.base.KernelFeatureMap.input_limit`
    as a value of ``dtype`` that does not exceed it (so that a graph's comparison in
    ``dtype`` accepts exactly what the layer's check does), or ``None`` where there is
    nothing to compare: no stated limit, or one beyond ``dtype``'s range."""
    if not isinstance(kernel_layer, KernelFeatureMap) or not dtype.is_floating_point:
        return None
    limit = kernel_layer.input_limit()
    if not limit < torch.finfo(dtype).max:
        return None  # every finite value of dtype is within it
    bits = 1 - round(math.log2(torch.finfo(dtype).eps))  # dtype's significand bits
    # rounded down to them (dtype's own conversion would round to nearest, maybe up)
    mantissa, exponent = math.frexp(limit)
    return math.ldexp(math.floor(math.ldexp(mantissa, bits)), exponent - bits)


def build_predictor(
    model: KernelClassifier, datamodule: object = None, dtype: torch.dtype | None = None
) -> Predictor:
    """The :class:`Predictor` of ``model`` (what :meth:`KernelClassifier.predictor
    <kernel_layers.training.module.KernelClassifier.predictor>` returns).

    Raises:
        TypeError: ``datamodule`` is not an ``ArrayDataModule`` or ``None``.
        ValueError: the data's feature count differs from the model's.
        RuntimeError: the map still waits for its training rows, or the ridge read-out
            needs a fit and no ``datamodule`` was given.
    """
    owner = f"{type(model).__name__}.predictor"
    scaling = None
    if datamodule is not None:
        if not isinstance(datamodule, ArrayDataModule):
            raise TypeError(
                f"{owner}: argument 'datamodule' must be a kernel_layers.data "
                f"ArrayDataModule or None, got {type(datamodule).__name__}"
            )
        model.check_data_sizes(datamodule)
        scaling = datamodule.input_scaling().to(model.device)  # float64 kept
    if rows_pending(model) > 0:
        raise RuntimeError(
            f"{owner}: the Nystrom landmarks were never initialised from the data "
            "(init_landmarks); fit or test the model first"
        )
    readout: nn.Module | None = model.readout
    if readout is None:
        if head_needs_fit(model):
            if datamodule is None:
                raise RuntimeError(
                    f"{owner}: the ridge read-out is not fitted on the current features; "
                    "pass argument 'datamodule' (its training split refits it) or call "
                    "refit_head(loader) first"
                )
            model.refit_head(datamodule.train_eval_dataloader())
        readout = model.head
    return Predictor(
        model.kernel_layer, readout, backbone=model.backbone, scaling=scaling, dtype=dtype
    )
