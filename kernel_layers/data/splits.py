"""Checking raw arrays and carving the seeded train / validation / test splits."""

from __future__ import annotations

import numpy as np

__all__ = ["check_arrays", "split_seeds", "validation_split"]


def split_seeds(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent generators for the train/test split and the validation split."""
    test_seq, val_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(test_seq), np.random.default_rng(val_seq)


def check_arrays(
    owner: str, x: np.ndarray, y: np.ndarray, split: str, *, in_features: int, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Flatten and check the raw arrays of one split.

    Args:
        owner: the data module's name for messages.
        x (np.ndarray[N, ...]): raw features, ``in_features`` values a row once flattened.
        y (np.ndarray[N]): integer labels in ``[0, num_classes)``.
        split: the split's name for messages.
        in_features: flattened feature dimension ``D``.
        num_classes: number of classes.

    Returns:
        tuple: ``x (np.ndarray[N, D])`` and ``y (np.ndarray[N])`` as int64.

    Raises:
        ValueError: a wrong width, labels of the wrong shape or range, or NaN / Inf features.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    x = x.reshape(len(x), -1)
    if x.shape[1] != in_features:
        raise ValueError(
            f"{owner}: {split} features must have {in_features} columns, got {x.shape[1]}"
        )
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"{owner}: {split} labels must have shape [{len(x)}], got {list(y.shape)}")
    if len(y) and (
        not np.all(np.isfinite(y))
        or not np.all(y == np.round(y))
        or y.min() < 0
        or y.max() >= num_classes
    ):
        raise ValueError(
            f"{owner}: {split} labels must be integers in [0, {num_classes}), "
            f"got values in [{y.min()}, {y.max()}]"
        )
    if not np.issubdtype(x.dtype, np.integer) and not np.all(np.isfinite(x)):
        raise ValueError(f"{owner}: {split} features contain NaN or Inf")
    return x, y.astype(np.int64)


def validation_split(
    owner: str, n: int, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded indices of the validation rows and of the rows kept for training.

    Args:
        owner: the data module's name for messages.
        n: rows of the training split.
        val_fraction: fraction held out, in ``[0, 1)``; at least one row when positive.
        seed: seed of the split (:func:`split_seeds`).

    Returns:
        tuple: sorted ``val_idx (np.ndarray[n_val])`` and ``fit_idx (np.ndarray[n - n_val])``.

    Raises:
        ValueError: no training row would be left.
    """
    n_val = round(val_fraction * n)
    if val_fraction > 0:
        n_val = max(n_val, 1)
    if n - n_val < 1:
        raise ValueError(
            f"{owner}: the training split has {n} rows, too few to hold out "
            f"val_fraction={val_fraction} for validation"
        )
    _, val_rng = split_seeds(seed)
    perm = val_rng.permutation(n)
    return np.sort(perm[:n_val]), np.sort(perm[n_val:])
