"""MNIST and Fashion-MNIST from their IDX files (or torchvision's download)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from kernel_layers.data import readers
from kernel_layers.data.augment import draw_shift_flip, shift_flip, step_generator
from kernel_layers.data.base import ArrayDataModule, RawArrays, Scaling
from kernel_layers.data.idx import read_idx
from kernel_layers.data.network import DatasetNotFoundError, download_timeout, failure_reason

__all__ = ["MNIST_IDX_FILES", "MNIST_IMAGE_SHAPE", "FashionMNISTDataModule", "MNISTDataModule"]

#: MNIST / Fashion-MNIST image shape (channels, height, width).
MNIST_IMAGE_SHAPE = (1, 28, 28)
#: The four IDX files of MNIST / Fashion-MNIST (each may also carry a ``.gz`` suffix).
MNIST_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


#: MD5 of the label values (``uint8``) of each original training and test file: MNIST's
#: and Fashion-MNIST's files share names and format, so the labels tell them apart.
LABELS_MD5 = {
    "e86ee40d66677c011a9abda399ec8c4d": "MNIST",
    "073c3904dfbd3e141ff8aa01cfde6b15": "MNIST",
    "3236f6424fc25388b2834cb19942cf7e": "Fashion-MNIST",
    "8dea97a4e78c1bd1b5a6e8efbb870b6e": "Fashion-MNIST",
}


def _micro_batch(trainer: Any) -> int:
    """The index of the batch being transferred among the ``accumulate_grad_batches`` of
    its optimizer step (``0`` without accumulation). Lightning counts the batches of the
    epoch it has readied (``increment_ready`` follows the transfer hooks) and steps when
    that count reaches a multiple of ``k`` or the epoch's last batch; the count is part of
    the loop state a checkpoint restores."""
    accumulate = int(getattr(trainer, "accumulate_grad_batches", 1))
    if accumulate <= 1:
        return 0
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready) % accumulate


class _IDXDataModule(ArrayDataModule):
    """MNIST-format data (four IDX files) through ``torchvision.datasets``."""

    #: Name of torchvision's dataset class, also its folder under ``root``.
    torchvision_name: ClassVar[str]
    title: ClassVar[str]
    num_classes = 10
    image_shape = MNIST_IMAGE_SHAPE
    in_features = int(np.prod(MNIST_IMAGE_SHAPE))
    default_scaling: ClassVar[Scaling] = "global"
    pixel_max = 255.0

    def __init__(
        self,
        root: str | os.PathLike[str] = "data",
        *,
        flatten: bool = True,
        download: bool = True,
        augment_shift: int = 0,
        augment_flip: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(root, (str, os.PathLike)):
            raise TypeError(
                f"{self._name}: argument 'root' must be a str or path, got {type(root).__name__}"
            )
        self._check_bool("flatten", flatten)
        self._check_bool("download", download)
        self._check_int("augment_shift", augment_shift, 0)
        self._check_bool("augment_flip", augment_flip)
        if augment_shift >= min(MNIST_IMAGE_SHAPE[1:]):
            raise ValueError(
                f"{self._name}: argument 'augment_shift' must be below the image side "
                f"{min(MNIST_IMAGE_SHAPE[1:])}, got {augment_shift}"
            )
        self.augment_shift = augment_shift
        self.augment_flip = augment_flip
        self.root = Path(root)
        self.flatten = flatten
        self.download = download
        self.input_shape = (self.in_features,) if flatten else MNIST_IMAGE_SHAPE
        self._save_options()

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Training batches only: each image shifted by up to ``augment_shift`` pixels per
        axis and, with ``augment_flip``, mirrored left-right with probability 1/2, on the
        batch's device. The draws are seeded by ``(seed, global step, rank)`` and, with
        ``accumulate_grad_batches=k > 1``, by the batch's index among the ``k`` of its
        step (from Lightning's batch progress, restored on resume): a run resumed from a
        checkpoint augments exactly as the uninterrupted run."""
        trainer = getattr(self, "trainer", None)
        if trainer is None or not trainer.training or not (self.augment_shift or self.augment_flip):
            return batch
        x = batch[0]
        generator = step_generator(
            self.seed, trainer.global_step, trainer.global_rank, _micro_batch(trainer)
        )
        params = draw_shift_flip(x.shape[0], self.augment_shift, self.augment_flip, generator)
        images = shift_flip(x.reshape(x.shape[0], *MNIST_IMAGE_SHAPE), params)
        return [images.reshape(x.shape), *batch[1:]]

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
        readers.check_network([mirror + cls.resources[0][0] for mirror in cls.mirrors])
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
                    reason = failure_reason(err)
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
            if len(images) == 0:
                raise ValueError(
                    f"{self._name}: '{images_path}' must hold at least one image, got 0"
                )
            if labels.dtype.kind not in "iu":
                raise ValueError(
                    f"{self._name}: '{labels_path}' must hold integer labels (IDX type "
                    f"0x08 / 0x09 / 0x0b / 0x0c), got dtype {labels.dtype}"
                )
            if labels.shape != (len(images),):
                raise ValueError(
                    f"{self._name}: '{labels_path}' must hold {len(images)} labels to match "
                    f"'{images_path}', got shape {list(labels.shape)}"
                )
            owner = LABELS_MD5.get(hashlib.md5(labels.tobytes()).hexdigest())
            if owner is not None and owner != self.title:
                raise ValueError(
                    f"{self._name}: '{labels_path}' holds {owner}'s labels, not "
                    f"{self.title}'s (the two share file names and format); point 'root' at "
                    f"the {self.title} files"
                )
            arrays += [images.reshape(len(images), -1), labels.astype(np.int64)]
        return arrays[0], arrays[1], arrays[2], arrays[3]


class MNISTDataModule(_IDXDataModule):
    """MNIST (LeCun et al.): 60000 / 10000 handwritten digits, 28x28 pixels, 10 classes.

    Data come from the four IDX files, found in ``<root>/MNIST/raw`` (torchvision's
    layout, where ``download=True`` puts them through ``torchvision.datasets.MNIST``,
    checksummed) or directly in ``<root>``; plain or gzipped files both work, so a
    directory holding the four files works offline. Fashion-MNIST's files (same names and
    format) are refused, recognised by their labels.

    Pixels are min-max scaled with the global training minimum and maximum
    (``scaling="global"``, i.e. ``/255``); ``scaling="feature"`` scales each pixel on its
    own (then test pixels that are rare in training can land far above 1).

    Args:
        root: directory holding the data (see above).
        flatten: serve ``x (Tensor[B, 784])`` for standalone kernel layers; ``False``
            serves images ``x (Tensor[B, 1, 28, 28])`` for convolutional backbones.
        download: download through torchvision when the files are missing.
        augment_shift: training images shifted by a random ``[-s, s]`` pixels per axis
            (zeros move in), drawn per image and step; ``0`` (default): no shifts.
        augment_flip: training images mirrored left-right with probability 1/2 (for
            Fashion-MNIST's clothes, not for digits).
        **kwargs: the common options of :class:`~kernel_layers.data.base.ArrayDataModule`
            (``batch_size``, ``num_features``, ``val_fraction``, ``scaling``, ``clip``,
            ``num_workers``, ``pin_memory``, ``seed``, ``shuffle``, ``drop_last``).

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
