"""Checks that fail before the first step: the model's arguments, the sizes of the data,
layers and checkpoint, and whether the checkpoint directories can be written."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch import Tensor, nn

from kernel_layers._files import cannot_write
from kernel_layers._validation import check_bool, check_choice, check_int, check_positive
from kernel_layers.layers.base import KernelFeatureMap
from kernel_layers.training.architecture import is_spec
from kernel_layers.training.checkpoint_io import AtomicCheckpointIO
from kernel_layers.training.optimizer import LR_SCHEDULES
from kernel_layers.training.small_data import AUTO

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "KEEP_BEST",
    "Scalars",
    "at_setup",
    "check_arguments",
    "check_checkpoint_dirs",
    "check_data_sizes",
    "check_layer_recorded",
    "check_scalars",
    "check_state_shapes",
    "use_atomic_checkpoints",
]

#: ``KernelClassifier(keep_best=...)``: ``"auto"`` (the best on ``val/acc`` on small data
#: only, :mod:`~kernel_layers.training.small_data`) or the validation metric whose best
#: epoch is kept.
KEEP_BEST = (AUTO, "val/acc", "val/di")


def check_state_shapes(owner: str, own: Mapping[str, Any], state_dict: Mapping[str, Any]) -> None:
    """Raise if a checkpoint's tensors do not fit the model's (before loading them).

    Args:
        owner: the model's class name, for the message.
        own: the model's ``state_dict()``.
        state_dict: the checkpoint's ``state_dict``.

    Raises:
        ValueError: one message naming every mismatched parameter or buffer with the
            checkpoint's and the model's shapes.
    """
    wrong = [
        f"'{name}': checkpoint {list(value.shape)}, model {list(own[name].shape)}"
        for name, value in state_dict.items()
        if isinstance(value, Tensor)
        and isinstance(own.get(name), Tensor)
        and value.shape != own[name].shape
    ]
    if wrong:
        raise ValueError(
            f"{owner}: the checkpoint does not fit the model's layers: "
            + "; ".join(wrong)
            + " (build the model with the checkpoint's sizes, e.g. the kernel layer's "
            "in_features / out_features, before loading it)"
        )


def check_data_sizes(
    owner: str, layer: KernelFeatureMap, backbone: nn.Module | None, datamodule: object
) -> None:
    """Raise when the data and the layers disagree on a size.

    Checked: the kernel map's ``in_features`` against the backbone's ``out_features``
    (with a backbone) or the data module's ``in_features`` (without); the data module's
    ``num_features`` (the ``J`` of its batch-size rule) against the map's
    ``feature_width`` or ``out_features``.

    Raises:
        ValueError: naming both values.
    """
    if backbone is not None:
        source, width = "the backbone's out_features", getattr(backbone, "out_features", None)
    else:
        source, width = "the data's in_features", getattr(datamodule, "in_features", None)
    if isinstance(width, int) and layer.in_features != width:
        raise ValueError(
            f"{owner}: the kernel layer's in_features={layer.in_features} must equal "
            f"{source}={width}; set in_features to {width}"
        )
    j = getattr(datamodule, "num_features", None)
    if isinstance(j, int) and j not in (layer.feature_width, layer.out_features):
        raise ValueError(
            f"{owner}: the data's num_features={j} must equal the kernel layer's "
            f"out_features={layer.feature_width} (J: it sets the batch size max(1000, 2 J)); "
            "set J once, on the kernel layer"
        )


def use_atomic_checkpoints(trainer: Trainer) -> None:
    """Write checkpoints atomically and read them with ``weights_only=True``
    (:class:`AtomicCheckpointIO`) where the trainer has Lightning's default checkpoint
    IO (same files)."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def check_checkpoint_dirs(trainer: Trainer, owner: str) -> None:
    """Fail before the first step when a ``ModelCheckpoint`` cannot write its files.

    Raises:
        PermissionError: naming the directory and the reason.
    """
    for callback in trainer.checkpoint_callbacks:
        dirpath = getattr(callback, "dirpath", None)
        if not isinstance(callback, ModelCheckpoint) or not dirpath:
            continue
        why = cannot_write(Path(dirpath))
        if why is not None:
            raise PermissionError(
                f"{owner}: ModelCheckpoint's dirpath '{dirpath}' must be a writable "
                f"directory, got {why}; choose another dirpath before training (no epoch "
                "is lost this way)"
            )


#: Lightning precisions that cast the whole module to a half-precision dtype.
HALF_TRUE = ("bf16-true", "16-true")


def at_setup(model: KernelModule, stage: str) -> None:
    """The checks of a model's ``setup``: the data module's sizes against the layers
    (``model.check_data_sizes``); checkpoints read with ``weights_only=True`` and written
    atomically (:class:`AtomicCheckpointIO`, installed before Lightning reads a
    ``ckpt_path``); for fit, writable checkpoint directories.

    Raises:
        ValueError: the data and the layers disagree on a size, or the trainer's
            precision is a half-precision ``-true`` one.
        PermissionError: a checkpoint directory cannot be written.
    """
    trainer = model._trainer
    precision = str(getattr(trainer, "precision", ""))
    if precision in HALF_TRUE:
        mixed = precision.replace("-true", "-mixed")
        raise ValueError(
            f"{type(model).__name__}: Trainer(precision={precision!r}) casts the kernel "
            "layer, the ridge read-out and DI's epoch sums to half precision, which kernel "
            f"features cannot take; use precision={mixed!r} (the backbone then runs in "
            "half precision, the kernel part in float32)"
        )
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    if datamodule is not None:
        model.check_data_sizes(datamodule)
    if trainer is not None:
        use_atomic_checkpoints(trainer)  # every stage: a ckpt_path is read weights_only
        if stage == "fit":
            check_checkpoint_dirs(trainer, type(model).__name__)


def check_layer_recorded(owner: str, checkpoint_path: object, hparams: Mapping[str, Any]) -> None:
    """Raise unless a checkpoint's hyper-parameters record its kernel layer.

    Raises:
        ValueError: the checkpoint was written by kernel-layers < 0.2; the message names
            the argument to pass.
    """
    if not is_spec(hparams.get("kernel_layer")):
        raise ValueError(
            f"{owner}: argument 'kernel_layer' must be passed to load_from_checkpoint for "
            f"{str(checkpoint_path)!r}: the checkpoint does not record its kernel layer "
            "(written by kernel-layers < 0.2); pass kernel_layer=NystromLayer(...) / "
            "FourierLayer(...) with the settings it was trained with (and backbone=... if "
            "it had one)"
        )


def check_arguments(
    owner: str,
    kernel_layer: object,
    backbone: object,
    *,
    objective: str,
    group_lasso: float,
    objectives: tuple[str, ...],
    check_every: str,
    check_every_choices: tuple[str, ...],
    keep_best: str | None = None,
    lr_schedule: str = "constant",
) -> None:
    """The argument checks of :class:`~kernel_layers.KernelClassifier` that involve more
    than one value (the map's type, the group lasso's needs), and the choice arguments.

    Raises:
        TypeError: ``kernel_layer`` is not a ``KernelFeatureMap``, or ``backbone`` is
            not an ``nn.Module`` or ``None``.
        ValueError: an objective, ``check_every``, ``keep_best`` or ``lr_schedule`` not
            among the choices,
            ``keep_best="val/di"`` without the DI objective, or a group lasso without a
            trained read-out or without feature blocks.
    """
    if not isinstance(kernel_layer, KernelFeatureMap):
        raise TypeError(
            f"{owner}: argument 'kernel_layer' must be a KernelFeatureMap (NystromLayer, "
            "FourierLayer, FastfoodLayer, EnsembleNystrom, or a subclass of "
            "kernel_layers.layers.base.KernelFeatureMap with in_features, out_features, "
            f"forward and get_config), got {type(kernel_layer).__name__}"
        )
    if backbone is not None and not isinstance(backbone, nn.Module):
        raise TypeError(
            f"{owner}: argument 'backbone' must be an nn.Module or None, "
            f"got {type(backbone).__name__}"
        )
    check_choice(owner, "objective", objective, objectives)
    check_choice(owner, "check_every", check_every, check_every_choices)
    check_choice(owner, "lr_schedule", lr_schedule, LR_SCHEDULES)
    if keep_best is not None:
        check_choice(owner, "keep_best", keep_best, KEEP_BEST)
        if keep_best == "val/di" and objective != "di":
            raise ValueError(
                f"{owner}: argument 'keep_best' 'val/di' needs objective 'di' (val/di is "
                f"logged only then), got objective {objective!r}; use keep_best='val/acc'"
            )
    if group_lasso > 0 and objective not in ("ce", "ls"):
        raise ValueError(
            f"{owner}: argument 'group_lasso' needs objective 'ce' or 'ls' (a trained "
            f"read-out to sparsify), got group_lasso={group_lasso} with {objective!r}"
        )
    blocks = len(kernel_layer.feature_blocks)
    if group_lasso > 0 and blocks < 2:
        raise ValueError(
            f"{owner}: argument 'group_lasso' needs a kernel layer with feature blocks, "
            "e.g. FourierLayer(..., ard=True, blocks=..., separable=True), got "
            f"{type(kernel_layer).__name__} with {blocks} block(s)"
        )


class Scalars(NamedTuple):
    """The checked one-value arguments of a kernel module, as Python numbers."""

    outputs: int
    lr: float
    backbone_lr: float | None
    rho: float | None
    head_rho: float | None
    approximation_rows: int


def check_scalars(
    owner: str,
    *,
    outputs: tuple[str, object],
    lr: object,
    backbone_lr: object,
    rho: object,
    head_rho: object,
    approximation_rows: object,
    flags: dict[str, object],
) -> Scalars:
    """The one-value argument checks of the kernel modules: ``outputs``, the name and
    value of ``num_classes >= 2`` (a classifier) or ``num_targets >= 1`` (a regressor),
    ``lr`` (and ``backbone_lr``, ``rho``, ``head_rho`` but ``None``) a finite number >
    0, ``approximation_rows >= 0``, each of ``flags`` a bool.

    Returns:
        The checked numbers as Python ``int`` or ``float`` (a NumPy scalar given is not
        one: the hyper-parameters and ``weights_only`` checkpoints hold these), ``None``
        kept.

    Raises:
        TypeError | ValueError: naming the argument, the expectation and the value.
    """
    name, value = outputs
    optional = {"backbone_lr": backbone_lr, "rho": rho, "head_rho": head_rho}
    scalars = Scalars(
        outputs=check_int(owner, name, value, minimum=2 if name == "num_classes" else 1),
        lr=check_positive(owner, "lr", lr),
        **{
            key: None if v is None else check_positive(owner, key, v) for key, v in optional.items()
        },
        approximation_rows=check_int(owner, "approximation_rows", approximation_rows, minimum=0),
    )
    for flag, given in flags.items():
        check_bool(owner, flag, given)
    return scalars
