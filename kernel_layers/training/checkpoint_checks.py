"""What a checkpoint must agree with before its tensors are used: the modules its specs
describe, the model it is loaded into, and the data settings it was trained with.

* :func:`check_specs_fit_state`: a recorded layer or backbone spec builds exactly the
  tensors the checkpoint carries (checked on the meta device, before anything is
  allocated).
* :func:`module_differences`: the model's kernel layer and backbone against the
  checkpoint's records, each written one way
  (:func:`~kernel_layers.training.architecture.canonical_spec`).
* :func:`data_differences`: the settings that decide the data's split and scaling.
* :func:`check_classes_fit_state`: ``num_classes`` is the read-outs' width.
* :func:`check_finite_state`: no NaN or infinite weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernel_layers.training.architecture import canonical_spec, is_spec, spec_shapes

__all__ = [
    "DATA_SETTINGS",
    "FIT_ONLY_ARGUMENTS",
    "MODULE_ARGUMENTS",
    "check_classes_fit_state",
    "check_finite_state",
    "check_specs_fit_state",
    "configuration_differences",
    "data_differences",
    "differences",
    "module_differences",
]

#: The model's arguments that hold modules (recorded as specs).
MODULE_ARGUMENTS = ("kernel_layer", "backbone")
#: Options that choose which weights ``fit`` hands back, not the model a checkpoint holds
#: (a checkpoint of ``keep_best=None`` tests the same under ``keep_best="auto"``).
FIT_ONLY_ARGUMENTS = ("keep_best",)
#: Data module settings that change the split or the scaling of the rows.
DATA_SETTINGS = ("seed", "val_fraction", "scaling", "clip")


def differences(saved: object, given: object, prefix: str, given_name: str) -> list[str]:
    """``prefix.key: checkpoint X, <given_name> Y`` for every leaf present in both that
    differs (keys starting with ``_`` are skipped)."""
    if isinstance(saved, Mapping) and isinstance(given, Mapping):
        found: list[str] = []
        for key in saved:
            if key in given and not str(key).startswith("_"):
                found += differences(saved[key], given[key], f"{prefix}.{key}", given_name)
        return found
    if isinstance(saved, Sequence) and isinstance(given, Sequence):
        if not isinstance(saved, str) and not isinstance(given, str):
            if len(saved) == len(given):
                return [
                    d
                    for i, (a, b) in enumerate(zip(saved, given, strict=True))
                    for d in differences(a, b, f"{prefix}[{i}]", given_name)
                ]
    if saved != given:
        return [f"{prefix}: checkpoint {saved!r}, {given_name} {given!r}"]
    return []


def _comparable(owner: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    canonical = canonical_spec(owner, name, spec)
    if canonical["init_args"] is None:  # a live module that cannot describe itself
        canonical.pop("init_args")
    return canonical


def module_differences(
    owner: str, saved: Mapping[str, Any], given: Mapping[str, Any], given_name: str
) -> list[str]:
    """Differences between the kernel layer and backbone a checkpoint records (``saved``,
    its hyper-parameters) and those of ``given`` (the model's or the configuration's),
    each spec written one way: ``kernel_layers.NystromLayer`` and
    ``kernel_layers.layers.nystrom.NystromLayer`` are the same class, ``kernel_params``
    ``None`` and ``{}`` the same setting.

    Returns:
        list[str]: ``model.<argument>.<setting>: checkpoint X, <given_name> Y`` lines; a
        side that records no spec (an old checkpoint) is not compared.
    """
    found: list[str] = []
    for name in MODULE_ARGUMENTS:
        a, b = saved.get(name), given.get(name)
        if is_spec(a) and is_spec(b):
            a, b = _comparable(owner, name, a), _comparable(owner, name, b)
            if "init_args" not in a or "init_args" not in b:
                a.pop("init_args", None)
                b.pop("init_args", None)
            found += differences(a, b, f"model.{name}", given_name)
        elif name in saved and (a is None) != (b is None) and (is_spec(a) or is_spec(b)):
            found += [f"model.{name}: checkpoint {a!r}, {given_name} {b!r}"]
    return found


def data_differences(saved: Mapping[str, Any], datamodule: object) -> list[str]:
    """Differences in :data:`DATA_SETTINGS` between a checkpoint's data module
    hyper-parameters and ``datamodule`` (``scaling=None`` read as the module's default).

    Returns:
        list[str]: ``data.<setting>: checkpoint X, configuration Y`` lines.
    """
    found: list[str] = []
    for key in DATA_SETTINGS:
        if key not in saved or not hasattr(datamodule, key):
            continue
        mine, theirs = getattr(datamodule, key), saved[key]
        if key == "scaling" and theirs is None:
            theirs = getattr(datamodule, "default_scaling", None)
        if key == "val_fraction" and isinstance(theirs, int | float):
            theirs = float(theirs)
        if theirs != mine:
            found.append(f"data.{key}: checkpoint {theirs!r}, configuration {mine!r}")
    return found


def configuration_differences(
    saved: Mapping[str, Any],
    configured: Mapping[str, Any],
    saved_data: object,
    datamodule: object,
) -> list[str]:
    """Every difference between a checkpoint's model hyper-parameters ``saved`` and the
    ``configured`` ones (layers as :func:`module_differences` writes them;
    ``FIT_ONLY_ARGUMENTS`` left out), then between
    its data module hyper-parameters ``saved_data`` and ``datamodule``
    (:func:`data_differences`), each ``key: checkpoint X, configuration Y``."""
    skipped = (*MODULE_ARGUMENTS, *FIT_ONLY_ARGUMENTS)
    wrong = differences(
        {k: v for k, v in saved.items() if k not in skipped},
        {k: v for k, v in configured.items() if k not in skipped},
        "model",
        "configuration",
    )
    wrong += module_differences("kernel-layers", saved, configured, "configuration")
    if isinstance(saved_data, Mapping) and datamodule is not None:
        wrong += data_differences(saved_data, datamodule)
    return wrong


def check_specs_fit_state(
    owner: str,
    source: object,
    hparams: Mapping[str, Any],
    state_dict: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> None:
    """Raise unless each module spec of ``hparams`` builds exactly the tensors
    ``state_dict`` carries under its name (same keys, same shapes): the spec's shapes
    come from a meta-device build, so a spec naming enormous sizes is refused before
    anything is allocated. Specs replaced by ``overrides`` are not checked.

    Raises:
        ValueError: naming the checkpoint, the argument and each differing tensor.
    """
    for name in MODULE_ARGUMENTS:
        spec = hparams.get(name)
        if name in overrides or not is_spec(spec) or spec.get("init_args") is None:
            continue
        built = spec_shapes(owner, name, spec)
        prefix = f"{name}."
        carried = {
            key[len(prefix) :]: value
            for key, value in state_dict.items()
            if key.startswith(prefix) and isinstance(value, torch.Tensor)
        }
        wrong = [
            f"'{prefix}{key}': spec {list(shape)}, tensor "
            + (f"{list(carried[key].shape)}" if key in carried else "missing")
            for key, shape in built.items()
            if key not in carried or carried[key].shape != shape
        ]
        wrong += [f"'{prefix}{key}': not built by the spec" for key in carried if key not in built]
        if wrong:
            raise ValueError(
                f"{owner}: checkpoint {str(source)!r}: the recorded {name} "
                f"({spec['class_path']}) does not build the tensors the checkpoint carries: "
                + "; ".join(wrong)
                + " (the checkpoint is damaged or was edited; nothing was built)"
            )


def check_finite_state(owner: str, source: object, state_dict: Mapping[str, Any]) -> None:
    """Raise if a floating point tensor of ``state_dict`` holds NaN or infinity.

    Raises:
        ValueError: naming the checkpoint and every such key.
    """
    bad = [
        key
        for key, value in state_dict.items()
        if isinstance(value, torch.Tensor)
        and (value.is_floating_point() or value.is_complex())
        and not bool(torch.isfinite(value).all())
    ]
    if bad:
        raise ValueError(
            f"{owner}: checkpoint {str(source)!r} must hold finite weights, got NaN or "
            "infinite values in " + ", ".join(repr(k) for k in bad)
        )


#: The tensors whose last dimension is the number of classes.
CLASS_TENSORS = ("head.bias", "readout.bias")


def check_classes_fit_state(
    owner: str,
    source: object,
    hparams: Mapping[str, Any],
    state_dict: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> None:
    """Raise unless ``num_classes`` (a regressor's ``num_targets``; recorded, or in
    ``overrides``) is the width of the read-outs the checkpoint carries, before a
    read-out of that width is allocated.

    Raises:
        ValueError: naming the checkpoint, ``num_classes`` and the tensor's width.
    """
    name = "num_targets" if "num_targets" in hparams else "num_classes"
    classes = overrides.get(name, hparams.get(name))
    for key in CLASS_TENSORS:
        tensor = state_dict.get(key)
        if not isinstance(tensor, torch.Tensor) or tensor.ndim != 1:
            continue
        if isinstance(classes, bool) or not isinstance(classes, int) or classes != len(tensor):
            raise ValueError(
                f"{owner}: checkpoint {str(source)!r}: argument '{name}' must be the "
                f"width of the read-out it carries ('{key}': {len(tensor)}), got {classes!r} "
                "(the checkpoint is damaged or was edited; nothing was built)"
            )
