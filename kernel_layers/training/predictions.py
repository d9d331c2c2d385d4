"""Write a model's predictions to a file: CSV (index, an image folder's file names,
prediction, scores) or ``.pt``."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import Tensor

from kernel_layers._files import cannot_write, replacing

__all__ = ["OUTPUT_FORMATS", "PredictionWriter", "check_not_an_input", "write_predictions"]

#: File suffixes understood by :func:`write_predictions`.
OUTPUT_FORMATS = (".csv", ".pt")


def _check_output(path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    if out.suffix not in OUTPUT_FORMATS:
        raise ValueError(
            f"PredictionWriter: argument 'output' must end in one of {list(OUTPUT_FORMATS)}, "
            f"got {str(path)!r}"
        )
    if out.is_dir():
        raise ValueError(f"PredictionWriter: argument 'output' is a directory: {str(path)!r}")
    why = cannot_write(out.parent)  # before the predictions, not after them
    if why is not None:
        raise ValueError(
            f"PredictionWriter: argument 'output' must be a file in a folder that can be "
            f"written, got {str(path)!r} ({why})"
        )
    return out


def check_not_an_input(
    output: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str] | None],
    *,
    owner: str = "PredictionWriter",
    name: str = "output",
) -> None:
    """Refuse an output file that is one of the inputs (the same file once links resolve).

    Args:
        output: the predictions' file.
        inputs: the files the run reads (the rows predicted, the checkpoint); ``None``
            entries and folders are skipped.
        owner: the caller's name for messages.
        name: the output argument's name for messages.

    Raises:
        ValueError: ``output`` is one of ``inputs``: writing it would destroy that input.
    """
    out = Path(output)
    for source in inputs:
        if source is None or not Path(source).is_file():
            continue
        same = out.resolve() == Path(source).resolve() or (
            out.exists() and os.path.samefile(out, source)
        )
        if same:
            raise ValueError(
                f"{owner}: argument {name!r} {str(output)!r} is the input file "
                f"{str(source)!r}; writing the predictions would overwrite it (choose "
                "another output file)"
            )


def _prediction_columns(predicted: Tensor) -> tuple[list[str], list[list[Any]]]:
    """The CSV header and cells of ``predicted``: classes ``Tensor[N]`` in one column
    ``prediction``; a regressor's values ``Tensor[N, L]`` in ``prediction`` (one target)
    or ``prediction_0 .. prediction_{L-1}``, written with 9 significant digits."""
    if predicted.ndim == 1:
        if predicted.is_floating_point():
            return ["prediction"], [[f"{v:.9g}"] for v in predicted.tolist()]
        return ["prediction"], [[c] for c in predicted.tolist()]
    width = predicted.shape[1]
    header = ["prediction"] if width == 1 else [f"prediction_{j}" for j in range(width)]
    return header, [[f"{v:.9g}" for v in row] for row in predicted.tolist()]


def _write(
    tmp: Path,
    suffix: str,
    classes: Tensor,
    scores: Tensor | None,
    index: Tensor,
    names: Sequence[str] | None,
) -> None:
    """Write :func:`write_predictions`' file to ``tmp`` in the format of ``suffix``."""
    if suffix == ".pt":
        payload: dict[str, Any] = {"index": index.cpu(), "prediction": classes.cpu()}
        if scores is not None:
            payload["scores"] = scores.cpu()
        if names is not None:
            payload["file"] = list(names)
        torch.save(payload, tmp)
    else:
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            predicted = _prediction_columns(classes)
            header = ["index", *(["file"] if names is not None else []), *predicted[0]]
            if scores is not None:
                header += [f"score_{j}" for j in range(scores.shape[1])]
            writer.writerow(header)
            file_of = (lambda _: []) if names is None else (lambda k: [names[k]])
            rows = [
                [i, *file_of(k), *cells]
                for k, (i, cells) in enumerate(zip(index.tolist(), predicted[1], strict=True))
            ]
            if scores is not None:
                rows = [
                    [*row, *(f"{v:.9g}" for v in s)]
                    for row, s in zip(rows, scores.tolist(), strict=True)
                ]
            writer.writerows(rows)


def write_predictions(
    path: str | os.PathLike[str],
    classes: Tensor,
    scores: Tensor | None = None,
    index: Tensor | None = None,
    names: Sequence[str] | None = None,
) -> Path:
    """Write predictions atomically (a temporary file renamed into place).

    Args:
        path: ``.csv`` (columns ``index[, file], prediction[, score_0 .. score_{L-1}]``;
            for a regressor's ``L > 1`` targets ``prediction_0 .. prediction_{L-1}``) or
            ``.pt`` (a dict of tensors ``index``, ``prediction``[, ``scores``], and with
            ``names`` the list ``file``).
        classes (Tensor[N] | Tensor[N, L]): predicted classes, or a regressor's
            predictions.
        scores (Tensor[N, L] | None): per-class scores.
        index (Tensor[N] | None): row indices (default ``0 .. N-1``).
        names: the file each row was read from (an image folder's), one per row.

    Returns:
        Path: the file written.

    Raises:
        ValueError: ``names`` does not hold one name per row.
    """
    out = _check_output(path)
    index = torch.arange(len(classes)) if index is None else index
    if names is not None and len(names) != len(classes):
        raise ValueError(
            f"write_predictions: argument 'names' must hold one name per row "
            f"({len(classes)}), got {len(names)}"
        )
    with replacing(out) as tmp:
        _write(tmp, out.suffix, classes, scores, index, names)
    return out


class PredictionWriter(BasePredictionWriter):
    """Collect ``predict_step`` outputs and write them to ``output`` when predicting ends.

    Works with :class:`~kernel_layers.KernelClassifier` (``return_scores=True`` gives
    the scores too) and :class:`~kernel_layers.KernelRegressor` under
    ``Trainer.predict`` and ``kernel-layers predict``.

    Args:
        output: ``.csv`` or ``.pt`` file (see :func:`write_predictions`); an existing
            file there is replaced, and the message printed says so.
        scores: write the per-class scores when the model returns them.

    Attributes:
        path (Path | None): the file written by the last prediction run.
    """

    def __init__(self, output: str | os.PathLike[str], *, scores: bool = True) -> None:
        super().__init__(write_interval="epoch")
        self.output = _check_output(output)
        self.scores = bool(scores)
        self.path: Path | None = None

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Refuse an output that is the predicted file or the checkpoint, before any batch."""
        source = getattr(getattr(trainer, "datamodule", None), "predict_path", None)
        check_not_an_input(self.output, [source, trainer.ckpt_path])

    def write_on_epoch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        predictions: Any,
        batch_indices: Any,
    ) -> None:
        outputs = (
            predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        )
        if not outputs:
            raise RuntimeError("PredictionWriter: the prediction run produced no batches")
        if isinstance(outputs[0], tuple | list):
            classes = torch.cat([o[0] for o in outputs])
            scores = torch.cat([o[1] for o in outputs]) if self.scores else None
        else:
            classes, scores = torch.cat(list(outputs)), None
        if trainer.world_size > 1:
            raise RuntimeError(
                "PredictionWriter: predict on one device (--trainer.devices 1); rows "
                "gathered from several processes are not reordered"
            )
        names = getattr(getattr(trainer, "datamodule", None), "predict_row_names", None)
        if names is not None:  # the rows served are the first, in order (limit_predict_batches)
            names = names[: len(classes)]
        replaced = self.output.exists()  # said, so that no file is lost silently
        self.path = write_predictions(self.output, classes, scores, names=names)
        note = "; it replaced the file that was there" if replaced else ""
        print(f"predictions written to {self.path} ({len(classes)} rows{note})")
