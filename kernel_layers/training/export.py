"""Write a :class:`~kernel_layers.training.predictor.Predictor` as an ONNX file, checked in
onnxruntime.

Needs the ``onnx`` extra (onnx, onnxscript, onnxruntime: ``pip install
"kernel-layers[onnx]"``), which training does not use.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_layers._files import replacing
from kernel_layers.training.predictor import Predictor

__all__ = ["ONNX_OPSET", "ExportCheck", "export_onnx", "require_onnx"]

#: ONNX opset of the exported files (what ``torch.onnx.export`` and onnxruntime share).
ONNX_OPSET = 18

_MISSING = (
    "exporting to ONNX needs onnx, onnxscript and onnxruntime; install the "
    "'onnx' extra: pip install \"kernel-layers[onnx]\" (from a checkout: pip install "
    '".[onnx]"); missing: {}'
)


class ExportCheck(NamedTuple):
    """The exported file against PyTorch on the example rows."""

    #: largest ``|onnxruntime - PyTorch|`` over the scores
    max_abs_gap: float
    #: fraction of rows whose class is the same (near ties may differ)
    classes_agree: float


def require_onnx() -> None:
    """Raise an :class:`ImportError` naming the ``onnx`` extra unless onnx, onnxscript and
    onnxruntime import."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401  (torch.onnx.export's dynamo path needs it)
    except ImportError as err:
        raise ImportError(_MISSING.format(err.name)) from err


def export_onnx(predictor: Predictor, path: str | os.PathLike[str], example: Tensor) -> ExportCheck:
    """Export ``predictor`` to ``path`` (input ``x``, outputs ``classes`` and ``scores``,
    any batch size) and run the file in onnxruntime on ``example``.

    The exported graph checks no inputs: a row with a NaN or infinite input (or score),
    or whose kernel-layer input is beyond the map's
    :meth:`~kernel_layers.layers.base.KernelFeatureMap.input_limit` (rows PyTorch refuses
    with a ``ValueError``), gets class ``-1``
    (:data:`~kernel_layers.training.predictor.NO_CLASS`), never a real class; a consumer
    tests ``classes >= 0`` before using a class.

    A float64 predictor exports a graph that computes in float64, but the exporter stores
    scalar constants (the kernel's ``gamma``, feature scales such as ``sqrt(2 / J)``) to
    float32 precision: its scores agree with PyTorch's to about ``1e-7`` relative, not to
    float64 round-off (``1e-15``).

    The file is written to a temporary name and renamed into place, so an interrupted
    export never leaves a truncated file (an existing file is replaced only by a complete
    one).

    Args:
        predictor: the module to export (:meth:`KernelClassifier.predictor
            <kernel_layers.training.module.KernelClassifier.predictor>`).
        path: the ``.onnx`` file to write.
        example (Tensor[B, ...]): inputs the exported graph is traced with and checked
            on (``B >= 2``).

    Returns:
        ExportCheck: the largest score gap and the class agreement on ``example``.

    Raises:
        ImportError: the ``onnx`` extra is not installed.
        TypeError: ``predictor`` is not a :class:`Predictor` or ``example`` not a tensor,
            or ``predictor`` refuses ``example``'s dtype.
        ValueError: ``path`` does not end in ``.onnx``, ``example`` has fewer than 2 rows,
            or ``predictor`` refuses ``example`` (its own message: a wrong width, NaN or
            too large values); no file is written.
        RuntimeError: onnxruntime cannot run the graph (no file is written).
    """
    if not isinstance(predictor, Predictor):
        raise TypeError(
            "export_onnx: argument 'predictor' must be a kernel_layers Predictor (what "
            f"KernelClassifier.predictor() returns), got {type(predictor).__name__}"
        )
    if not isinstance(example, Tensor):
        raise TypeError(
            "export_onnx: argument 'example' must be a torch.Tensor of input rows, got "
            f"{type(example).__name__}"
        )
    target = Path(path)
    if target.suffix != ".onnx":
        raise ValueError(f"export_onnx: argument 'path' must end in .onnx, got {str(path)!r}")
    if example.ndim < 2 or example.shape[0] < 2:
        raise ValueError(
            "export_onnx: argument 'example' must be a batch of at least 2 rows, got shape "
            f"{list(example.shape)}"
        )
    require_onnx()
    import onnxruntime as ort

    predictor = copy.deepcopy(predictor).cpu().eval()  # the caller's stays where it is
    example = example.cpu()
    with torch.no_grad():  # the library's own checks of the example, before the exporter's
        want_classes, want_scores = predictor(example)
    with replacing(target) as fresh:  # a new file beside target, renamed over it
        scratch = str(fresh)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's progress and deprecations
            program = torch.onnx.export(
                predictor,
                (example,),
                dynamo=True,
                opset_version=ONNX_OPSET,
                input_names=["x"],
                output_names=["classes", "scores"],
                dynamic_shapes={"x": {0: "batch"}},
                verbose=False,
            )
        if program is None:
            raise RuntimeError("export_onnx: torch.onnx.export returned no program")
        program.save(scratch)
        try:
            session = ort.InferenceSession(scratch, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types
            raise RuntimeError(
                f"export_onnx: onnxruntime cannot run the exported graph ({err}); its CPU "
                "kernels for some operators (convolutions among them) are float32 only: "
                "export such a model in float32"
            ) from err
        classes, scores = session.run(None, {"x": example.numpy()})
        check = ExportCheck(
            float((torch.from_numpy(scores) - want_scores).abs().max()),
            float((torch.from_numpy(classes) == want_classes).double().mean()),
        )
    return check
