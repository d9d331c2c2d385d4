"""What a data module's ``predict`` serves: one of its splits, or a user's file or folder
of raw rows scaled like the splits (:class:`PredictSource`, a base of
:class:`~kernel_layers.data.base.ArrayDataModule`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers._validation import check_choice
from kernel_layers.data.loaders import BatchedTensorDataset
from kernel_layers.data.user_files import image_files, read_feature_rows

__all__ = ["PREDICT_SPLITS", "PredictSource"]

#: Splits that ``predict`` can serve (:meth:`PredictSource.set_predict_source`).
PREDICT_SPLITS = ("train", "val", "test")


class _DataModule(Protocol):
    """What :class:`PredictSource` uses of the data module it is a base of."""

    _predict_split: str
    _predict_path: Path | None
    _predict_names: list[str] | None
    _predict_rows: Tensor | None
    input_shape: tuple[int, ...]
    pixel_max: float | None
    val_fraction: float
    train_dataset: TensorDataset | None
    val_dataset: TensorDataset | None
    test_dataset: TensorDataset | None

    @property
    def _name(self) -> str: ...

    @property
    def image_shape(self) -> tuple[int, int, int] | None: ...

    def setup(self, stage: str | None = None) -> None: ...

    def _transform(self, array: np.ndarray, what: str) -> Tensor: ...

    def _loader(self, dataset: TensorDataset, *, train: bool) -> DataLoader: ...

    def _require(self, dataset: TensorDataset | None, split: str) -> TensorDataset: ...

    def read_predict_source(self) -> None: ...


class PredictSource:
    """The prediction source of an :class:`~kernel_layers.data.base.ArrayDataModule`:
    the test split unless :meth:`set_predict_source` chose another split or a path."""

    _predict_split: str = "test"
    _predict_path: Path | None = None
    _predict_names: list[str] | None = None
    _predict_rows: Tensor | None = None  # rows read ahead from _predict_path, for one use

    def set_predict_source(
        self: _DataModule, split: str = "test", path: str | os.PathLike[str] | None = None
    ) -> None:
        """Choose what :meth:`predict_dataloader` serves.

        Args:
            split: ``"train"`` (every row, in order), ``"val"`` or ``"test"``.
            path: instead of a split, a file of raw features (``.npy``, or ``.csv`` with
                an optional header row) with one row per sample, or a folder of images
                (read in natural order of the names, for image data, pixels converted to the
                training data's range :attr:`pixel_max`); scaled with the training
                statistics like the splits. The rules for CSV headers and image ranges
                are in :mod:`~kernel_layers.data.user_files`.

        Raises:
            ValueError: unknown split, a missing path or an unsupported file type.
        """
        check_choice(self._name, "split", split, PREDICT_SPLITS)
        if path is not None and not Path(path).exists():
            raise ValueError(
                f"{self._name}: argument 'path' must be an existing .npy / .csv file or "
                f"image folder, got {str(path)!r} (not found)"
            )
        self._predict_split = split
        self._predict_path = None if path is None else Path(path)
        self._predict_names = None
        self._predict_rows = None

    @property
    def predict_row_names(self) -> list[str] | None:
        """The file of each row the last :meth:`predict_dataloader` read from an image
        folder, in the order served (:func:`~kernel_layers.data.user_files.image_files`:
        ``2.png`` before ``10.png``); ``None`` for a split or a file, whose rows are in
        its order."""
        return self._predict_names

    @property
    def predict_path(self) -> Path | None:
        """The file or folder :meth:`predict_dataloader` reads, or ``None`` (a split)."""
        return self._predict_path

    def read_predict_source(self: _DataModule) -> None:
        """Read the file or folder :meth:`set_predict_source` named now (the data set up
        first), and keep its rows for the next :meth:`predict_dataloader` call only
        (``kernel-layers predict`` reads it before predicting, to report a malformed
        file as a usage error). Does nothing for a split.

        Raises:
            ValueError: the file cannot be read as rows of the data's shape.
        """
        path = self._predict_path
        if path is None:
            return
        self.setup()
        shape = self.image_shape if path.is_dir() and self.image_shape else self.input_shape
        files = image_files(path) if path.is_dir() else None  # listed once: rows, names
        raw = read_feature_rows(
            path, shape, owner=self._name, pixel_max=self.pixel_max, images=files
        )
        self._predict_names = None if files is None else [file.name for file in files]
        self._predict_rows = self._transform(raw, f"the rows of {str(path)!r}")

    def predict_dataloader(self: _DataModule) -> DataLoader:
        """Batches of the prediction source (default: the test split, in file order);
        ``batch[0]`` holds the features. See :meth:`set_predict_source`. A file or folder
        is read at each call (rows written there since are served), unless
        :meth:`read_predict_source` read it just before."""
        if self._predict_path is not None:
            if self._predict_rows is None:
                self.read_predict_source()
            rows, self._predict_rows = self._predict_rows, None  # a read serves one loader
            assert rows is not None
            return self._loader(BatchedTensorDataset(rows), train=False)
        split = self._predict_split
        datasets = {"train": self.train_dataset, "val": self.val_dataset, "test": self.test_dataset}
        if split == "val" and self.val_dataset is None and self.train_dataset is not None:
            raise ValueError(
                f"{self._name}: predicting split 'val' needs val_fraction > 0, got "
                f"val_fraction={self.val_fraction}"
            )
        return self._loader(self._require(datasets[split], split), train=False)
