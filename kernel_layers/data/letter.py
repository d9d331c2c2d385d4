"""Letter (UCI letter recognition): the CSV, or OpenML's download, with the paper's split."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel_layers.data import readers
from kernel_layers.data.base import RawArrays
from kernel_layers.data.network import (
    DOWNLOAD_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    DatasetNotFoundError,
    download_timeout,
    failure_reason,
)
from kernel_layers.data.readers import read_letter_csv
from kernel_layers.data.sklearn_home import SklearnHomeDataModule

__all__ = ["LETTER_TEST_SIZE", "LETTER_TRAIN_SIZE", "LetterDataModule"]

#: Letter split of the DI paper: first 15000 rows train, last 5000 test.
LETTER_TRAIN_SIZE = 15000
LETTER_TEST_SIZE = 5000
LETTER_SIZE = LETTER_TRAIN_SIZE + LETTER_TEST_SIZE
#: UCI CSV names accepted in ``data_home`` for Letter.
LETTER_RAW_FILES = ("letter-recognition.data", "letter-recognition.data.gz")
#: OpenML dataset ``letter`` version 1 (id 6) is the UCI letter-recognition data.
LETTER_OPENML_NAME = "letter"
LETTER_OPENML_VERSION = 1
LETTER_OPENML_URL = "https://www.openml.org/api/v1/json/data/6"


class LetterDataModule(SklearnHomeDataModule):
    """UCI Letter Recognition: 16 integer features of letter images, 26 classes.

    Split of the DI paper: the first 15000 rows train, the last 5000 test (a smaller file
    keeps the 75 / 25 proportion). Each feature is min-max scaled on the training rows;
    labels ``A..Z`` map to ``0..25``.

    Data are looked up in ``data_home`` (default: scikit-learn's ``~/scikit_learn_data``):

    1. the UCI CSV ``letter-recognition.data`` (or ``.gz``) in ``<data_home>`` or
       ``<data_home>/letter``: a capital letter then 16 comma-separated integers;
    2. ``sklearn.datasets.fetch_openml("letter", version=1)`` (OpenML id 6, the same
       data), cached under ``<data_home>/openml``; it downloads only when
       ``download=True`` (with ``download=False`` an existing OpenML cache is still read).

    Args:
        data_home: directory of the data (see above).
        download: download through OpenML when nothing is found locally.
        **kwargs: the common options of :class:`~kernel_layers.data.base.ArrayDataModule`
            (``batch_size``, ``num_features``, ``val_fraction``, ``scaling``, ``clip``,
            ``num_workers``, ``pin_memory``, ``seed``, ``shuffle``, ``drop_last``).

    Raises:
        DatasetNotFoundError: no local data and no download possible.
    """

    num_classes = 26
    in_features = 16

    def _split(self, x: np.ndarray, y: np.ndarray, source: str) -> RawArrays:
        n_train = self._train_rows(len(x), LETTER_SIZE, LETTER_TRAIN_SIZE, source)
        return x[:n_train], y[:n_train], x[n_train:], y[n_train:]

    def _from_openml(self) -> tuple[np.ndarray, np.ndarray]:
        from sklearn.datasets import fetch_openml

        x, y = fetch_openml(
            LETTER_OPENML_NAME,
            version=LETTER_OPENML_VERSION,
            data_home=str(self.data_home),
            as_frame=False,
            return_X_y=True,
            parser="liac-arff",
            n_retries=1,
        )
        letters = np.asarray(y).astype(str)
        if not all(len(s) == 1 and "A" <= s <= "Z" for s in np.unique(letters)):
            raise ValueError(
                "Letter: OpenML's targets must be single capital letters A-Z, got "
                f"{np.unique(letters)[:5].tolist()}"
            )
        labels = np.frombuffer(np.char.encode(letters, "ascii"), dtype=np.uint8)
        return np.asarray(x, dtype=np.float64), labels.astype(np.int64) - ord("A")

    def _locate(self) -> Callable[[], RawArrays]:
        raw = self._find_raw(LETTER_RAW_FILES, "letter")
        if raw is not None:
            path = raw
            return lambda: self._split(*read_letter_csv(path), source=f"'{path}'")
        openml_cache = self.data_home / "openml"
        reason = "download is disabled (download=False)"
        if self.download or openml_cache.is_dir():
            try:
                if self.download:
                    readers.check_network([LETTER_OPENML_URL])
                with download_timeout(DOWNLOAD_TIMEOUT_S if self.download else PROBE_TIMEOUT_S):
                    fetched = self._from_openml()
            except Exception as err:
                reason = failure_reason(err)
            else:
                return lambda: self._split(*fetched, source="the download")
        raise DatasetNotFoundError(
            f"{self._name}: no Letter data under '{self.data_home}' and {reason}. "
            f"Expected the UCI CSV {LETTER_RAW_FILES[0]} (or {LETTER_RAW_FILES[1]}) in "
            f"'{self.data_home}', or an OpenML cache in '{openml_cache}'; copy it there, "
            f"or run once with network and download=True."
        ) from None
