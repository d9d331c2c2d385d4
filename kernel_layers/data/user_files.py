"""Raw feature rows from a user's file: ``.npy``, ``.csv`` or a folder of images.

Used to predict on new data (:meth:`ArrayDataModule.set_predict_source
<kernel_layers.data.base.ArrayDataModule.set_predict_source>`); no code is ever executed
while reading.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kernel_layers.data.gzipped import read_text

__all__ = ["IMAGE_SUFFIXES", "read_feature_rows"]

#: Image files read by :func:`read_feature_rows` from a folder.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def read_feature_rows(
    path: str | os.PathLike[str], input_shape: Sequence[int], *, owner: str = "read_feature_rows"
) -> np.ndarray:
    """Raw feature rows from a user file or image folder (no code is ever executed).

    Args:
        path: ``.npy`` (read with ``allow_pickle=False``), ``.csv`` (comma-separated
            numbers, an optional header row), or a folder of images (file-name order;
            decoded as grayscale for one channel, RGB for three; each must be
            ``input_shape``'s height x width).
        input_shape: the shape of one sample, ``(D,)`` or ``(C, H, W)``.
        owner: the caller's name for messages.

    Returns:
        np.ndarray[N, prod(input_shape)]: float64 rows in the file's units.

    Raises:
        ValueError: an unsupported file type, an empty source, or rows of the wrong size
            (the message names the file and both sizes).
    """
    source = Path(path)
    width = int(np.prod(input_shape))
    if source.is_dir():
        rows = _read_image_folder(source, input_shape, owner)
    elif source.suffix == ".npy":
        try:
            rows = np.load(source, allow_pickle=False)
        except ValueError as err:
            raise ValueError(
                f"{owner}: cannot read {str(source)!r} as a .npy array without pickles ({err})"
            ) from err
    elif source.suffix == ".csv":
        lines = [line for line in read_text(source).splitlines() if line.strip()]
        if lines and not _is_numeric_row(lines[0]):
            lines = lines[1:]  # a header row
        try:
            rows = np.array([[float(v) for v in line.split(",")] for line in lines])
        except ValueError as err:
            raise ValueError(
                f"{owner}: cannot read {str(source)!r} as comma-separated numbers ({err})"
            ) from err
    else:
        raise ValueError(
            f"{owner}: argument 'path' must be a .npy or .csv file or an image folder, "
            f"got {str(source)!r}"
        )
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim == 0 or len(rows) == 0:
        raise ValueError(f"{owner}: {str(source)!r} holds no rows")
    rows = rows.reshape(len(rows), -1)
    if rows.shape[1] != width:
        raise ValueError(
            f"{owner}: {str(source)!r} must hold rows of {width} values (the data's "
            f"sample shape {tuple(input_shape)}), got {rows.shape[1]}"
        )
    if not np.isfinite(rows).all():
        raise ValueError(f"{owner}: {str(source)!r} holds NaN or Inf values")
    return rows


def _is_numeric_row(line: str) -> bool:
    try:
        [float(v) for v in line.split(",")]
    except ValueError:
        return False
    return True


def _read_image_folder(folder: Path, input_shape: Sequence[int], owner: str) -> np.ndarray:
    from PIL import Image

    if len(input_shape) != 3 or input_shape[0] not in (1, 3):
        raise ValueError(
            f"{owner}: an image folder needs image data (sample shape (1 or 3, H, W)), "
            f"got sample shape {tuple(input_shape)}"
        )
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(
            f"{owner}: the folder {str(folder)!r} holds no image ({list(IMAGE_SUFFIXES)})"
        )
    mode = "L" if input_shape[0] == 1 else "RGB"
    images = []
    for file in files:
        with Image.open(file) as opened:
            pixels = np.asarray(opened.convert(mode))
        image = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        if tuple(image.shape) != tuple(input_shape):
            raise ValueError(
                f"{owner}: image {str(file)!r} must have shape {tuple(input_shape)} "
                f"(channels, height, width), got {tuple(image.shape)}"
            )
        images.append(image)
    return np.stack(images).astype(np.float64)
