"""The base data module: in-memory arrays, the paper's scaling, splits and loaders.

Built from :mod:`~kernel_layers.data.splits`, :mod:`~kernel_layers.data.scaling`,
:mod:`~kernel_layers.data.loaders` and :mod:`~kernel_layers.data.predict_source`;
:class:`TensorDataModule` is in :mod:`~kernel_layers.data.tensor`.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.strategies import ParallelStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers._validation import check_bool, check_choice, check_fraction, check_int
from kernel_layers.data.loaders import (
    DEFAULT_BATCH_SIZE,
    BatchedTensorDataset,
    default_batch_size,
    make_loader,
)
from kernel_layers.data.network import failure_reason
from kernel_layers.data.predict_source import PREDICT_SPLITS, PredictSource
from kernel_layers.data.scaling import InputScaling, check_scaled, fit_min_max, scale_rows
from kernel_layers.data.splits import (
    check_arrays,
    check_feature_values,
    split_seeds,
    validation_split,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_VAL_FRACTION",
    "PREDICT_SPLITS",
    "ArrayDataModule",
    "RawArrays",
    "Scaling",
    "default_batch_size",
    "failure_reason",
    "split_seeds",
]

#: Fraction of the training split held out for validation by default.
DEFAULT_VAL_FRACTION = 0.1

Scaling = Literal["feature", "global"]
_SCALINGS = ("feature", "global")
#: ``(x_train [N, D], y_train [N], x_test [M, D], y_test [M])`` as loaded from disk.
RawArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class ArrayDataModule(PredictSource, LightningDataModule):
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
            the training split (under DDP, at each process's share of it).
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
        num_classes (int): number of classes (known before :meth:`setup`; ``0`` for
            float targets).
        num_targets (int | None): ``None`` for labels; the width ``L`` of float
            targets ``y (Tensor[N, L])`` (regression).
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
    #: ``None``: integer labels; else the width ``L`` of float targets (regression).
    num_targets: int | None = None
    in_features: int
    input_shape: tuple[int, ...]
    #: ``(C, H, W)`` of image data sets (also when served flattened), else ``None``.
    image_shape: ClassVar[tuple[int, int, int] | None] = None
    #: Scaling used when ``scaling=None``.
    default_scaling: ClassVar[Scaling] = "feature"
    #: Largest pixel value in the raw data's units (image data), which converts the
    #: pixels of an image folder to those units; ``None``: image folders are refused.
    pixel_max: float | None = None

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
        for name, flag in (
            ("pin_memory", pin_memory),
            ("shuffle", shuffle),
            ("drop_last", drop_last),
        ):
            self._check_bool(name, flag)
        resolved = scaling if scaling is not None else self.default_scaling
        self._check_split_settings(val_fraction, resolved, seed, clip)
        self._requested_batch_size = batch_size
        #: The common options as given, added to each subclass's hyper-parameters.
        self._common_options: dict[str, Any] = {
            "batch_size": batch_size,
            "num_features": num_features,
            "val_fraction": val_fraction,
            "scaling": scaling,
            "clip": clip,
            "num_workers": num_workers,
            "pin_memory": pin_memory,
            "seed": seed,
            "shuffle": shuffle,
            "drop_last": drop_last,
        }
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
        self._built_with: tuple[object, ...] | None = None  # _split_settings at setup

    def _save_options(self, ignore: Sequence[str] = ()) -> None:
        """``save_hyperparameters`` of the calling ``__init__``, completed with every common
        option (the subclass receives them as ``**kwargs``)."""
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        self.save_hyperparameters(ignore=list(ignore), frame=caller)
        merged = {**self._common_options, **self.hparams}
        self.save_hyperparameters(merged, ignore=list(ignore), frame=caller)

    # ------------------------------------------------------------------ validation
    @property
    def _name(self) -> str:
        return type(self).__name__

    def _check_int(self, name: str, value: Any, low: int, *, optional: bool = False) -> None:
        if value is None and optional:
            return
        check_int(self._name, name, value, minimum=low)

    def _check_bool(self, name: str, value: Any) -> None:
        check_bool(self._name, name, value)

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
        Set up again, with ``val_fraction``, ``scaling``, ``seed`` or ``clip`` changed
        since, it splits and scales anew with them (checked as the constructor checks
        them), rather than serving the splits of the old ones.

        Args:
            stage: Lightning stage (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``);
                ignored.
        """
        settings = self._split_settings()
        # getattr: a module pickled before it recorded its settings
        if self.train_dataset is not None and settings == getattr(self, "_built_with", settings):
            return
        self._check_split_settings(*settings)
        x_train, y_train, x_test, y_test = self._locate()()
        self._build(x_train, y_train, x_test, y_test)
        self._built_with = settings

    def _split_settings(self) -> tuple[Any, ...]:
        """What the splits and the scaling depend on besides the data."""
        return (self.val_fraction, self.scaling, self.seed, self.clip)

    def _check_split_settings(self, val_fraction: Any, scaling: Any, seed: Any, clip: Any) -> None:
        """The constructor's checks of :meth:`_split_settings`, run again by
        :meth:`setup` on values set since."""
        check_fraction(self._name, "val_fraction", val_fraction, include_zero=True)
        check_choice(self._name, "scaling", scaling, _SCALINGS)
        self._check_int("seed", seed, 0)
        self._check_bool("clip", clip)

    def _build(
        self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
    ) -> None:
        """Split validation rows off, fit the scaler on the training rows, build datasets."""
        sizes = {"in_features": self.in_features, "num_classes": self.num_classes}
        targets = self.num_targets
        x_train, y_train = check_arrays(
            self._name, x_train, y_train, "train", **sizes, num_targets=targets
        )
        x_test, y_test = check_arrays(
            self._name, x_test, y_test, "test", **sizes, num_targets=targets
        )
        val_idx, fit_idx = validation_split(self._name, len(x_train), self.val_fraction, self.seed)
        x_fit = x_train[fit_idx]
        self._fit_scaler(x_fit)
        self.train_dataset = self._dataset(x_fit, y_train[fit_idx], clip=True, split="train")
        self.val_dataset = (
            self._dataset(x_train[val_idx], y_train[val_idx], clip=self.clip, split="val")
            if len(val_idx)
            else None
        )
        self.test_dataset = self._dataset(x_test, y_test, clip=self.clip, split="test")

    def _fit_scaler(self, x: np.ndarray) -> None:
        """Min-max statistics of ``x (np.ndarray[N, D])`` (global or per column)."""
        lo, hi, self._divisor, self._keep = fit_min_max(x, global_range=self.scaling == "global")
        self._shift = lo
        self.data_min = torch.from_numpy(lo.copy())
        self.data_max = torch.from_numpy(hi.copy())

    def _scale(self, x: np.ndarray, *, clip: bool, what: str) -> Tensor:
        """Scale ``x (np.ndarray[N, D])`` into a new ``Tensor[N, D]`` of float32.

        Raises:
            ValueError: a scaled value whose square overflows float32 (a row far outside
                the training range), naming ``what`` and the training range.
        """
        if self._shift is None or self._divisor is None or self._keep is None:
            raise RuntimeError(f"{self._name}: call setup() before scaling features")
        assert self.data_min is not None and self.data_max is not None
        scaled = scale_rows(x, self._shift, self._divisor, self._keep, clip=clip)
        check_scaled(self._name, what, scaled, self.data_min.numpy(), self.data_max.numpy())
        return scaled

    def _dataset(self, x: np.ndarray, y: np.ndarray, *, clip: bool, split: str) -> TensorDataset:
        features = self._scale(x, clip=clip, what=f"{split} features")
        features = features.reshape(len(x), *self.input_shape)
        return BatchedTensorDataset(features, torch.from_numpy(y))

    def transform(self, x: Tensor | np.ndarray) -> Tensor:
        """Scale new raw features with the training statistics (no clipping).

        Args:
            x (Tensor[N, D] | Tensor[N, *input_shape]): raw features in the units of the
                files (e.g. pixels 0..255).

        Returns:
            Tensor[N, *input_shape]: float32 scaled features.

        Raises:
            TypeError: features that are not real numbers.
            ValueError: a wrong width, NaN / Inf, or values that scale beyond
                :data:`~kernel_layers.data.scaling.MAX_SCALED_MAGNITUDE`.
        """
        array = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
        return self._transform(array, "argument 'x'")

    def _transform(self, array: np.ndarray, what: str) -> Tensor:
        self.setup()
        array = array.reshape(len(array), -1)
        if array.shape[1] != self.in_features:
            raise ValueError(
                f"{self._name}: transform expects {self.in_features} features per row, "
                f"got {array.shape[1]}"
            )
        check_feature_values(self._name, what, array)
        scaled = self._scale(array, clip=self.clip, what=what)
        return scaled.reshape(len(array), *self.input_shape)

    def input_scaling(self) -> InputScaling:
        """The scaling :meth:`transform` applies, as a module (float64 buffers): raw rows
        ``Tensor[B, D]`` to the model's inputs ``Tensor[B, *input_shape]``, for a model
        exported with its preprocessing (:meth:`KernelClassifier.predictor
        <kernel_layers.training.module.KernelClassifier.predictor>`). Sets the data up
        (the statistics come from the training rows)."""
        self.setup()
        if self._shift is None or self._divisor is None or self._keep is None:
            raise RuntimeError(f"{self._name}: the scaler was not fitted by setup()")
        return InputScaling(
            self._shift, self._divisor, self._keep, clip=self.clip, input_shape=self.input_shape
        )

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
            Tensor[N] | Tensor[N, L]: int64 labels in ``[0, num_classes)``, or float32
            targets when ``num_targets`` is set.
        """
        self.setup()
        assert self.train_dataset is not None
        return self.train_dataset.tensors[1]

    # ------------------------------------------------------------------ loaders
    def _loader(self, dataset: TensorDataset, *, train: bool) -> DataLoader:
        batch_size = self.batch_size
        trainer = getattr(self, "trainer", None)
        world_size = 1 if trainer is None else trainer.world_size
        # Under DDP each process trains on its DistributedSampler's share, ceil(N / world),
        # so a batch is capped at that share (or drop_last would leave no batch at all).
        rows = -(-len(dataset) // world_size)
        if train and batch_size > rows:
            if self._requested_batch_size is not None and not self._warned_cap:
                where = "" if world_size == 1 else f" of each of the {world_size} processes"
                rank_zero_warn(
                    f"{self._name}: batch_size={batch_size} exceeds the {rows} "
                    f"training rows{where}; using batches of {rows}"
                )
                self._warned_cap = True
            batch_size = rows
        return make_loader(
            dataset,
            batch_size=batch_size,
            train=train,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            seed=self.seed,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            world_size=world_size,
            distributed=isinstance(getattr(trainer, "strategy", None), ParallelStrategy),
            rank=0 if trainer is None else trainer.global_rank,
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


def __getattr__(name: str) -> Any:
    """``TensorDataModule``, defined in :mod:`kernel_layers.data.tensor` (which imports
    this module), stays importable from here."""
    if name == "TensorDataModule":
        from kernel_layers.data.tensor import TensorDataModule

        return TensorDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
