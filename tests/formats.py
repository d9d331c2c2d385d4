"""Writers of small files in the real on-disk formats (IDX, UCI CSV) for the data tests."""

from __future__ import annotations

import gzip
import string
import struct
from pathlib import Path

import numpy as np

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
N_TRAIN, N_TEST = 50, 20


def _write(path: Path, payload: bytes, gz: bool) -> None:
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as fh:
            fh.write(payload)
    else:
        path.write_bytes(payload)


def write_idx_images(path: Path, images: np.ndarray, *, gz: bool = False) -> None:
    """LeCun's IDX: magic 0x00000803, big-endian uint32 dims, uint8 pixels."""
    n, h, w = images.shape
    _write(path, struct.pack(">IIII", 0x00000803, n, h, w) + images.astype(np.uint8).tobytes(), gz)


def write_idx_labels(path: Path, labels: np.ndarray, *, gz: bool = False) -> None:
    """LeCun's IDX: magic 0x00000801, big-endian uint32 count, uint8 labels."""
    _write(
        path, struct.pack(">II", 0x00000801, len(labels)) + labels.astype(np.uint8).tobytes(), gz
    )


def make_mnist_dir(
    folder: Path, *, gz: bool = False, seed: int = 0, train_max: int = 100, test_pixel: int = 200
) -> dict[str, np.ndarray]:
    """Four IDX files: train pixels in [0, train_max], one test pixel planted at test_pixel."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    x_train = rng.integers(0, train_max + 1, size=(N_TRAIN, 28, 28), dtype=np.uint8)
    x_train[0, 0, 0], x_train[1, 0, 0] = 0, train_max
    x_test = rng.integers(0, train_max + 1, size=(N_TEST, 28, 28), dtype=np.uint8)
    x_test[0, 14, 14] = test_pixel
    y_train = np.arange(N_TRAIN) % 10
    y_test = np.arange(N_TEST) % 10
    write_idx_images(folder / IDX_NAMES[0], x_train, gz=gz)
    write_idx_labels(folder / IDX_NAMES[1], y_train, gz=gz)
    write_idx_images(folder / IDX_NAMES[2], x_test, gz=gz)
    write_idx_labels(folder / IDX_NAMES[3], y_test, gz=gz)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def write_covtype(path: Path, n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """UCI covtype.data(.gz): 54 integer columns then the cover type 1..7."""
    rng = np.random.default_rng(seed)
    x = np.concatenate(
        [rng.integers(-150, 3900, size=(n, 10)), rng.integers(0, 2, size=(n, 44))], axis=1
    )
    y = np.arange(n) % 7 + 1
    text = "\n".join(",".join(str(v) for v in row) for row in np.column_stack([x, y])) + "\n"
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        fh.write(text)
    return x, y


def write_letter(path: Path, n: int = 40, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """UCI letter-recognition.data: a capital letter then 16 integers in 0..15."""
    rng = np.random.default_rng(seed)
    letters = [string.ascii_uppercase[(7 * i + 19) % 26] for i in range(n)]
    x = rng.integers(0, 16, size=(n, 16))
    lines = [",".join([c, *map(str, row)]) for c, row in zip(letters, x, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return letters, x
