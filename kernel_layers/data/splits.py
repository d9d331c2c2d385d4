"""Checking raw arrays and carving the seeded train / validation / test splits."""

from __future__ import annotations

import numpy as np

__all__ = [
    "MAX_RAW_MAGNITUDE",
    "REAL_KINDS",
    "check_arrays",
    "check_feature_values",
    "check_label_values",
    "check_target_values",
    "split_seeds",
    "validation_split",
]

#: NumPy dtype kinds of real numbers: bool, signed and unsigned integers, floats.
REAL_KINDS = "biuf"
#: Largest raw feature magnitude: the min-max scaling's span ``max - min`` of values up
#: to this stays finite in float64 (``1e308`` and ``-1e308`` would span Inf, then NaN).
MAX_RAW_MAGNITUDE = float(np.finfo(np.float64).max) / 2


def check_feature_values(owner: str, what: str, x: np.ndarray) -> None:
    """Raise unless ``x`` holds real, finite numbers within :data:`MAX_RAW_MAGNITUDE`.

    Args:
        owner: the data module's name for messages.
        what: what ``x`` is, for messages (``"train features"``, ``"argument 'x_train'"``).
        x (np.ndarray[N, ...]): raw features.

    Raises:
        TypeError: not a real dtype (complex, datetime, strings, objects).
        ValueError: NaN / Inf, or a magnitude beyond :data:`MAX_RAW_MAGNITUDE`.
    """
    if x.dtype.kind not in REAL_KINDS:
        raise TypeError(
            f"{owner}: {what} must hold real numbers (bool, integer or float), got dtype {x.dtype}"
        )
    if x.size == 0 or x.dtype.kind in "biu":
        return
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{owner}: {what} contain NaN or Inf{_first_bad(x)}")
    largest = float(np.max(np.abs(x)))
    if largest > MAX_RAW_MAGNITUDE:
        raise ValueError(
            f"{owner}: {what} must have |value| <= {MAX_RAW_MAGNITUDE:.4g} (the min-max "
            f"scaling's span max - min overflows float64 beyond), got max |value| = "
            f"{largest:.4g}"
        )


def check_label_values(
    owner: str, what: str, y: np.ndarray, num_classes: int | None, hint: str = ""
) -> None:
    """Raise unless ``y`` holds integers in ``[0, num_classes)`` (or ``>= 0`` when ``None``).

    Args:
        owner: the data module's name for messages.
        what: what ``y`` is, for messages.
        y (np.ndarray[N]): labels.
        num_classes: number of classes, or ``None`` to check only for non-negative integers.
        hint: appended to the message of labels out of range.

    Raises:
        TypeError: not a real dtype (strings, objects, complex, datetime).
        ValueError: a label that is not an integer in range.
    """
    if y.dtype.kind not in REAL_KINDS:
        raise TypeError(
            f"{owner}: {what} must hold integer class indices, got dtype {y.dtype} (map "
            "class names to 0..L-1 first, e.g. sklearn.preprocessing.LabelEncoder)"
        )
    if not y.size:
        return
    if y.dtype.kind == "b":
        y = y.astype(np.int64)
    high = np.inf if num_classes is None else num_classes
    expected = "integers >= 0" if num_classes is None else f"integers in [0, {num_classes})"
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{owner}: {what} must be {expected}, got NaN or Inf{_first_bad(y)}")
    if not np.all(y == np.round(y)) or y.min() < 0 or y.max() >= high:
        raise ValueError(
            f"{owner}: {what} must be {expected}, got values in [{y.min()}, {y.max()}]{hint}"
        )


def check_target_values(owner: str, what: str, y: np.ndarray) -> np.ndarray:
    """Raise unless ``y`` holds real, finite regression targets that float32 can hold.

    Args:
        owner: the data module's name for messages.
        what: what ``y`` is, for messages.
        y (np.ndarray[N] | np.ndarray[N, L]): targets.

    Returns:
        np.ndarray[N, L]: ``y`` as float32 (a ``[N]`` array as one column).

    Raises:
        TypeError: not a real dtype (strings, objects, complex, datetime).
        ValueError: not 1-D or 2-D, NaN / Inf, or a magnitude beyond float32's range.
    """
    if y.dtype.kind not in REAL_KINDS:
        raise TypeError(f"{owner}: {what} must hold real-valued targets, got dtype {y.dtype}")
    if y.ndim not in (1, 2):
        raise ValueError(f"{owner}: {what} must have shape [N] or [N, L], got {list(y.shape)}")
    y = y.reshape(len(y), -1)
    if y.size and not np.all(np.isfinite(y)):
        raise ValueError(f"{owner}: {what} contain NaN or Inf{_first_bad(y)}")
    limit = float(np.finfo(np.float32).max)
    if y.size and float(np.max(np.abs(y))) > limit:
        raise ValueError(
            f"{owner}: {what} must have |value| <= {limit:.4g} (stored as float32), got max "
            f"|value| = {float(np.max(np.abs(y))):.4g}"
        )
    return y.astype(np.float32)


def split_seeds(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent generators for the train/test split and the validation split."""
    test_seq, val_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(test_seq), np.random.default_rng(val_seq)


def check_arrays(
    owner: str,
    x: np.ndarray,
    y: np.ndarray,
    split: str,
    *,
    in_features: int,
    num_classes: int,
    num_targets: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Flatten and check the raw arrays of one split.

    Args:
        owner: the data module's name for messages.
        x (np.ndarray[N, ...]): raw features, ``in_features`` values a row once flattened.
        y (np.ndarray[N]): integer labels in ``[0, num_classes)``.
        split: the split's name for messages.
        in_features: flattened feature dimension ``D``.
        num_classes: number of classes.
        num_targets: ``None`` for labels; else ``y`` holds float targets
            (``np.ndarray[N, num_targets]``, or ``[N]`` for one) and ``num_classes`` is
            ignored.

    Returns:
        tuple: ``x (np.ndarray[N, D])`` and ``y``: ``np.ndarray[N]`` as int64, or float
        targets ``np.ndarray[N, L]`` as float32.

    Raises:
        TypeError: features or labels that are not real numbers.
        ValueError: no rows, a wrong width, labels of the wrong shape or range, or NaN /
            Inf features or features beyond :data:`MAX_RAW_MAGNITUDE`.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if len(x) == 0:
        raise ValueError(f"{owner}: the {split} split holds no rows")
    x = x.reshape(len(x), -1)
    if x.shape[1] != in_features:
        raise ValueError(
            f"{owner}: {split} features must have {in_features} columns, got {x.shape[1]}"
        )
    if num_targets is not None:
        check_feature_values(owner, f"{split} features", x)
        targets = check_target_values(owner, f"{split} targets", y)
        if len(targets) != len(x) or targets.shape[1] != num_targets:
            raise ValueError(
                f"{owner}: {split} targets must have shape [{len(x)}, {num_targets}], "
                f"got {list(y.shape)}"
            )
        return x, targets
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"{owner}: {split} labels must have shape [{len(x)}], got {list(y.shape)}")
    check_label_values(owner, f"{split} labels", y, num_classes)
    check_feature_values(owner, f"{split} features", x)
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


def _first_bad(values: np.ndarray) -> str:
    """``": N value(s), the first in row i"`` for the non-finite entries of ``values
    [N, ...]`` (rows counted from 0)."""
    bad = ~np.isfinite(values.reshape(len(values), -1))
    first = int(np.flatnonzero(bad.any(1))[0])
    return f": {int(bad.sum())} value(s), the first in row {first}"
