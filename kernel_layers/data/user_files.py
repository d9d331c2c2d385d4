"""Raw feature rows from a user's file: ``.npy``, ``.csv`` or a folder of images.

Used to predict on new data (:meth:`ArrayDataModule.set_predict_source
<kernel_layers.data.base.ArrayDataModule.set_predict_source>`); no code is ever executed
while reading.

CSV header rule: the first row is a header, and skipped, when it has text and no number
(a field such as ``NA``, ``N/A``, ``null``, ``None`` or an empty one is taken as a name
there), or when its ``D >= 3`` fields are exactly ``0, 1, ..., D-1`` in order (written ``0,1,2`` or
``0.0,1.0,2.0``): the column names ``pandas.DataFrame(x).to_csv(path, index=False)``
writes. A first data row that is exactly ``0, 1, ..., D-1`` is therefore read as a
header: keep such data in a ``.npy`` file. With one or two columns such a first row
(``0`` or ``0,1``) is as likely data as a header, and the file is refused: give it a text
header (``x0,x1``) or none that looks like ``0,1``. A row with a missing value is
refused (the message names its line), the first row too, and so is a first row that
mixes numbers and text (``1.5,?,3``: data with a bad value, or a header with a numeric
name); only blank lines are skipped. Line ends may be ``\n``, ``\r\n`` or ``\r``.

Image range rule: a pixel ``v`` of an image file whose values run to ``M`` (``255`` for
8-bit images, ``65535`` for 16-bit grayscale PNGs) becomes ``v * pixel_max / M`` in the
training data's units (``pixel_max``: ``16`` for the digits, ``255`` for MNIST). Without
a known ``pixel_max`` image folders are refused, and so are images with transparent pixels
(their content may lie in the alpha channel) and image modes of unknown range.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kernel_layers.data.gzipped import read_text
from kernel_layers.data.splits import REAL_KINDS

__all__ = ["IMAGE_SUFFIXES", "csv_rows", "image_files", "read_feature_rows"]

#: Fewest columns of a first row ``0, 1, ..., D-1`` taken for pandas' column names.
MIN_NUMERIC_HEADER = 3
#: CSV fields that stand for a missing value (compared in lower case): not header text.
MISSING_FIELDS = frozenset({"", "na", "n/a", "null", "none"})
#: Image files read by :func:`read_feature_rows` from a folder.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
#: Largest pixel value of the 8-bit and 16-bit image modes that are read.
_MODE_MAX = {"I;16": 65535.0, "I;16L": 65535.0, "I;16B": 65535.0, "I;16N": 65535.0}
_EIGHT_BIT_MODES = ("1", "L", "P", "LA", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "LAB")


def read_feature_rows(
    path: str | os.PathLike[str],
    input_shape: Sequence[int],
    *,
    owner: str = "read_feature_rows",
    pixel_max: float | None = None,
    images: Sequence[Path] | None = None,
) -> np.ndarray:
    """Raw feature rows from a user file or image folder (no code is ever executed).

    Args:
        path: ``.npy`` (read with ``allow_pickle=False``), ``.csv`` (comma-separated
            numbers; a header row is skipped by the rule of this module's docstring), or
            a folder of images (:func:`image_files`' natural order; decoded as grayscale
            for one channel, RGB for three; each must be ``input_shape``'s height x width).
        input_shape: the shape of one sample, ``(D,)`` or ``(C, H, W)``.
        owner: the caller's name for messages.
        pixel_max: the largest pixel value in the training data's units; an image folder
            needs it (pixels are converted to those units), ``None`` refuses one.
        images: for a folder, its image files to read, in that order (``None``:
            :func:`image_files` of it); a caller that names the rows lists them once.

    Returns:
        np.ndarray[N, prod(input_shape)]: float64 rows in the training data's units.

    Raises:
        ValueError: an unsupported file type, an empty source, rows of the wrong size
            (the message names the file and both sizes), or an image that cannot be
            converted to the training data's range.
    """
    source = Path(path)
    width = int(np.prod(input_shape))
    if source.is_dir():
        files = image_files(source) if images is None else list(images)
        rows = _read_image_folder(source, files, input_shape, owner, pixel_max)
    elif source.suffix.lower() == ".npy":
        try:  # mapped first: a header claiming more rows than the file holds is refused
            loaded = np.load(source, mmap_mode="r", allow_pickle=False)  # before any copy
        except (ValueError, EOFError) as err:  # EOFError: an empty or truncated file
            raise ValueError(
                f"{owner}: cannot read {str(source)!r} as a .npy array without pickles "
                f"({err or type(err).__name__})"
            ) from err
        if not isinstance(loaded, np.ndarray):  # an .npz archive under a .npy name
            loaded.close()
            raise ValueError(
                f"{owner}: {str(source)!r} must hold one .npy array, got an .npz archive "
                f"({type(loaded).__name__})"
            )
        rows = np.array(loaded)  # in memory, the file's mapping released
        del loaded
        if rows.dtype.kind not in REAL_KINDS:
            raise ValueError(
                f"{owner}: {str(source)!r} must hold real numbers, got dtype {rows.dtype}"
            )
    elif source.suffix.lower() == ".csv":
        rows = csv_rows(read_text(source, owner), owner=owner, source=str(source))
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


def csv_rows(text: str, *, owner: str = "csv_rows", source: str = "the CSV") -> np.ndarray:
    """The numbers of a comma-separated text, its header row skipped (module docstring).

    Args:
        text: the file's text.
        owner: the caller's name for messages.
        source: the file's name for messages.

    Returns:
        np.ndarray[N, D]: float64 rows (``N = 0`` for a text without data rows).

    Raises:
        ValueError: a field that is not a number, rows of different lengths (the message
            names the file and the line), or a first row ``0`` / ``0,1`` that may be a
            header or data.
    """
    lines = [
        (number, [field.strip() for field in fields])  # blank lines skipped: [] or spaces
        for number, fields in enumerate(csv.reader(text.splitlines()), start=1)
        if fields and (len(fields) > 1 or fields[0] == "" or fields[0].strip())
    ]
    width = 0
    if lines and _is_header(lines[0][1], owner, source):
        width = len(lines[0][1])
        lines = lines[1:]
    rows = []
    for number, fields in lines:
        try:
            rows.append([parse_float(field) for field in fields])
        except ValueError as err:
            raise ValueError(
                f"{owner}: cannot read {source!r} as comma-separated numbers: line {number} ({err})"
            ) from err
        if not all(np.isfinite(rows[-1])):
            raise ValueError(
                f"{owner}: every value of {source!r} must be finite, line {number} holds "
                f"{next(f for f in fields if not np.isfinite(parse_float(f)))!r}"
            )
        if len(rows[-1]) != len(rows[0]):
            raise ValueError(
                f"{owner}: every row of {source!r} must have {len(rows[0])} values (its first "
                f"data row's), line {number} has {len(rows[-1])}"
            )
    if not rows:  # no data rows: [0, D] with the header's D
        return np.zeros((0, width), dtype=np.float64)
    return np.array(rows, dtype=np.float64)


def _is_header(fields: list[str], owner: str, source: str) -> bool:
    """A first row is a header if its fields are all text, or if it is ``0, 1, ...,
    D-1`` with ``D >= 3`` (module docstring); with ``D < 3`` that row is ambiguous and
    refused, and so is one that mixes numbers and text."""
    not_numbers = [field for field in fields if not _is_number(field)]
    text = [field for field in not_numbers if field.lower() not in MISSING_FIELDS]
    if text and len(not_numbers) == len(fields):
        return True  # no number: names (some may read as missing values, "x,NA")
    if text:
        raise ValueError(
            f"{owner}: cannot read {source!r} as comma-separated numbers: line 1 mixes "
            f"numbers and text ({text[0]!r}); a header row must be all names, a data row "
            "all numbers"
        )
    if not_numbers:  # only missing values among the numbers
        missing = not_numbers[0]
        index = " (pandas' header with its index column: write with index=False)"
        raise ValueError(
            f"{owner}: cannot read {source!r} as comma-separated numbers: line 1 has a "
            f"missing value ({missing!r}) among numbers"
            + (index if fields[0] == "" and len(fields) > 1 else "")
        )
    values = [parse_float(field) for field in fields]
    if values != [float(i) for i in range(len(values))]:
        return False
    if len(values) < MIN_NUMERIC_HEADER:
        raise ValueError(
            f"{owner}: the first row of {source!r} is {','.join(fields)}, which may be "
            "pandas' column names or data: with fewer than "
            f"{MIN_NUMERIC_HEADER} columns it cannot be told; write a text header (e.g. "
            "x0,x1) or save the rows as .npy"
        )
    return True


def _is_number(field: str) -> bool:
    try:
        parse_float(field)
    except ValueError:
        return False
    return True


def parse_float(field: str) -> float:
    """``float(field)``, but without Python's digit separators (``1_000``), which no CSV
    writer emits: such a field is not a number.

    Raises:
        ValueError: ``field`` is not a number.
    """
    if "_" in field:
        raise ValueError(f"could not convert string to float: {field!r}")
    return float(field)


def image_files(folder: Path) -> list[Path]:
    """The images of ``folder`` (suffixes :data:`IMAGE_SUFFIXES`) in natural order of
    their names: the numbers in a name compare as numbers (``2.png`` before
    ``10.png``), the rest as text; the order of the rows read from the folder."""
    images = [p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES]
    return sorted(images, key=lambda p: (_natural_key(p.name), p.name))


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """``name`` split into runs of decimal digits (compared as numbers) and text: the
    split's odd parts are the digit runs."""
    parts = re.split(r"(\d+)", name)
    return [(0, int(part)) if k % 2 else (1, part) for k, part in enumerate(parts)]


def _read_image_folder(
    folder: Path,
    files: list[Path],
    input_shape: Sequence[int],
    owner: str,
    pixel_max: float | None,
) -> np.ndarray:
    if len(input_shape) != 3 or input_shape[0] not in (1, 3):
        raise ValueError(
            f"{owner}: an image folder needs image data (sample shape (1 or 3, H, W)), "
            f"got sample shape {tuple(input_shape)}"
        )
    if pixel_max is None:
        raise ValueError(
            f"{owner}: cannot read the image folder {str(folder)!r}: the range of the "
            "training data's pixels is unknown, so the images cannot be converted to it "
            "(give TensorDataModule argument 'pixel_max', or pass the rows as a .npy file "
            "in the training data's units)"
        )
    if not files:
        raise ValueError(
            f"{owner}: the folder {str(folder)!r} holds no image ({list(IMAGE_SUFFIXES)})"
        )
    images = []
    for file in files:
        pixels, file_max = _decode_image(file, input_shape, owner)
        images.append(pixels * (pixel_max / file_max))
    return np.stack(images)


#: The EXIF tag of a camera's rotation, and its values that turn the image a quarter.
_ORIENTATION = 0x0112
_QUARTER_TURNS = (5, 6, 7, 8)


def _loaded_image(file: Path, input_shape: Sequence[int], owner: str) -> Any:
    """``file`` opened and decoded by PIL (an image to close), turned upright as its
    EXIF orientation says (as viewers show a camera's photo), its height and width
    those of ``input_shape`` (``(C, H, W)``) checked in its header before any pixel is
    decoded (a small file can hold an enormous image); or a ``ValueError`` naming it (a
    truncated or corrupt file, one that is no image, an animation, or an image of
    another size)."""
    from PIL import Image, ImageOps

    opened = None
    try:
        opened = Image.open(file)
        want, stored = tuple(input_shape[1:]), opened.size[::-1]  # (height, width)
        # an MPO (a camera's JPEG with a depth map or gain map beside it) is one picture
        frames = 1 if opened.format == "MPO" else getattr(opened, "n_frames", 1)
        size = stored
        if frames == 1 and want in (stored, stored[::-1]):  # else refused undecoded
            turn = opened.getexif().get(_ORIENTATION, 1)  # a camera's rotation, as shown
            size = stored[::-1] if turn in _QUARTER_TURNS else stored
            if size == want:
                opened.load()
                if turn != 1:
                    upright = ImageOps.exif_transpose(opened)
                    upright.format = opened.format  # read by the 16-bit check
                    opened.close()
                    return upright
    # PIL's ways to say "not readable", and its refusal of an image too large to decode
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        if opened is not None:
            opened.close()
        raise ValueError(f"{owner}: cannot read the image {str(file)!r} ({err})") from err
    if frames > 1:
        opened.close()
        raise ValueError(
            f"{owner}: image {str(file)!r} holds {frames} frames (an animation); save "
            "each frame as an image of its own"
        )
    if size != want:
        opened.close()
        raise ValueError(
            f"{owner}: image {str(file)!r} must have shape {tuple(input_shape)} "
            f"(channels, height, width), got {(input_shape[0], *size)}"
        )
    return opened


def _decode_image(file: Path, input_shape: Sequence[int], owner: str) -> tuple[np.ndarray, float]:
    """``(pixels np.ndarray[C, H, W] float64, the largest value of the file's mode)`` of
    an image of ``input_shape`` (``(C, H, W)``)."""
    channels = int(input_shape[0])
    with _loaded_image(file, input_shape, owner) as opened:
        mode = opened.mode
        if mode in _MODE_MAX or (mode == "I" and opened.format == "PNG"):
            # A 16-bit grayscale PNG (PIL names it "I;16" or, in older releases, "I").
            gray = np.asarray(opened, dtype=np.float64)
            pixels = np.repeat(gray[None], channels, axis=0)
            return pixels, _MODE_MAX.get(mode, 65535.0)
        if mode not in _EIGHT_BIT_MODES:
            raise ValueError(
                f"{owner}: image {str(file)!r} has mode {mode!r}, whose pixel range is "
                "unknown; save it as an 8-bit or 16-bit grayscale or 8-bit RGB image"
            )
        if opened.has_transparency_data:
            alpha = np.asarray(opened.convert("RGBA"))[..., 3]
            if alpha.min() < 255:
                raise ValueError(
                    f"{owner}: image {str(file)!r} has transparent pixels (its alpha channel "
                    "is not fully opaque), so its content may lie in the alpha channel, "
                    "which is not read; flatten it onto its background and save it without "
                    "transparency"
                )
        decoded = np.asarray(opened.convert("L" if channels == 1 else "RGB"), dtype=np.float64)
    pixels = decoded[None] if decoded.ndim == 2 else decoded.transpose(2, 0, 1)
    return pixels, 255.0
