"""What a ``KernelClassifier`` adds to its checkpoints and checks when loading one.

Saving records whether the saved ridge read-out was fitted on the saved features
(:data:`~kernel_layers.training.readout.HEAD_CURRENT_KEY`): it lags them when a
checkpoint is written between two validations, e.g. with ``check_val_every_n_epoch``;
and the ``rho`` the fit chose (:data:`CHOSEN_RHO_KEY`), so that a loaded model reports
and refits with it.
Before a model is rebuilt from a checkpoint alone, :func:`check_before_load` checks that
the checkpoint records its kernel layer, that the records build exactly the tensors it
carries, and that modules passed in their place have the recorded settings. Loading
into a model checks its layers, its data settings, every tensor's shape and that every
weight is finite first, and marks a lagging read-out unfitted, so that testing or
predicting refits it from the data and ``scores()`` refuses until then.
``load_from_checkpoint`` gives each of the model's modules the floating dtype its saved
tensors hold where it is wider than the built one's (a model trained under
``Trainer(precision="64-true")`` comes back in float64), so that loading rounds no
weight; the model then casts float32 rows up to it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn

from kernel_layers.training.architecture import describe_module
from kernel_layers.training.checkpoint_checks import (
    MODULE_ARGUMENTS,
    check_classes_fit_state,
    check_finite_state,
    check_specs_fit_state,
    data_differences,
    module_differences,
)
from kernel_layers.training.checkpoint_io import (
    check_weights_only,
    in_memory,
    is_url,
    load_checkpoint_file,
)
from kernel_layers.training.input_scale import SCALED_BY_KEY
from kernel_layers.training.optimizer import check_schedule_span
from kernel_layers.training.preflight import check_layer_recorded
from kernel_layers.training.readout import HEAD_CURRENT_KEY, head_current

if TYPE_CHECKING:
    from kernel_layers.training.kernel_module import KernelModule

__all__ = [
    "CHOSEN_RHO_KEY",
    "adopt_saved_dtypes",
    "check_before_load",
    "missing_tensors_named",
    "on_load_checkpoint",
    "on_save_checkpoint",
    "read_for_load",
]


#: Checkpoint key of the ``rho`` a fit chose with ``rho=None`` (the model's
#: ``choose_rho``); ``None`` when none was chosen.
CHOSEN_RHO_KEY = "kernel_layers_chosen_rho"


def on_save_checkpoint(model: KernelModule, checkpoint: dict[str, Any]) -> None:
    """Record in ``checkpoint`` whether ``model``'s read-out is current, the ``rho``
    its fit chose and the data module that scaled its rows."""
    checkpoint[HEAD_CURRENT_KEY] = head_current(model)
    checkpoint[CHOSEN_RHO_KEY] = model._chosen_rho
    checkpoint[SCALED_BY_KEY] = model.scaled_by


def on_load_checkpoint(model: KernelModule, checkpoint: dict[str, Any]) -> None:
    """Check ``checkpoint`` against ``model`` and its data, and distrust a lagging read-out.

    Checked, before any tensor is copied: the kernel layer and backbone the checkpoint
    records against the model's (each written one way), the data settings that decide
    the split and scaling against the trainer's data module, every tensor's shape, and
    that every weight is finite.

    Raises:
        ValueError: naming each difference with both values, each mismatched tensor with
            both shapes, or each non-finite key.
    """
    owner = type(model).__name__
    trainer = model._trainer
    source = getattr(trainer, "ckpt_path", None) or "the checkpoint"
    saved = checkpoint.get(model.CHECKPOINT_HYPER_PARAMS_KEY, {})
    wrong = module_differences(owner, saved, model.hparams, "model")
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    saved_data = checkpoint.get("datamodule_hyper_parameters")
    if datamodule is not None and isinstance(saved_data, Mapping):
        wrong += data_differences(saved_data, datamodule)
    if wrong:
        raise ValueError(
            f"{owner}: checkpoint {str(source)!r} was saved with other settings than the "
            "model and data it is loaded into: "
            + "; ".join(wrong)
            + " (build them with the checkpoint's settings, e.g. "
            "KernelClassifier.load_from_checkpoint(path))"
        )
    fitting = trainer is not None and trainer.state.fn == TrainerFn.FITTING
    if fitting and model.hparams.get("lr_schedule") == "cosine":  # not a user's scheduler
        check_schedule_span(owner, source, checkpoint, model.trainer.max_epochs)
    state = checkpoint.get("state_dict", {})
    model.check_state_shapes(state)
    check_finite_state(owner, source, state)
    if trainer is None:  # load_from_checkpoint: the model as it was saved
        adopt_saved_dtypes(model, state)
    model.di_epoch_seen = None  # di_epoch_index is about to change
    chosen = checkpoint.get(CHOSEN_RHO_KEY)  # None: none chosen
    model._chosen_rho = chosen if isinstance(chosen, float) and chosen > 0 else None
    scaled_by = checkpoint.get(SCALED_BY_KEY)
    model.scaled_by = scaled_by if isinstance(scaled_by, str) else None
    model.sync_head_rho()
    if checkpoint.get(HEAD_CURRENT_KEY) is False and "head.fitted" in state:
        state["head.fitted"] = torch.zeros_like(state["head.fitted"])
    # read by the load_state_dict post-hook (adopt_loaded_readout) once the state is in
    model.readout_loaded_current = checkpoint.get(HEAD_CURRENT_KEY) is True


def adopt_saved_dtypes(model: nn.Module, state: Mapping[str, Any]) -> None:
    """Convert each of ``model``'s child modules whose floating tensors all have one
    dtype in ``state`` (a checkpoint's state dict), wider than some of the module's and
    narrower than none (a read-out's float64 penalty buffer beside float32 weights), to that
    dtype before the state is copied in: the dtype it was trained and saved in (float64
    under ``Trainer(precision="64-true")``), which its constructor's arguments do not
    record, and which copying into the narrower module would round. Narrower saved
    weights (a layer cast to bfloat16) are copied into the module as built, exactly."""
    for name, child in model.named_children():
        saved = {
            tensor.dtype
            for key, tensor in state.items()
            if key.startswith(f"{name}.")
            and isinstance(tensor, torch.Tensor)
            and tensor.is_floating_point()
        }
        held = {
            tensor.dtype
            for tensor in itertools.chain(child.parameters(), child.buffers())
            if tensor.is_floating_point()
        }
        if len(saved) == 1 and held:
            wider = saved.pop()  # copying narrower saved weights in loses nothing
            bits = [torch.finfo(dtype).bits for dtype in held]  # (a float64 buffer too)
            if max(bits) <= torch.finfo(wider).bits and min(bits) < torch.finfo(wider).bits:
                child.to(wider)


def check_before_load(
    owner: str,
    source: str | Path,
    checkpoint: Mapping[str, Any],
    hparams_key: str,
    overrides: Mapping[str, Any],
    *,
    model: type,
) -> None:
    """The checks of ``load_from_checkpoint`` before the model is built: the checkpoint
    is one of the loading class ``model`` (a classifier's, a regressor's); it records
    its kernel layer (or ``overrides``, its keyword arguments, give one); each
    recorded spec builds exactly the tensors it carries and ``num_classes`` is its
    read-outs' width (so that nothing enormous is allocated); every weight is finite; a
    layer or backbone passed in ``overrides`` has the recorded settings.

    Raises:
        ValueError: as :func:`~kernel_layers.training.preflight.check_layer_recorded` and
            :func:`~kernel_layers.training.checkpoint_checks.check_specs_fit_state`, or
            naming each setting of a passed module that differs, with both values.
    """
    hparams = checkpoint.get(hparams_key) or {}
    _check_model_class(owner, source, hparams, model)
    if "kernel_layer" not in overrides:
        check_layer_recorded(owner, source, hparams)
    state = checkpoint.get("state_dict") or {}
    check_specs_fit_state(owner, source, hparams, state, overrides)
    check_classes_fit_state(owner, source, hparams, state, overrides)
    check_finite_state(owner, source, state)
    passed = {
        name: describe_module(value)
        for name, value in overrides.items()
        if name in MODULE_ARGUMENTS and isinstance(value, nn.Module)
    }
    recorded = {k: hparams[k] for k in passed if k in hparams}
    wrong = module_differences(owner, recorded, passed, "argument")
    if wrong:
        raise ValueError(
            f"{owner}: the modules passed to load_from_checkpoint differ from those "
            f"checkpoint {str(source)!r} was trained with: "
            + "; ".join(wrong)
            + " (pass them with the checkpoint's settings, or none: the checkpoint "
            "rebuilds them)"
        )


#: The hyper-parameter that tells each model's checkpoints apart: its outputs.
_OUTPUTS = {"KernelClassifier": "num_classes", "KernelRegressor": "num_targets"}


def _check_model_class(
    owner: str, source: str | Path, hparams: Mapping[str, Any], model: type
) -> None:
    """Raise when ``hparams`` are those of the other model class (a classifier's
    checkpoint given to ``KernelRegressor.load_from_checkpoint`` or a subclass's, or the
    reverse); ``model`` is the loading class."""
    names = [base.__name__ for base in model.__mro__]
    expected = next((_OUTPUTS[name] for name in names if name in _OUTPUTS), None)
    if expected is None or expected in hparams:
        return
    for other, key in _OUTPUTS.items():
        if key in hparams:
            raise ValueError(
                f"{owner}: checkpoint {str(source)!r} is a {other}'s (it records {key!r}, "
                f"not {expected!r}); load it with {other}.load_from_checkpoint"
            )


def read_for_load(
    owner: str,
    checkpoint_path: str | Path | IO[bytes],
    hparams_key: str,
    overrides: dict[str, Any],
    *,
    model: type,
) -> str | Path | IO[bytes]:
    """Read ``checkpoint_path`` once with ``weights_only=True`` and check it
    (:func:`check_before_load`); returns what to hand Lightning's loader: the local
    path, or the checkpoint in memory (a URL or a stream is never read twice).
    ``model`` is the loading class.

    ``overrides`` are ``load_from_checkpoint``'s keyword arguments; its
    ``weights_only`` is removed from them.

    Raises:
        ValueError: ``weights_only=False``, or as :func:`load_checkpoint_file` and
            :func:`check_before_load`.
    """
    check_weights_only(owner, overrides.pop("weights_only", None))
    checkpoint = load_checkpoint_file(checkpoint_path, "cpu")
    named = isinstance(checkpoint_path, str | Path)
    source = str(checkpoint_path) if named else "stream"
    check_before_load(owner, source, checkpoint, hparams_key, overrides, model=model)
    if named and not is_url(checkpoint_path):
        return checkpoint_path
    return in_memory(checkpoint)


@contextmanager
def missing_tensors_named(owner: str, checkpoint_path: object) -> Iterator[None]:
    """Turn Lightning's strict ``load_state_dict`` error into a ``ValueError`` naming the
    checkpoint (a tensor missing from it, or one it has that the model lacks)."""
    try:
        yield
    except RuntimeError as err:
        if "state_dict" not in str(err):
            raise
        source = str(checkpoint_path) if isinstance(checkpoint_path, str | Path) else "stream"
        raise ValueError(
            f"{owner}: checkpoint {source!r} does not hold the tensors the model needs: {err}"
        ) from err
