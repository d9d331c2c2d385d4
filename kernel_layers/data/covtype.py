"""CovType (UCI forest cover type): the CSV, or scikit-learn's download, with the paper's split."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel_layers.data import readers
from kernel_layers.data.base import RawArrays
from kernel_layers.data.network import DatasetNotFoundError, download_timeout, failure_reason
from kernel_layers.data.readers import read_arrays, read_covtype_csv, write_arrays
from kernel_layers.data.sklearn_home import SklearnHomeDataModule
from kernel_layers.data.splits import split_seeds

__all__ = ["COVTYPE_TEST_SIZE", "COVTYPE_TRAIN_SIZE", "CovTypeDataModule"]

#: CovType split of the DI paper (581012 rows in all).
COVTYPE_TRAIN_SIZE = 464810
COVTYPE_TEST_SIZE = 116202
COVTYPE_SIZE = COVTYPE_TRAIN_SIZE + COVTYPE_TEST_SIZE
#: UCI CSV names accepted in ``data_home`` for CovType.
COVTYPE_RAW_FILES = ("covtype.data.gz", "covtype.data")
#: scikit-learn's cache of ``fetch_covtype`` inside ``data_home``.
COVTYPE_SKLEARN_DIR = "covertype"
COVTYPE_SKLEARN_FILES = ("samples_py3", "targets_py3")
#: Host that ``sklearn.datasets.fetch_covtype`` downloads from.
#: The arrays kept after a download, read with ``numpy.load(allow_pickle=False)``.
COVTYPE_ARRAYS_FILE = "covtype-arrays.npz"
COVTYPE_URL = "https://ndownloader.figshare.com/files/5976039"


class CovTypeDataModule(SklearnHomeDataModule):
    """Forest CoverType (UCI): 54 cartographic features, 7 cover types.

    Split of the DI paper: 464810 training / 116202 test rows drawn at random with the
    fixed ``seed`` (a smaller file keeps the same 80 / 20 proportion). Each feature is
    min-max scaled on the training rows.

    Data are looked up in ``data_home`` (default: scikit-learn's ``~/scikit_learn_data``
    or ``$SCIKIT_LEARN_DATA``), in this order:

    1. scikit-learn's cache ``<data_home>/covertype/samples_py3`` and
       ``targets_py3`` (joblib pickles), read by ``sklearn.datasets.fetch_covtype``;
    2. the UCI CSV ``covtype.data.gz`` (or ``covtype.data``) in ``<data_home>`` or
       ``<data_home>/covertype``: 54 comma-separated integers and the label ``1..7``;
    3. with ``download=True``, ``fetch_covtype`` downloads (checksummed) and caches (1.).

    Labels are shifted to ``0..6``.

    Args:
        data_home: directory of the data (see above).
        download: download through scikit-learn when nothing is found locally.
        **kwargs: the common options of :class:`~kernel_layers.data.base.ArrayDataModule`
            (``batch_size``, ``num_features``, ``val_fraction``, ``scaling``, ``clip``,
            ``num_workers``, ``pin_memory``, ``seed``, ``shuffle``, ``drop_last``).

    Raises:
        DatasetNotFoundError: no local data and no download possible.
    """

    num_classes = 7
    in_features = 54

    def _split(self, x: np.ndarray, y: np.ndarray, source: str) -> RawArrays:
        n = len(x)
        n_train = self._train_rows(n, COVTYPE_SIZE, COVTYPE_TRAIN_SIZE, source)
        test_rng, _ = split_seeds(self.seed)
        perm = test_rng.permutation(n)
        train_idx, test_idx = np.sort(perm[:n_train]), np.sort(perm[n_train:])
        return x[train_idx], y[train_idx], x[test_idx], y[test_idx]

    def _from_sklearn(self, download: bool) -> tuple[np.ndarray, np.ndarray]:
        from sklearn.datasets import fetch_covtype

        x, y = fetch_covtype(
            data_home=str(self.data_home),
            download_if_missing=download,
            return_X_y=True,
            n_retries=1,
        )
        return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64) - 1

    def _locate(self) -> Callable[[], RawArrays]:
        """The UCI CSV, else this library's ``.npz`` cache (read without pickles), else a
        download; scikit-learn's pickled cache is never loaded (a pickle can run code)."""
        cache = self.data_home / COVTYPE_SKLEARN_DIR
        raw = self._find_raw(COVTYPE_RAW_FILES, COVTYPE_SKLEARN_DIR)
        if raw is not None:
            path = raw
            return lambda: self._split(*read_covtype_csv(path), source=f"'{path}'")
        arrays = self.data_home / COVTYPE_ARRAYS_FILE
        if arrays.is_file():
            return lambda: self._split(*read_arrays(arrays, owner=self._name), source=f"'{arrays}'")
        if any((cache / name).exists() for name in COVTYPE_SKLEARN_FILES):
            raise ValueError(
                f"{self._name}: refusing to read scikit-learn's pickled cache '{cache}' "
                "(loading a pickle can run code, so a data folder from elsewhere is not "
                f"trusted); put the UCI CSV {COVTYPE_RAW_FILES[0]} in '{self.data_home}', or "
                f"remove '{cache}' and download again with download=True (kernel-layers "
                f"then keeps the arrays as {COVTYPE_ARRAYS_FILE}, which loads without pickles)"
            )
        reason = "download is disabled (download=False)"
        if self.download:
            try:
                readers.check_network([COVTYPE_URL])
                with download_timeout():
                    fetched = self._from_sklearn(download=True)
            except Exception as err:
                reason = failure_reason(err)
            else:
                write_arrays(arrays, *fetched)
                return lambda: self._split(*fetched, source="the download")
        raise DatasetNotFoundError(
            f"{self._name}: no CovType data under '{self.data_home}' and {reason}. "
            f"Expected the UCI CSV {' or '.join(COVTYPE_RAW_FILES)} in '{self.data_home}' "
            f"(or the arrays {COVTYPE_ARRAYS_FILE} a previous download kept there); copy "
            "it there, or run once with network and download=True."
        ) from None
