"""Pictures of a run: training curves, landmarks as images, learned bandwidths.

* :func:`plot_curves` reads a ``CSVLogger`` ``metrics.csv`` and draws the epoch DI, the
  learning rate and the validation accuracy against the epoch.
* :func:`plot_landmarks` draws Nyström landmarks of image data as a grid of images.
* :func:`plot_bandwidths` draws a histogram of an ARD layer's bandwidths
  (``FourierLayer`` or ``NystromLayer``).
* :class:`KernelPlots` (a callback) keeps the landmarks a fit starts from and, when it
  ends, draws them beside the learned ones (and the bandwidths) into the log directory,
  and to TensorBoard when that logger is used.

``kernel-layers plot RUN_DIR [--ckpt PATH]`` draws all of them from a finished run.
Needs matplotlib (``pip install "kernel-layers[plot]"``).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from kernel_layers._validation import check_int

__all__ = ["CURVES", "KernelPlots", "plot_bandwidths", "plot_curves", "plot_landmarks"]

#: Panels of :func:`plot_curves`: (title, metric columns tried in order).
CURVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("epoch objective (train/loss_epoch; -DI for DI)", ("train/loss_epoch",)),
    ("learning rate", ("lr", "lr_epoch")),
    ("validation accuracy", ("val/acc",)),
)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "kernel-layers plots need matplotlib: pip install 'kernel-layers[plot]'"
        ) from err
    return plt


def _read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """``metric -> [(epoch, value)]`` from a CSVLogger file (last value of each epoch)."""
    series: dict[str, dict[int, float]] = {}
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            if None in row:  # more fields than the header names
                raise ValueError(
                    f"plot_curves: argument 'run_dir' must hold a CSVLogger metrics.csv whose "
                    f"rows have the header's {len(reader.fieldnames or [])} fields, got "
                    f"{len(row) - 1 + len(row[None])} on line {reader.line_num} of '{path}'"
                )
            epoch_text = row.get("epoch", "")
            if not epoch_text:
                continue
            epoch = int(float(epoch_text))
            for key, text in row.items():
                if key in ("epoch", "step") or not text:
                    continue
                try:
                    series.setdefault(key, {})[epoch] = float(text)
                except ValueError:
                    continue
    return {key: sorted(values.items()) for key, values in series.items()}


def plot_curves(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Draw the epoch DI, learning rate and validation accuracy of a run.

    Args:
        run_dir: a CSVLogger version folder (holding ``metrics.csv``) or the file itself.
        out_dir: where to write ``curves.png`` (default: beside ``metrics.csv``).

    Returns:
        Path: the PNG written.

    Raises:
        ValueError: no ``metrics.csv``, or none of the plotted metrics in it.
    """
    source = Path(run_dir)
    metrics = source if source.is_file() else source / "metrics.csv"
    if not metrics.is_file():
        raise ValueError(
            f"plot_curves: argument 'run_dir' must hold a CSVLogger metrics.csv, got "
            f"'{source}' (no {metrics.name} there)"
        )
    series = _read_metrics(metrics)
    panels = [
        (title, next((series[c] for c in columns if c in series), None))
        for title, columns in CURVES
    ]
    present = [(title, values) for title, values in panels if values]
    if not present:
        raise ValueError(
            f"plot_curves: '{metrics}' holds none of "
            f"{[c for _, columns in CURVES for c in columns]}"
        )
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 3.2))
    for axis, (title, values) in zip(np.atleast_1d(axes), present, strict=True):
        epochs, numbers = zip(*values, strict=True)
        axis.plot(epochs, numbers, marker=".")
        axis.set_title(title)
        axis.set_xlabel("epoch")
        if title.startswith("learning rate"):
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out_dir) if out_dir is not None else metrics.parent
    out.mkdir(parents=True, exist_ok=True)
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _grid(images: np.ndarray, columns: int) -> np.ndarray:
    """Tile ``images [n, h, w]`` into one ``[rows * (h+1), columns * (w+1)]`` picture."""
    n, h, w = images.shape
    rows = math.ceil(n / columns)
    canvas = np.full((rows * (h + 1), columns * (w + 1)), np.nan)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        canvas[r * (h + 1) : r * (h + 1) + h, c * (w + 1) : c * (w + 1) + w] = image
    return canvas


def plot_landmarks(
    panels: Sequence[tuple[str, Tensor]],
    image_shape: Sequence[int],
    path: str | os.PathLike[str],
    *,
    count: int = 64,
) -> Path:
    """Draw landmarks of image data as grids of images, one panel per set.

    Args:
        panels: ``(title, landmarks (Tensor[n, H*W]))`` pairs, e.g. before / after.
        image_shape: ``(H, W)`` or ``(1, H, W)`` of one image.
        path: the PNG to write.
        count: how many landmarks (the first ones) to draw per panel.

    Raises:
        ValueError: ``image_shape`` does not give the landmarks' width ``H * W``.
    """
    count = check_int("plot_landmarks", "count", count)
    height, width = (int(s) for s in tuple(image_shape)[-2:])
    for _, landmarks in panels:
        if landmarks.shape[-1] != height * width:
            raise ValueError(
                "plot_landmarks: argument 'image_shape' must give images of the landmarks' "
                f"width, {landmarks.shape[-1]} columns; got {tuple(image_shape)} "
                f"({height * width} columns)"
            )
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.4))
    for axis, (title, landmarks) in zip(np.atleast_1d(axes), panels, strict=True):
        data = landmarks.detach().double().cpu().numpy()[:count]
        columns = math.ceil(math.sqrt(len(data)))
        axis.imshow(_grid(data.reshape(-1, height, width), columns), cmap="gray")
        axis.set_title(title)
        axis.axis("off")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_bandwidths(bandwidth: Tensor, path: str | os.PathLike[str], *, title: str = "") -> Path:
    """Histogram of learned bandwidths ``sigma (Tensor[K])`` (log scale)."""
    values = bandwidth.detach().double().cpu().numpy()
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(4.6, 3.2))
    bins = np.logspace(np.log10(values.min()), np.log10(values.max()) + 1e-12, 30)
    axis.hist(values, bins=bins)
    axis.set_xscale("log")
    axis.set_xlabel("bandwidth sigma")
    axis.set_ylabel("count")
    axis.set_title(title or f"learned bandwidths ({len(values)})")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw_model(
    module: Any, out_dir: Path, image_shape: Sequence[int] | None, before: Tensor | None
) -> list[Path]:
    """The landmark grids and bandwidth histogram of a ``KernelClassifier``'s layer."""
    written: list[Path] = []
    layer = getattr(module, "kernel_layer", module)
    landmarks = getattr(layer, "landmarks", None)
    if isinstance(landmarks, Tensor) and image_shape is not None:
        panels = [("landmarks before training", before)] if before is not None else []
        panels.append(("landmarks after training", landmarks))
        written.append(plot_landmarks(panels, image_shape, out_dir / "landmarks.png"))
    if getattr(layer, "ard", False):
        written.append(plot_bandwidths(layer.bandwidth, out_dir / "bandwidths.png"))
    return written


class KernelPlots(Callback):
    """Draw the run's pictures into its log directory when a fit ends.

    Keeps the landmarks the fit starts from (after ``KernelClassifier`` initialised them
    from data), then writes ``curves.png`` (with a CSV logger), ``landmarks.png`` (image
    data) and ``bandwidths.png`` (ARD layers, Fourier or Nystrom); with a TensorBoard logger the
    pictures are also added to it.

    Args:
        image_shape: ``(H, W)`` of the inputs when they are images; default: the data
            module's ``image_shape`` if it has one.
    """

    def __init__(self, image_shape: Sequence[int] | None = None) -> None:
        self.image_shape = image_shape
        self._before: Tensor | None = None
        self.written: list[Path] = []

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # At the first step, after KernelClassifier.on_train_start initialised the
        # landmarks from data (callbacks' on_train_start runs before the module's).
        if self._before is not None or trainer.global_step > 0:
            return
        landmarks = getattr(getattr(pl_module, "kernel_layer", None), "landmarks", None)
        if isinstance(landmarks, Tensor):
            self._before = landmarks.detach().clone().cpu()

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        out = Path(trainer.log_dir or trainer.default_root_dir)
        datamodule = getattr(trainer, "datamodule", None)
        shape = self.image_shape or getattr(datamodule, "image_shape", None)
        self.written = []
        metrics = out / "metrics.csv"
        if metrics.is_file():
            self.written.append(plot_curves(out))
        has_backbone = getattr(pl_module, "backbone", None) is not None
        self.written += draw_model(pl_module, out, None if has_backbone else shape, self._before)
        experiment: Any = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "add_image"):
            from PIL import Image

            for path in self.written:
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                experiment.add_image(
                    f"kernel-layers/{path.stem}",
                    torch.from_numpy(pixels.copy()).permute(2, 0, 1),
                    trainer.global_step,
                )
