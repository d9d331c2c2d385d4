"""Tensor checks of the public entry points: finite values, feature matrices, devices,
dtypes and labels, recorded on the device instead of read when checks are deferred
(:mod:`~kernel_layers.numerics.deferred`). Messages and exception types follow
:mod:`kernel_layers._validation`, which re-exports these checks.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_layers.numerics.deferred import active_checks

__all__ = [
    "PARAMETER_DTYPES",
    "check_device",
    "check_dtype",
    "check_factory",
    "check_features",
    "check_finite",
    "check_float_targets",
    "check_labels",
    "check_matrix",
    "check_torch_device",
    "is_compiling",
]


def is_compiling() -> bool:
    """Whether we run under ``torch.compile`` tracing (data-dependent checks are skipped)."""
    return bool(torch.compiler.is_compiling())


def check_finite(
    owner: str,
    name: str,
    x: Tensor,
    *,
    max_abs: float | None = None,
    why: str = "",
    dtype: torch.dtype | None = None,
) -> None:
    """Raise if ``x`` holds NaN or Inf, or (with ``max_abs``) an entry larger than that.

    One min / max reduction and one read of two numbers (skipped under
    ``torch.compile``); a sum would overflow on finite inputs near the dtype's limit.

    Args:
        owner: the layer or function name used in messages.
        name: the argument name used in messages.
        x: the tensor.
        max_abs: the largest magnitude the caller's arithmetic can take without
            overflowing, or ``None``.
        why: what overflows beyond ``max_abs`` (for the message).
        dtype: the dtype ``max_abs`` is for, where the caller computes in another one
            than ``x``'s (for the message; default ``x``'s).

    Raises:
        ValueError: ``x`` has a non-finite entry, or one beyond ``max_abs``.
    """
    if is_compiling() or x.numel() == 0 or x.is_meta:
        return
    checks = active_checks()
    if checks is not None:  # recorded on the device, read later (no host sync)
        limit = torch.finfo(x.dtype).max if max_abs is None else max_abs
        worst = x.detach().abs().amax()  # NaN if any entry is NaN
        checks.record(
            ValueError,
            f"{owner}: argument '{name}' must be finite"
            + (
                ""
                if max_abs is None
                else f" with entries |value| <= {max_abs:.3g} in {dtype or x.dtype}"
                + (f" ({why})" if why else "")
            )
            + ", and a batch was not",
            ~(worst <= limit),
        )
        return
    low, high = torch.aminmax(x.detach())
    low_value, high_value = torch.stack([low, high]).double().tolist()
    if not (math.isfinite(low_value) and math.isfinite(high_value)):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(
            f"{owner}: argument '{name}' must be finite, got {bad} NaN/Inf "
            f"value(s) in a tensor of shape {list(x.shape)}"
        )
    largest = max(-low_value, high_value)
    if max_abs is not None and largest > max_abs:
        limit_dtype = dtype or x.dtype
        wider = "" if limit_dtype == torch.float64 else " or use float64"
        raise ValueError(
            f"{owner}: argument '{name}' must have entries with |value| <= {max_abs:.3g} "
            f"in {limit_dtype}{' (' + why + ')' if why else ''}, got max |value| = "
            f"{largest:.3g}; scale the inputs (e.g. to [0, 1]){wider}"
        )


def check_features(
    owner: str,
    name: str,
    x: object,
    width: int,
    *,
    min_ndim: int = 1,
    max_abs: float | None = None,
    why: str = "",
    values: bool = True,
) -> Tensor:
    """Check a floating tensor of shape ``[..., width]`` with finite entries.

    Args:
        owner: the layer or function name used in messages.
        name: the argument name used in messages.
        x (Tensor[..., width]): the input.
        width: the required size of the last dimension.
        min_ndim: the least number of dimensions accepted.
        max_abs: the largest magnitude accepted (see :func:`check_finite`).
        why: what overflows beyond ``max_abs``.
        values: check the entries (:func:`check_finite`); ``False`` leaves that to a
            caller that reads them anyway (type, device and shape are still checked).

    Returns:
        Tensor[..., width]: ``x`` itself.

    Raises:
        TypeError: ``x`` is not a floating-point tensor.
        ValueError: wrong rank, wrong width, or NaN/Inf entries.
    """
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{owner}: argument '{name}' must be a torch.Tensor, got {type(x).__name__}"
        )
    if x.is_meta:
        raise ValueError(
            f"{owner}: argument '{name}' must hold data, got a meta tensor of shape "
            f"{list(x.shape)} (kernel computations need values; use a real device)"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{owner}: argument '{name}' must be a floating-point tensor, got dtype {x.dtype}"
        )
    if x.ndim < min_ndim:
        raise ValueError(
            f"{owner}: argument '{name}' must have at least {min_ndim} dimension(s) "
            f"[..., {width}], got shape {list(x.shape)}"
        )
    if x.shape[-1] != width:
        raise ValueError(
            f"{owner}: argument '{name}' must have last dimension {width}, "
            f"got shape {list(x.shape)}"
        )
    if values:
        check_finite(owner, name, x, max_abs=max_abs, why=why)
    return x


def check_matrix(
    owner: str,
    name: str,
    x: object,
    *,
    width: int | None = None,
    max_abs: float | None = None,
    why: str = "",
    values: bool = True,
) -> Tensor:
    """Check a finite floating tensor of shape ``[N, width]`` (any width if ``None``).

    ``max_abs`` and ``why`` are those of :func:`check_finite`, ``values`` that of
    :func:`check_features`.

    Returns:
        Tensor[N, width]: ``x`` itself.

    Raises:
        TypeError: ``x`` is not a floating-point tensor.
        ValueError: ``x`` is not 2-D, has the wrong width, or holds NaN/Inf.
    """
    if isinstance(x, Tensor) and x.ndim != 2:
        expected = f"[N, {width}]" if width is not None else "[N, D]"
        raise ValueError(
            f"{owner}: argument '{name}' must have shape {expected}, got {list(x.shape)}"
        )
    shape_width = x.shape[-1] if isinstance(x, Tensor) else -1
    return check_features(
        owner,
        name,
        x,
        shape_width if width is None else width,
        min_ndim=2,
        max_abs=max_abs,
        why=why,
        values=values,
    )


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def check_device(owner: str, name: str, x: Tensor, device: torch.device) -> None:
    """Raise unless ``x`` is on ``device`` (the layer's), naming both.

    Raises:
        ValueError: another device, or a meta tensor (no data to compute kernels on).
    """
    if x.is_meta:
        raise ValueError(
            f"{owner}: argument '{name}' must hold data, got a meta tensor of shape "
            f"{list(x.shape)} (kernel layers compute on values; use a real device)"
        )
    if x.device != device:
        raise ValueError(
            f"{owner}: argument '{name}' must be on the layer's device {device}, got "
            f"{x.device}; move it with x.to({str(device)!r}) or the layer with .to()"
        )


def check_dtype(owner: str, name: str, x: Tensor, dtype: torch.dtype) -> Tensor:
    """Return ``x`` in ``dtype``: it must already be ``dtype``, or low precision.

    Low-precision inputs (float16 / bfloat16, e.g. a backbone under autocast) are cast up
    to the layer's dtype, so the kernel computations never run in low precision; any
    other mismatch (float64 data into a float32 layer, say) is an error, as it is for
    ``nn.Linear``, but one that names the layer.

    Raises:
        TypeError: ``x.dtype`` is neither ``dtype`` nor float16 / bfloat16.
    """
    if x.dtype == dtype:
        return x
    if x.dtype in _LOW_PRECISION:
        return x.to(dtype)
    raise TypeError(
        f"{owner}: argument '{name}' must have the layer's dtype {dtype} (or float16 / "
        f"bfloat16, cast up), got {x.dtype}; cast the input or call layer.to({x.dtype})"
    )


def check_labels(owner: str, name: str, labels: object, num_classes: int) -> Tensor:
    """Check class labels: an integer ``Tensor[B]`` with values in ``[0, num_classes)``.

    Under deferred checks (:func:`~kernel_layers.numerics.deferred.deferred_checks`) the
    range is recorded on the device instead of read, and the labels returned are clamped
    into range, so that no indexing with them fails before the report.

    Args:
        owner: the layer or function name used in messages.
        name: the argument name used in messages.
        labels (Tensor[B]): the labels.
        num_classes: the number of classes ``L``.

    Returns:
        Tensor[B]: ``labels`` (clamped into range under deferred checks).

    Raises:
        TypeError: ``labels`` is not a tensor of an integer dtype (float, bool, complex).
        ValueError: ``labels`` is not 1-D, or a label is outside ``[0, num_classes)``
            (the message names the first such label).
    """
    expected = f"integer labels in [0, num_classes={num_classes})"
    if not isinstance(labels, Tensor):
        raise TypeError(
            f"{owner}: argument '{name}' must be a tensor of {expected}, "
            f"got {type(labels).__name__}"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(
            f"{owner}: argument '{name}' must be {expected}, got dtype {labels.dtype} "
            "(convert the labels with .long() where they are whole numbers)"
        )
    if labels.ndim != 1:
        raise ValueError(
            f"{owner}: argument '{name}' must be {expected} of shape [B], "
            f"got shape {list(labels.shape)}"
        )
    if labels.numel() == 0 or is_compiling():
        return labels
    outside = (labels < 0) | (labels >= num_classes)
    checks = active_checks()
    if checks is not None:  # recorded on the device, read later (no host sync)
        checks.record(
            ValueError,
            f"{owner}: argument '{name}' must be labels in [0, num_classes={num_classes}), "
            "and a batch's were not",
            outside.any(),
        )
        return labels.clamp(0, num_classes - 1)
    if bool(outside.any()):
        first = int(labels[outside][0])
        raise ValueError(
            f"{owner}: argument '{name}' must be labels in [0, num_classes={num_classes}), "
            f"got {first} ({int(outside.sum())} of {labels.numel()} labels out of range)"
        )
    return labels


def check_torch_device(owner: str, name: str, value: object) -> torch.device:
    """Return ``value`` as a ``torch.device`` this machine has, else raise.

    Args:
        owner: the estimator or function name used in messages.
        name: the argument name used in messages.
        value: a device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...) or a
            ``torch.device``.

    Raises:
        TypeError: ``value`` is neither a string nor a ``torch.device``.
        ValueError: ``value`` names no device type, or one this machine does not have.
    """
    if not isinstance(value, str | torch.device):
        raise TypeError(
            f"{owner}: argument '{name}' must be a device string such as 'cpu' or 'cuda', "
            f"or a torch.device, got {value!r}"
        )
    try:
        device = torch.device(value)
    except RuntimeError as err:
        raise ValueError(
            f"{owner}: argument '{name}' must be a device such as 'cpu', 'cuda' or "
            f"'cuda:1', got {value!r}"
        ) from err
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as err:
        raise ValueError(
            f"{owner}: argument '{name}' must be a device this machine has, got {value!r} "
            f"({str(err).splitlines()[0] if str(err) else type(err).__name__})"
        ) from err
    return device


#: The dtypes a layer's parameters may have.
PARAMETER_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_factory(
    owner: str, device: object, dtype: object
) -> tuple[torch.device | None, torch.dtype | None]:
    """A layer constructor's ``device`` and ``dtype``: each ``None`` (the defaults), or
    a device this machine has (:func:`check_torch_device`) and a floating ``torch.dtype``.

    Raises:
        TypeError: ``dtype`` is not a floating ``torch.dtype``, or ``device`` is neither
            a string nor a ``torch.device``.
        ValueError: ``device`` names no device this machine has.
    """
    if dtype is not None and dtype not in PARAMETER_DTYPES:
        raise TypeError(
            f"{owner}: argument 'dtype' must be None or one of torch.float16, "
            f"torch.bfloat16, torch.float32, torch.float64, got {dtype!r}"
        )
    checked = None if device is None else check_torch_device(owner, "device", device)
    return checked, dtype


def check_float_targets(owner: str, name: str, targets: object, num_targets: int) -> Tensor:
    """Check regression targets: a float ``Tensor[B]`` (one target) or ``Tensor[B, L]``.

    Args:
        owner: the model or function name used in messages.
        name: the argument name used in messages.
        targets (Tensor[B] | Tensor[B, L]): the targets.
        num_targets: the number of targets ``L``.

    Returns:
        Tensor[B, L]: ``targets`` (a ``[B]`` tensor as one column).

    Raises:
        TypeError: ``targets`` is not a tensor of a floating dtype (integer labels given
            to a regressor, bool, complex).
        ValueError: a shape other than ``[B, L]`` (or ``[B]`` for ``L = 1``), or a NaN /
            Inf target.
    """
    expected = f"float targets of shape [B, {num_targets}]" + (
        " or [B]" if num_targets == 1 else ""
    )
    if not isinstance(targets, Tensor):
        raise TypeError(
            f"{owner}: argument '{name}' must be a tensor of {expected}, "
            f"got {type(targets).__name__}"
        )
    if not targets.is_floating_point():
        raise TypeError(
            f"{owner}: argument '{name}' must be {expected}, got dtype {targets.dtype} "
            "(a regressor takes real-valued targets: convert them with .float(); for class "
            "labels use KernelClassifier)"
        )
    if targets.ndim == 1 and num_targets == 1:
        targets = targets[:, None]
    if targets.ndim != 2 or targets.shape[1] != num_targets:
        raise ValueError(
            f"{owner}: argument '{name}' must be {expected}, got shape {list(targets.shape)}"
        )
    check_finite(owner, name, targets)
    return targets
