"""Self-describing checkpoints: a module's class and constructor settings as primitives.

A spec is ``{"class_path": "pkg.module.Class", "init_args": {...}}`` (LightningCLI's
format), optionally with ``"dtype": "float64"``. :func:`describe_module` writes one for a
module that has a ``get_config()`` method (every layer and backbone of this library) or
that LightningCLI built from a ``class_path`` / ``init_args`` config; a module that
cannot be described gets ``"init_args": None``, and :func:`build_module` then asks for it
by name. Specs hold only strings, numbers, lists, dicts and ``None``, so checkpoints still
load with ``torch.load(path, weights_only=True)``.

Only classes that are ``nn.Module`` subclasses from this library, ``torch.nn`` or
``torchvision.models``, or already imported, are built from a spec: a checkpoint cannot
make Python import arbitrary code. :func:`spec_shapes` builds a spec on the meta device
(nothing allocated), so that a checkpoint's spec is checked against the tensors it
carries before it is built; :func:`canonical_spec` writes a spec one way (the class's
public path, every setting as the module reports it), so that two ways of writing the
same module compare equal.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import sys
from collections.abc import Mapping
from typing import Any, TypeGuard

import torch
from torch import nn

from kernel_layers._validation import check_choice

__all__ = [
    "TRUSTED_PREFIXES",
    "build_module",
    "canonical_spec",
    "cli_config",
    "describe_module",
    "floating_dtype",
    "is_spec",
    "module_from",
    "spec_shapes",
]

#: Modules a spec's class may be imported from; other classes must be imported already.
TRUSTED_PREFIXES = ("kernel_layers.", "torch.nn.", "torchvision.models.")
#: The dtypes a spec's ``"dtype"`` may name (a module's floating point parameters).
SPEC_DTYPES = ("float16", "bfloat16", "float32", "float64")


def cli_config() -> dict[str, Any]:
    """The ``class_path`` / ``init_args`` configs LightningCLI is instantiating a model
    from (empty outside the CLI): they rebuild modules that have no ``get_config()``,
    such as a torchvision backbone."""
    try:  # Lightning's context of CLI-given hyper-parameters (no public accessor)
        from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters
    except ImportError:  # pragma: no cover - another Lightning version
        return {}
    given = _given_hyperparameters.get()
    return dict(given) if isinstance(given, Mapping) else {}


def _class_path(cls: type) -> str:
    """The class's public name (``kernel_layers.NystromLayer``) where the package exports
    it, so that specs survive moves between the package's modules; else its full path."""
    if cls.__module__.startswith("kernel_layers."):
        import kernel_layers

        if cls.__qualname__ in kernel_layers.__all__:
            return f"kernel_layers.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_class(class_path: str) -> object:
    """The object ``class_path`` names; a library class recorded under a module path
    that has since moved is found by its public name."""
    module_name, _, attr = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        if not class_path.startswith("kernel_layers."):
            raise
        import kernel_layers

        if attr not in kernel_layers.__all__:
            raise
        return getattr(kernel_layers, attr)


def floating_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of ``module``'s first floating parameter (or buffer, if no parameter
    is floating); ``None`` when it has neither."""
    tensors = itertools.chain(module.parameters(), module.buffers())
    return next((t.dtype for t in tensors if t.is_floating_point()), None)


def is_spec(value: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``value`` is a module spec (a mapping with a string ``class_path``)."""
    return isinstance(value, Mapping) and isinstance(value.get("class_path"), str)


def describe_module(module: nn.Module, given: object = None) -> dict[str, Any]:
    """The spec that rebuilds ``module`` (its parameters come from the state dict).

    Args:
        module: the module to describe.
        given: the ``class_path`` / ``init_args`` config LightningCLI built it from, if
            any (used as is).

    Returns:
        dict: ``{"class_path", "init_args"[, "dtype"]}``; ``init_args`` is ``None`` when
        the module has no ``get_config()`` and no config was given.
    """
    if is_spec(given):
        assert isinstance(given, Mapping)
        return {key: given[key] for key in ("class_path", "init_args", "dtype") if key in given}
    get_config = getattr(module, "get_config", None)
    init_args: dict[str, Any] | None = None
    if callable(get_config):
        try:
            init_args = dict(get_config())
        except ValueError:  # e.g. a user-callable kernel: no name to record
            init_args = None
    spec: dict[str, Any] = {"class_path": _class_path(type(module)), "init_args": init_args}
    dtype = floating_dtype(module)
    if dtype is not None and dtype != torch.get_default_dtype():
        spec["dtype"] = str(dtype).removeprefix("torch.")
    return spec


def _resolve(owner: str, name: str, class_path: str) -> type[nn.Module]:
    module_name = class_path.rpartition(".")[0]
    trusted = class_path.startswith(TRUSTED_PREFIXES)
    if not module_name or (not trusted and module_name not in sys.modules):
        raise ValueError(
            f"{owner}: argument '{name}' must name an nn.Module class from kernel_layers, "
            f"torch.nn or torchvision.models, or one already imported, got class_path "
            f"{class_path!r} (import its module first if you trust the checkpoint)"
        )
    try:
        cls = _import_class(class_path)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"{owner}: argument '{name}' names class {class_path!r}, which cannot be "
            f"imported ({err})"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(
            f"{owner}: argument '{name}' must name an nn.Module class, got {class_path!r}"
        )
    return cls


def _argument(owner: str, name: str, value: object) -> object:
    """A setting as the module's constructor takes it: LightningCLI records a module
    class given as a setting (``activation_layer: torch.nn.ReLU``) as ``{"class_path"}``
    and a module as ``{"class_path", "init_args"}``; both are built under the rules of
    :func:`build_module` (an ``nn.Module`` class from a trusted or imported module)."""
    if not is_spec(value):
        return value
    if "init_args" not in value:
        return _resolve(owner, name, value["class_path"])
    return build_module(owner, name, value)


def build_module(owner: str, name: str, spec: Mapping[str, Any]) -> nn.Module:
    """Rebuild a module from :func:`describe_module`'s spec.

    Raises:
        ValueError: the spec records no settings (the module was passed as a live
            object: the message names the argument to pass), or names a class that is
            not an ``nn.Module`` or cannot be imported safely.
    """
    class_path = spec["class_path"]
    init_args = spec.get("init_args", {})
    dtype = spec.get("dtype")
    if dtype is not None:
        check_choice(owner, f"{name}.dtype", dtype, SPEC_DTYPES)
    if init_args is None:
        raise ValueError(
            f"{owner}: argument '{name}' must be passed: the checkpoint records its class "
            f"{class_path!r} but not its settings (it was passed as a live object that "
            f"cannot describe itself); pass {name}={class_path.rpartition('.')[2]}(...) "
            "to load_from_checkpoint"
        )
    if not isinstance(init_args, Mapping):
        raise ValueError(
            f"{owner}: argument '{name}' must have a dict 'init_args', got {init_args!r}"
        )
    args = {key: _argument(owner, f"{name}.{key}", value) for key, value in init_args.items()}
    module = _resolve(owner, name, class_path)(**args)
    if isinstance(dtype, str):
        module = module.to(getattr(torch, dtype))
    return module


def _meta_build(owner: str, name: str, spec: Mapping[str, Any]) -> nn.Module:
    """The module ``spec`` describes, built on the meta device: shapes, no storage."""
    with torch.device("meta"):
        return build_module(owner, name, spec)


def spec_shapes(owner: str, name: str, spec: Mapping[str, Any]) -> dict[str, torch.Size]:
    """The ``state_dict()`` shapes of the module ``spec`` describes, from a build on the
    meta device (nothing is allocated, whatever sizes the spec names).

    Raises:
        ValueError: as :func:`build_module`, or the class cannot be built on the meta
            device (its shapes cannot be known before it is built); the message says to
            pass the module.
    """
    try:
        module = _meta_build(owner, name, spec)
    except (RuntimeError, NotImplementedError) as err:
        raise ValueError(
            f"{owner}: argument '{name}' ({spec['class_path']!r}) cannot be checked against "
            f"the checkpoint's tensors before it is built ({type(err).__name__}: {err}); "
            f"pass {name}=... to load_from_checkpoint if you trust the checkpoint"
        ) from err
    return {key: value.shape for key, value in module.state_dict().items()}


def canonical_spec(owner: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` written one way: the class's public path, every setting as the module
    reports it (``get_config()`` of a meta-device build, e.g. ``kernel_params`` ``{}``
    for ``None``; else the given arguments with the class's defaults) and its dtype.

    A spec without settings (``init_args`` ``None``) keeps them ``None``.

    Raises:
        ValueError: as :func:`build_module` (a class that may not be imported, say).
    """
    cls = _resolve(owner, name, spec["class_path"])
    init_args = spec.get("init_args")
    dtype = spec.get("dtype")
    described: dict[str, Any] | None = None
    if isinstance(init_args, Mapping):
        try:
            module = _meta_build(owner, name, spec)
        except (RuntimeError, NotImplementedError):
            module = None
        if module is not None and callable(getattr(module, "get_config", None)):
            described = describe_module(module)
            dtype = described.get("dtype", dtype)
            init_args = described["init_args"]
        if described is None or init_args is None:
            defaults = {
                key: p.default
                for key, p in inspect.signature(cls).parameters.items()
                if p.default is not inspect.Parameter.empty
            }
            init_args = {**defaults, **init_args} if isinstance(init_args, Mapping) else None
    path = _class_path(cls)
    default_dtype = str(torch.get_default_dtype()).removeprefix("torch.")
    return {"class_path": path, "init_args": init_args, "dtype": dtype or default_dtype}


def module_from(owner: str, name: str, value: object, given: dict[str, Any]) -> Any:
    """``value`` itself, or the module its spec rebuilds when it is one (a checkpoint's
    record, as ``load_from_checkpoint`` passes it); the spec is then kept as
    ``given[name]``, the module's description (:func:`describe_module`).

    Raises:
        ValueError: as :func:`build_module`.
    """
    if not is_spec(value):
        return value
    given.setdefault(name, value)
    return build_module(owner, name, value)
