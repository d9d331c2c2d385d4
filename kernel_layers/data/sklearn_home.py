"""Data modules whose files live in a scikit-learn ``data_home`` (CovType, Letter)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_layers.data.base import ArrayDataModule

__all__ = ["SklearnHomeDataModule", "resolve_sklearn_home"]


def resolve_sklearn_home(data_home: str | os.PathLike[str] | None) -> Path:
    """scikit-learn's data home without creating it (``get_data_home`` would)."""
    if data_home is None:
        data_home = os.environ.get("SCIKIT_LEARN_DATA", os.path.join("~", "scikit_learn_data"))
    return Path(os.path.expanduser(os.fspath(data_home)))


class SklearnHomeDataModule(ArrayDataModule):
    """Common arguments of the data modules cached under scikit-learn's ``data_home``."""

    def __init__(
        self,
        data_home: str | os.PathLike[str] | None = None,
        *,
        download: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if data_home is not None and not isinstance(data_home, (str, os.PathLike)):
            raise TypeError(
                f"{self._name}: argument 'data_home' must be a str, path or None, "
                f"got {type(data_home).__name__}"
            )
        self._check_bool("download", download)
        self.data_home = resolve_sklearn_home(data_home)
        self.download = download
        self.input_shape = (self.in_features,)
        self._save_options()

    def _find_raw(self, names: Sequence[str], subdir: str) -> Path | None:
        for folder in (self.data_home, self.data_home / subdir):
            for name in names:
                if (folder / name).is_file():
                    return folder / name
        return None

    @staticmethod
    def _proportional_split(n: int, full: int, train: int) -> int:
        """Training rows: the paper's count on the full data, the same proportion else."""
        return train if n == full else round(n * train / full)

    def _train_rows(self, n: int, full: int, train: int, source: str) -> int:
        """:meth:`_proportional_split` of the ``n`` rows read from ``source``.

        Raises:
            ValueError: too few rows for a training and a test row (names ``source``).
        """
        n_train = self._proportional_split(n, full, train)
        if n_train < 1 or n_train >= n:
            raise ValueError(
                f"{self._name}: {source} holds {n} row(s), too few for the train / test "
                f"split ({train} of {full} rows train): at least one row each is needed"
            )
        return n_train
