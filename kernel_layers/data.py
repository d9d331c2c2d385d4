"""LightningDataModules for the datasets of the DI paper and an offline quick start.

Every module follows the paper's protocol (DESIGN.md §4):

* features min-max scaled to ``[0, 1]`` with statistics of the **training rows actually
  used for training** (the validation rows carved from the training split are excluded,
  so nothing leaks into validation or test);
* ``batch_size`` defaults to the paper's rule ``max(1000, 2 J)`` when told the kernel
  layer's output width ``J`` (``num_features``), else ``1000``;
* training batches are shuffled and incomplete last batches are dropped (DI wants full
  batches larger than ``J``);
* a validation split carved from the training split with a fixed seed (``val_fraction``),
  so ``val/acc`` can be monitored without touching the test set.

Datasets and where they come from (DESIGN.md §5):

==========================  ===========  ===============  =======  =======================
module                      features     train / test     classes  source
==========================  ===========  ===============  =======  =======================
``MNISTDataModule``         784 (28x28)  60000 / 10000    10       IDX files, torchvision
``FashionMNISTDataModule``  784 (28x28)  60000 / 10000    10       IDX files, torchvision
``CovTypeDataModule``       54           464810 / 116202  7        UCI CSV, scikit-learn
``LetterDataModule``        16           15000 / 5000     26       UCI CSV, OpenML
``DigitsDataModule``        64 (8x8)     1347 / 450       10       bundled, offline
``TensorDataModule``        any          given            any      arrays in memory
==========================  ===========  ===============  =======  =======================

With no network and no local files a module fails at once with
:class:`DatasetNotFoundError` (a :class:`FileNotFoundError`), naming the directory to fill
and the files expected there.

Example:
    >>> dm = DigitsDataModule(num_features=300)
    >>> dm.setup()
    >>> dm.batch_size, dm.in_features, dm.num_classes
    (1000, 64, 10)
    >>> x, y = next(iter(dm.train_dataloader()))
    >>> x.shape, y.dtype
    (torch.Size([1000, 64]), torch.int64)
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers._datasets import (
    DOWNLOAD_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    DatasetNotFoundError,
    check_network,
    download_timeout,
    read_covtype_csv,
    read_idx,
    read_letter_csv,
)
from kernel_layers._resumable import ResumableLoader

__all__ = [
    "COVTYPE_TEST_SIZE",
    "COVTYPE_TRAIN_SIZE",
    "DEFAULT_BATCH_SIZE",
    "LETTER_TEST_SIZE",
    "LETTER_TRAIN_SIZE",
    "ArrayDataModule",
    "CovTypeDataModule",
    "DatasetNotFoundError",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "LetterDataModule",
    "MNISTDataModule",
    "TensorDataModule",
    "default_batch_size",
]

#: Batch size of the paper when ``J <= 500``.
DEFAULT_BATCH_SIZE = 1000
#: Batch size of the paper when ``J > 500`` is ``BATCH_PER_FEATURE * J``.
BATCH_PER_FEATURE = 2
#: Fraction of the training split held out for validation by default.
DEFAULT_VAL_FRACTION = 0.1
#: A column whose training range is at most this (relative to its magnitude) is constant.
CONSTANT_COLUMN_RTOL = 1e-12
#: Rows scaled per chunk (bounds the float64 working memory of the scaler).
SCALE_CHUNK_ROWS = 8192

#: MNIST / Fashion-MNIST image shape (channels, height, width).
MNIST_IMAGE_SHAPE = (1, 28, 28)
#: The four IDX files of MNIST / Fashion-MNIST (each may also carry a ``.gz`` suffix).
MNIST_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

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
COVTYPE_URL = "https://ndownloader.figshare.com/files/5976039"

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

#: Fraction of ``load_digits`` held out (stratified) as the test split.
DIGITS_TEST_FRACTION = 0.25
DIGITS_IMAGE_SHAPE = (1, 8, 8)

Scaling = Literal["feature", "global"]
_SCALINGS = ("feature", "global")
#: ``(x_train [N, D], y_train [N], x_test [M, D], y_test [M])`` as loaded from disk.
RawArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def default_batch_size(num_features: int | None) -> int:
    """The paper's batch-size rule: ``max(1000, 2 J)``, or ``1000`` when ``J`` is unknown.

    Args:
        num_features: output width ``J`` of the kernel layer, or ``None``.

    Returns:
        int: the batch size.
    """
    if num_features is None:
        return DEFAULT_BATCH_SIZE
    return max(DEFAULT_BATCH_SIZE, BATCH_PER_FEATURE * num_features)


class _BatchedTensorDataset(TensorDataset):
    """A :class:`TensorDataset` that serves a whole batch with one fancy-indexing call.

    ``DataLoader`` hands the list of indices of a batch to ``__getitems__``; gathering
    ``x[idx]`` at once is one to two orders of magnitude faster than stacking ``B``
    single rows, which matters when the DI step itself takes milliseconds.
    """

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[index] for t in self.tensors)


def _collate_batched(batch: tuple[Tensor, ...]) -> list[Tensor]:
    """Collate for :class:`_BatchedTensorDataset`: the batch is already stacked."""
    return list(batch)


def _split_seeds(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent generators for the train/test split and the validation split."""
    test_seq, val_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(test_seq), np.random.default_rng(val_seq)


def _resolve_sklearn_home(data_home: str | os.PathLike[str] | None) -> Path:
    """scikit-learn's data home without creating it (``get_data_home`` would)."""
    if data_home is None:
        data_home = os.environ.get("SCIKIT_LEARN_DATA", os.path.join("~", "scikit_learn_data"))
    return Path(os.path.expanduser(os.fspath(data_home)))


def _reason(err: BaseException) -> str:
    """One-line description of a download failure."""
    text = " ".join(str(err).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"the download failed ({type(err).__name__}: {text})"


class ArrayDataModule(LightningDataModule):
    """Base of the data modules: in-memory arrays, min-max scaling, splits and loaders.

    Subclasses implement :meth:`_locate`, which finds (or downloads) the data and returns
    a loader of raw arrays; this class carves the validation split, fits the scaler on
    the training rows, and serves :class:`~torch.utils.data.TensorDataset` splits of
    ``float32`` features in ``[0, 1]`` and ``int64`` labels.

    Scaling maps each feature (``scaling="feature"``) or all features jointly
    (``scaling="global"``, the natural choice for pixels) to ``[0, 1]`` with the minimum
    and maximum of the training rows: ``x' = (x - min) / (max - min)``. A constant
    training column maps to ``0`` in every split (no division by zero). Validation and
    test values are not clipped unless ``clip=True`` (as scikit-learn's
    ``MinMaxScaler``), so they may fall slightly outside ``[0, 1]``.

    Args:
        batch_size: training (and evaluation) batch size; ``None`` applies the paper's
            rule :func:`default_batch_size`. Training batches are capped at the size of
            the training split.
        num_features: output width ``J`` of the kernel layer, used only by the batch-size
            rule ``max(1000, 2 J)``.
        val_fraction: fraction of the training split held out for validation, in
            ``[0, 1)``; ``0`` disables validation.
        scaling: ``"feature"`` (per-column min-max), ``"global"`` (one min and max for all
            columns) or ``None`` for the dataset's default (:attr:`default_scaling`).
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` worker processes.
        pin_memory: pin batches in page-locked memory (faster host-to-GPU copies).
        seed: seed of the validation split (and of random train/test splits).
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.

    Attributes:
        num_classes (int): number of classes (known before :meth:`setup`).
        in_features (int): flattened feature dimension ``D`` (known before :meth:`setup`).
        input_shape (tuple[int, ...]): shape of one sample, ``(D,)`` or ``(C, H, W)``.
        batch_size (int): the resolved batch size.
        train_dataset (TensorDataset): ``x (Tensor[N, *input_shape])``, ``y (Tensor[N])``.
        val_dataset (TensorDataset | None): the held-out part of the training split.
        test_dataset (TensorDataset): the test split.
        data_min (Tensor[D]): per-column training minimum used by the scaler.
        data_max (Tensor[D]): per-column training maximum used by the scaler.
    """

    num_classes: int
    in_features: int
    input_shape: tuple[int, ...]
    #: Scaling used when ``scaling=None``.
    default_scaling: ClassVar[Scaling] = "feature"

    def __init__(
        self,
        *,
        batch_size: int | None = None,
        num_features: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        scaling: Scaling | None = None,
        clip: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        super().__init__()
        self._check_int("batch_size", batch_size, 1, optional=True)
        self._check_int("num_features", num_features, 1, optional=True)
        self._check_int("num_workers", num_workers, 0)
        self._check_int("seed", seed, 0)
        for name, flag in (
            ("clip", clip),
            ("pin_memory", pin_memory),
            ("shuffle", shuffle),
            ("drop_last", drop_last),
        ):
            self._check_bool(name, flag)
        if (
            isinstance(val_fraction, bool)
            or not isinstance(val_fraction, (int, float))
            or not 0.0 <= val_fraction < 1.0
        ):
            raise ValueError(
                f"{self._name}: argument 'val_fraction' must be in [0, 1), got {val_fraction!r}"
            )
        if scaling is not None and scaling not in _SCALINGS:
            raise ValueError(
                f"{self._name}: argument 'scaling' must be one of {_SCALINGS} or None, "
                f"got {scaling!r}"
            )
        self._requested_batch_size = batch_size
        self.batch_size: int = (
            batch_size if batch_size is not None else default_batch_size(num_features)
        )
        self.num_features = num_features
        self.val_fraction = float(val_fraction)
        self.scaling: Scaling = scaling if scaling is not None else self.default_scaling
        self.clip = clip
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last

        self.train_dataset: TensorDataset | None = None
        self.val_dataset: TensorDataset | None = None
        self.test_dataset: TensorDataset | None = None
        self.data_min: Tensor | None = None
        self.data_max: Tensor | None = None
        self._shift: np.ndarray | None = None
        self._divisor: np.ndarray | None = None
        self._keep: np.ndarray | None = None
        self._warned_cap = False

    # ------------------------------------------------------------------ validation
    @property
    def _name(self) -> str:
        return type(self).__name__

    def _check_int(self, name: str, value: Any, low: int, *, optional: bool = False) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            kind = "an int or None" if optional else "an int"
            raise TypeError(
                f"{self._name}: argument '{name}' must be {kind}, got {type(value).__name__}"
            )
        if value < low:
            raise ValueError(f"{self._name}: argument '{name}' must be >= {low}, got {value}")

    def _check_bool(self, name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise TypeError(
                f"{self._name}: argument '{name}' must be a bool, got {type(value).__name__}"
            )

    # ------------------------------------------------------------------ data access
    @abstractmethod
    def _locate(self) -> Callable[[], RawArrays]:
        """Find the data (downloading it if allowed) and return a loader of raw arrays.

        Returns:
            Callable: returns ``(x_train [N, D], y_train [N], x_test [M, D], y_test [M])``
            with integer labels in ``[0, num_classes)``.

        Raises:
            DatasetNotFoundError: no local data and no download possible.
        """

    def prepare_data(self) -> None:
        """Download the data if needed (Lightning calls this on one process per node)."""
        self._locate()

    def setup(self, stage: str | None = None) -> None:
        """Load, split and scale the data (idempotent; all stages are set up at once).

        Args:
            stage: Lightning stage (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``);
                ignored.
        """
        if self.train_dataset is not None:
            return
        x_train, y_train, x_test, y_test = self._locate()()
        self._build(x_train, y_train, x_test, y_test)

    def _check_arrays(self, x: np.ndarray, y: np.ndarray, split: str) -> tuple[np.ndarray, ...]:
        x = np.asarray(x)
        y = np.asarray(y)
        x = x.reshape(len(x), -1)
        if x.shape[1] != self.in_features:
            raise ValueError(
                f"{self._name}: {split} features must have {self.in_features} columns, "
                f"got {x.shape[1]}"
            )
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(
                f"{self._name}: {split} labels must have shape [{len(x)}], got {list(y.shape)}"
            )
        if len(y) and (
            not np.all(np.isfinite(y))
            or not np.all(y == np.round(y))
            or y.min() < 0
            or y.max() >= self.num_classes
        ):
            raise ValueError(
                f"{self._name}: {split} labels must be integers in [0, {self.num_classes}), "
                f"got values in [{y.min()}, {y.max()}]"
            )
        if not np.issubdtype(x.dtype, np.integer) and not np.all(np.isfinite(x)):
            raise ValueError(f"{self._name}: {split} features contain NaN or Inf")
        return x, y.astype(np.int64)

    def _build(
        self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
    ) -> None:
        """Split validation rows off, fit the scaler on the training rows, build datasets."""
        x_train, y_train = self._check_arrays(x_train, y_train, "train")
        x_test, y_test = self._check_arrays(x_test, y_test, "test")
        n = len(x_train)
        n_val = round(self.val_fraction * n)
        if self.val_fraction > 0:
            n_val = max(n_val, 1)
        if n - n_val < 1:
            raise ValueError(
                f"{self._name}: the training split has {n} rows, too few to hold out "
                f"val_fraction={self.val_fraction} for validation"
            )
        _, val_rng = _split_seeds(self.seed)
        perm = val_rng.permutation(n)
        val_idx, fit_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        x_fit = x_train[fit_idx]
        self._fit_scaler(x_fit)
        self.train_dataset = self._dataset(x_fit, y_train[fit_idx], clip=True)
        self.val_dataset = (
            self._dataset(x_train[val_idx], y_train[val_idx], clip=self.clip) if n_val else None
        )
        self.test_dataset = self._dataset(x_test, y_test, clip=self.clip)

    def _fit_scaler(self, x: np.ndarray) -> None:
        """Min-max statistics of ``x (np.ndarray[N, D])`` (global or per column)."""
        if self.scaling == "global":
            lo = np.full(x.shape[1], x.min(), dtype=np.float64)
            hi = np.full(x.shape[1], x.max(), dtype=np.float64)
        else:
            lo = x.min(axis=0).astype(np.float64)
            hi = x.max(axis=0).astype(np.float64)
        span = hi - lo
        constant = span <= CONSTANT_COLUMN_RTOL * np.maximum(1.0, np.maximum(abs(lo), abs(hi)))
        self._shift = lo
        self._divisor = np.where(constant, 1.0, span)
        self._keep = (~constant).astype(np.float64)
        self.data_min = torch.from_numpy(lo.copy())
        self.data_max = torch.from_numpy(hi.copy())

    def _scale(self, x: np.ndarray, *, clip: bool) -> Tensor:
        """Scale ``x (np.ndarray[N, D])`` into a new ``Tensor[N, D]`` of float32."""
        if self._shift is None or self._divisor is None or self._keep is None:
            raise RuntimeError(f"{self._name}: call setup() before scaling features")
        out = torch.empty(x.shape, dtype=torch.float32)
        for start in range(0, len(x), SCALE_CHUNK_ROWS):
            chunk = x[start : start + SCALE_CHUNK_ROWS].astype(np.float64)
            chunk = (chunk - self._shift) / self._divisor * self._keep
            if clip:
                np.clip(chunk, 0.0, 1.0, out=chunk)
            out[start : start + len(chunk)] = torch.from_numpy(chunk)
        return out

    def _dataset(self, x: np.ndarray, y: np.ndarray, *, clip: bool) -> TensorDataset:
        features = self._scale(x, clip=clip).reshape(len(x), *self.input_shape)
        return _BatchedTensorDataset(features, torch.from_numpy(y))

    def transform(self, x: Tensor | np.ndarray) -> Tensor:
        """Scale new raw features with the training statistics (no clipping).

        Args:
            x (Tensor[N, D] | Tensor[N, *input_shape]): raw features in the units of the
                files (e.g. pixels 0..255).

        Returns:
            Tensor[N, *input_shape]: float32 scaled features.
        """
        self.setup()
        array = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
        array = array.reshape(len(array), -1)
        if array.shape[1] != self.in_features:
            raise ValueError(
                f"{self._name}: transform expects {self.in_features} features per row, "
                f"got {array.shape[1]}"
            )
        return self._scale(array, clip=self.clip).reshape(len(array), *self.input_shape)

    def train_features(self) -> Tensor:
        """Scaled training features (e.g. for ``NystromLayer.from_data`` landmarks).

        Calls :meth:`setup` if needed.

        Returns:
            Tensor[N, *input_shape]: float32 features in ``[0, 1]``.
        """
        self.setup()
        assert self.train_dataset is not None
        return self.train_dataset.tensors[0]

    def train_targets(self) -> Tensor:
        """Training labels (calls :meth:`setup` if needed).

        Returns:
            Tensor[N]: int64 labels in ``[0, num_classes)``.
        """
        self.setup()
        assert self.train_dataset is not None
        return self.train_dataset.tensors[1]

    # ------------------------------------------------------------------ loaders
    def _loader(self, dataset: TensorDataset, *, train: bool) -> DataLoader:
        batch_size = self.batch_size
        if train and batch_size > len(dataset):
            if self._requested_batch_size is not None and not self._warned_cap:
                rank_zero_warn(
                    f"{self._name}: batch_size={batch_size} exceeds the {len(dataset)} "
                    f"training rows; using batches of {len(dataset)}"
                )
                self._warned_cap = True
            batch_size = len(dataset)
        options = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.num_workers > 0,
            "collate_fn": _collate_batched,
        }
        trainer = getattr(self, "trainer", None)
        if train and (trainer is None or trainer.world_size == 1):
            # Seeded per epoch and stateful: a fit killed mid-epoch resumes on exactly the
            # same batches. (Under DDP, Lightning swaps in its DistributedSampler.)
            return ResumableLoader(
                dataset,
                batch_size=batch_size,
                seed=self.seed,
                shuffle=self.shuffle,
                drop_last=self.drop_last,
                **options,
            )
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=train and self.shuffle,
            drop_last=train and self.drop_last,
            **options,
        )

    def _require(self, dataset: TensorDataset | None, split: str) -> TensorDataset:
        if dataset is None:
            raise RuntimeError(f"{self._name}: call setup() before requesting the {split} loader")
        return dataset

    def train_dataloader(self) -> DataLoader:
        """Shuffled training batches ``(x [B, *input_shape], y [B])``, incomplete last dropped."""
        return self._loader(self._require(self.train_dataset, "train"), train=True)

    def train_eval_dataloader(self) -> DataLoader:
        """Every training row once, in order, nothing dropped (for exact read-out fits)."""
        return self._loader(self._require(self.train_dataset, "train"), train=False)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """Validation batches, or an empty list when ``val_fraction == 0`` (no validation)."""
        if self.val_dataset is None:
            self._require(self.train_dataset, "val")
            return []
        return self._loader(self.val_dataset, train=False)

    def test_dataloader(self) -> DataLoader:
        """Test batches ``(x [B, *input_shape], y [B])`` in file order."""
        return self._loader(self._require(self.test_dataset, "test"), train=False)

    def predict_dataloader(self) -> DataLoader:
        """The test batches again; ``batch[0]`` holds the features."""
        return self._loader(self._require(self.test_dataset, "predict"), train=False)


class TensorDataModule(ArrayDataModule):
    """Data module over arrays already in memory (generated data, user data, tests).

    Args:
        x_train (Tensor[N, *S] | np.ndarray): raw training features of sample shape ``S``.
        y_train (Tensor[N] | np.ndarray): integer training labels in ``[0, num_classes)``.
        x_test (Tensor[M, *S] | np.ndarray): raw test features.
        y_test (Tensor[M] | np.ndarray): integer test labels.
        num_classes: number of classes; ``None`` infers ``max(label) + 1``.
        **kwargs: the options of :class:`ArrayDataModule` (``batch_size``,
            ``num_features``, ``val_fraction``, ``scaling``, ...).
    """

    def __init__(
        self,
        x_train: Tensor | np.ndarray,
        y_train: Tensor | np.ndarray,
        x_test: Tensor | np.ndarray,
        y_test: Tensor | np.ndarray,
        *,
        num_classes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_int("num_classes", num_classes, 1, optional=True)
        arrays = [
            t.detach().cpu().numpy() if isinstance(t, Tensor) else np.asarray(t)
            for t in (x_train, y_train, x_test, y_test)
        ]
        if arrays[0].ndim < 2 or arrays[2].shape[1:] != arrays[0].shape[1:]:
            raise ValueError(
                f"{self._name}: x_train must be [N, *S] and x_test [M, *S] with the same S, "
                f"got {list(arrays[0].shape)} and {list(arrays[2].shape)}"
            )
        self._arrays: RawArrays = (arrays[0], arrays[1], arrays[2], arrays[3])
        self.input_shape = tuple(int(s) for s in arrays[0].shape[1:])
        self.in_features = int(np.prod(self.input_shape))
        if num_classes is None:
            labels = np.concatenate([arrays[1].ravel(), arrays[3].ravel()])
            num_classes = int(labels.max()) + 1 if labels.size else 1
        self.num_classes = num_classes
        self.save_hyperparameters(ignore=["x_train", "y_train", "x_test", "y_test"])

    def _locate(self) -> Callable[[], RawArrays]:
        return lambda: self._arrays


class _IDXDataModule(ArrayDataModule):
    """MNIST-format data (four IDX files) through ``torchvision.datasets``."""

    #: Name of torchvision's dataset class, also its folder under ``root``.
    torchvision_name: ClassVar[str]
    title: ClassVar[str]
    num_classes = 10
    in_features = int(np.prod(MNIST_IMAGE_SHAPE))
    default_scaling: ClassVar[Scaling] = "global"

    def __init__(
        self,
        root: str | os.PathLike[str] = "data",
        *,
        flatten: bool = True,
        download: bool = True,
        batch_size: int | None = None,
        num_features: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        scaling: Scaling | None = None,
        clip: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_features=num_features,
            val_fraction=val_fraction,
            scaling=scaling,
            clip=clip,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        if not isinstance(root, (str, os.PathLike)):
            raise TypeError(
                f"{self._name}: argument 'root' must be a str or path, got {type(root).__name__}"
            )
        self._check_bool("flatten", flatten)
        self._check_bool("download", download)
        self.root = Path(root)
        self.flatten = flatten
        self.download = download
        self.input_shape = (self.in_features,) if flatten else MNIST_IMAGE_SHAPE
        self.save_hyperparameters()

    @property
    def raw_folder(self) -> Path:
        """torchvision's folder for the IDX files: ``<root>/<Name>/raw``."""
        return self.root / self.torchvision_name / "raw"

    def _candidate_dirs(self) -> tuple[Path, ...]:
        return (self.raw_folder, self.root / self.torchvision_name, self.root)

    def _find_files(self) -> dict[str, Path] | None:
        """The four IDX files from the first directory that holds all of them."""
        for folder in self._candidate_dirs():
            found: dict[str, Path] = {}
            for name in MNIST_IDX_FILES:
                for candidate in (folder / name, folder / f"{name}.gz"):
                    if candidate.is_file():
                        found[name] = candidate
                        break
            if len(found) == len(MNIST_IDX_FILES):
                return found
        return None

    def _download(self) -> None:
        import torchvision.datasets

        cls = getattr(torchvision.datasets, self.torchvision_name)
        check_network([mirror + cls.resources[0][0] for mirror in cls.mirrors])
        with download_timeout():
            cls(str(self.root), train=True, download=True)

    def _locate(self) -> Callable[[], RawArrays]:
        files = self._find_files()
        if files is None:
            reason = "download is disabled (download=False)"
            if self.download:
                try:
                    self._download()
                except Exception as err:
                    reason = _reason(err)
                files = self._find_files()
        if files is None:
            names = ", ".join(MNIST_IDX_FILES)
            raise DatasetNotFoundError(
                f"{self._name}: no {self.title} data under '{self.root}' and {reason}. "
                f"Expected the four IDX files {names} (each optionally gzipped, '.gz') in "
                f"'{self.raw_folder}' (torchvision's layout) or directly in '{self.root}'; "
                f"copy them there, or run once with network and download=True."
            ) from None
        return lambda: self._read(files)

    def _read(self, files: dict[str, Path]) -> RawArrays:
        arrays = []
        for split in ("train", "t10k"):
            images_path = files[f"{split}-images-idx3-ubyte"]
            labels_path = files[f"{split}-labels-idx1-ubyte"]
            try:
                images, labels = read_idx(images_path), read_idx(labels_path)
            except ValueError as err:
                raise ValueError(f"{self._name}: {err}") from None
            if images.ndim != 3 or images.shape[1:] != MNIST_IMAGE_SHAPE[1:]:
                raise ValueError(
                    f"{self._name}: '{images_path}' must hold images [N, 28, 28], "
                    f"got {list(images.shape)}"
                )
            if labels.shape != (len(images),):
                raise ValueError(
                    f"{self._name}: '{labels_path}' must hold {len(images)} labels to match "
                    f"'{images_path}', got shape {list(labels.shape)}"
                )
            arrays += [images.reshape(len(images), -1), labels.astype(np.int64)]
        return arrays[0], arrays[1], arrays[2], arrays[3]


class MNISTDataModule(_IDXDataModule):
    """MNIST (LeCun et al.): 60000 / 10000 handwritten digits, 28x28 pixels, 10 classes.

    Data come from the four IDX files, found in ``<root>/MNIST/raw`` (torchvision's
    layout, where ``download=True`` puts them through ``torchvision.datasets.MNIST``,
    checksummed) or directly in ``<root>``; plain or gzipped files both work, so a
    directory holding the four files works offline.

    Pixels are min-max scaled with the global training minimum and maximum
    (``scaling="global"``, i.e. ``/255``); ``scaling="feature"`` scales each pixel on its
    own (then test pixels that are rare in training can land far above 1).

    Args:
        root: directory holding the data (see above).
        flatten: serve ``x (Tensor[B, 784])`` for standalone kernel layers; ``False``
            serves images ``x (Tensor[B, 1, 28, 28])`` for convolutional backbones.
        download: download through torchvision when the files are missing.
        batch_size: see :class:`ArrayDataModule` (the other arguments too).
        num_features: kernel layer width ``J`` for the batch-size rule ``max(1000, 2J)``.
        val_fraction: fraction of the 60000 training images held out for validation.
        scaling: ``"global"`` (default) or ``"feature"``.
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` workers.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the validation split.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.

    Raises:
        DatasetNotFoundError: (from :meth:`prepare_data` / :meth:`setup`) no files and no
            download possible; names the directory and the four files.
    """

    torchvision_name = "MNIST"
    title = "MNIST"


class FashionMNISTDataModule(_IDXDataModule):
    """Fashion-MNIST (Xiao et al.): 60000 / 10000 clothing images, 28x28, 10 classes.

    Same layout and options as :class:`MNISTDataModule`, with torchvision's folder
    ``<root>/FashionMNIST/raw``. A Debian ``dataset-fashion-mnist`` package provides the
    four gzipped IDX files in ``/usr/share/datasets/fashion-mnist``, usable as ``root``.
    """

    torchvision_name = "FashionMNIST"
    title = "Fashion-MNIST"


class _SklearnHomeDataModule(ArrayDataModule):
    """Common arguments of the data modules cached under scikit-learn's ``data_home``."""

    def __init__(
        self,
        data_home: str | os.PathLike[str] | None = None,
        *,
        download: bool = True,
        batch_size: int | None = None,
        num_features: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        scaling: Scaling | None = None,
        clip: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_features=num_features,
            val_fraction=val_fraction,
            scaling=scaling,
            clip=clip,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        if data_home is not None and not isinstance(data_home, (str, os.PathLike)):
            raise TypeError(
                f"{self._name}: argument 'data_home' must be a str, path or None, "
                f"got {type(data_home).__name__}"
            )
        self._check_bool("download", download)
        self.data_home = _resolve_sklearn_home(data_home)
        self.download = download
        self.input_shape = (self.in_features,)
        self.save_hyperparameters()

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


class CovTypeDataModule(_SklearnHomeDataModule):
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
        batch_size: see :class:`ArrayDataModule` (the other arguments too).
        num_features: kernel layer width ``J`` for the batch-size rule ``max(1000, 2J)``.
        val_fraction: fraction of the training split held out for validation.
        scaling: ``"feature"`` (default) or ``"global"``.
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` workers.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the train / test and validation splits.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.

    Raises:
        DatasetNotFoundError: no local data and no download possible.
    """

    num_classes = 7
    in_features = 54

    def _split(self, x: np.ndarray, y: np.ndarray) -> RawArrays:
        n = len(x)
        n_train = self._proportional_split(n, COVTYPE_SIZE, COVTYPE_TRAIN_SIZE)
        test_rng, _ = _split_seeds(self.seed)
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
        cache = self.data_home / COVTYPE_SKLEARN_DIR
        if all((cache / name).is_file() for name in COVTYPE_SKLEARN_FILES):
            return lambda: self._split(*self._from_sklearn(download=False))
        raw = self._find_raw(COVTYPE_RAW_FILES, COVTYPE_SKLEARN_DIR)
        if raw is not None:
            path = raw
            return lambda: self._split(*read_covtype_csv(path))
        reason = "download is disabled (download=False)"
        if self.download:
            try:
                check_network([COVTYPE_URL])
                with download_timeout():
                    fetched = self._from_sklearn(download=True)
            except Exception as err:
                reason = _reason(err)
            else:
                return lambda: self._split(*fetched)
        raise DatasetNotFoundError(
            f"{self._name}: no CovType data under '{self.data_home}' and {reason}. "
            f"Expected the UCI CSV {' or '.join(COVTYPE_RAW_FILES)} in '{self.data_home}', "
            f"or scikit-learn's cache {' and '.join(COVTYPE_SKLEARN_FILES)} in '{cache}'; "
            f"copy them there, or run once with network and download=True."
        ) from None


class LetterDataModule(_SklearnHomeDataModule):
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
        batch_size: see :class:`ArrayDataModule` (the other arguments too).
        num_features: kernel layer width ``J`` for the batch-size rule ``max(1000, 2J)``.
        val_fraction: fraction of the training split held out for validation.
        scaling: ``"feature"`` (default) or ``"global"``.
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` workers.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the validation split.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.

    Raises:
        DatasetNotFoundError: no local data and no download possible.
    """

    num_classes = 26
    in_features = 16

    def _split(self, x: np.ndarray, y: np.ndarray) -> RawArrays:
        n_train = self._proportional_split(len(x), LETTER_SIZE, LETTER_TRAIN_SIZE)
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
            raise ValueError(f"unexpected OpenML letter targets {np.unique(letters)[:5]}")
        labels = np.frombuffer(np.char.encode(letters, "ascii"), dtype=np.uint8)
        return np.asarray(x, dtype=np.float64), labels.astype(np.int64) - ord("A")

    def _locate(self) -> Callable[[], RawArrays]:
        raw = self._find_raw(LETTER_RAW_FILES, "letter")
        if raw is not None:
            path = raw
            return lambda: self._split(*read_letter_csv(path))
        openml_cache = self.data_home / "openml"
        reason = "download is disabled (download=False)"
        if self.download or openml_cache.is_dir():
            try:
                if self.download:
                    check_network([LETTER_OPENML_URL])
                with download_timeout(DOWNLOAD_TIMEOUT_S if self.download else PROBE_TIMEOUT_S):
                    fetched = self._from_openml()
            except Exception as err:
                reason = _reason(err)
            else:
                return lambda: self._split(*fetched)
        raise DatasetNotFoundError(
            f"{self._name}: no Letter data under '{self.data_home}' and {reason}. "
            f"Expected the UCI CSV {LETTER_RAW_FILES[0]} (or {LETTER_RAW_FILES[1]}) in "
            f"'{self.data_home}', or an OpenML cache in '{openml_cache}'; copy it there, "
            f"or run once with network and download=True."
        ) from None


class DigitsDataModule(ArrayDataModule):
    """scikit-learn's bundled digits: 1797 8x8 images (64 features), 10 classes, offline.

    The offline quick start: ``sklearn.datasets.load_digits`` ships with scikit-learn,
    so this module never downloads. A stratified split with the fixed ``seed`` holds out
    25% as the test set (1347 / 450 rows). Pixels (``0..16``) are min-max scaled with
    the global training minimum and maximum (``scaling="global"``).

    Args:
        flatten: serve ``x (Tensor[B, 64])``; ``False`` serves ``x (Tensor[B, 1, 8, 8])``.
        batch_size: see :class:`ArrayDataModule` (the other arguments too).
        num_features: kernel layer width ``J`` for the batch-size rule ``max(1000, 2J)``.
        val_fraction: fraction of the training split held out for validation.
        scaling: ``"global"`` (default) or ``"feature"``.
        clip: clip validation / test features to ``[0, 1]``.
        num_workers: ``DataLoader`` workers.
        pin_memory: pin batches in page-locked memory.
        seed: seed of the train / test and validation splits.
        shuffle: shuffle training batches.
        drop_last: drop the incomplete last training batch.
    """

    num_classes = 10
    in_features = int(np.prod(DIGITS_IMAGE_SHAPE))
    default_scaling: ClassVar[Scaling] = "global"

    def __init__(
        self,
        *,
        flatten: bool = True,
        batch_size: int | None = None,
        num_features: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        scaling: Scaling | None = None,
        clip: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_features=num_features,
            val_fraction=val_fraction,
            scaling=scaling,
            clip=clip,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self._check_bool("flatten", flatten)
        self.flatten = flatten
        self.input_shape = (self.in_features,) if flatten else DIGITS_IMAGE_SHAPE
        self.save_hyperparameters()

    def _locate(self) -> Callable[[], RawArrays]:
        return self._load

    def _load(self) -> RawArrays:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=DIGITS_TEST_FRACTION, stratify=y, random_state=self.seed
        )
        return x_train, y_train, x_test, y_test
