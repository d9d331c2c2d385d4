"""LightningDataModules for the datasets of the DI paper and an offline quick start.

Every module follows the paper's protocol:

* features min-max scaled to ``[0, 1]`` with statistics of the **training rows actually
  used for training** (the validation rows carved from the training split are excluded,
  so nothing leaks into validation or test);
* ``batch_size`` defaults to the paper's rule ``max(1000, 2 J)`` when told the kernel
  layer's output width ``J`` (``num_features``), else ``1000``;
* training batches are shuffled and incomplete last batches are dropped (DI wants full
  batches larger than ``J``);
* a validation split carved from the training split with a fixed seed (``val_fraction``),
  so ``val/acc`` can be monitored without touching the test set.

Datasets and where they come from:

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
:class:`~kernel_layers.data.network.DatasetNotFoundError` (a
:class:`FileNotFoundError`), naming the directory to fill and the files expected there.

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

from kernel_layers.data.base import ArrayDataModule
from kernel_layers.data.covtype import COVTYPE_TEST_SIZE, COVTYPE_TRAIN_SIZE, CovTypeDataModule
from kernel_layers.data.digits import DigitsDataModule
from kernel_layers.data.letter import LETTER_TEST_SIZE, LETTER_TRAIN_SIZE, LetterDataModule
from kernel_layers.data.loaders import DEFAULT_BATCH_SIZE, default_batch_size
from kernel_layers.data.mnist import FashionMNISTDataModule, MNISTDataModule
from kernel_layers.data.network import DatasetNotFoundError
from kernel_layers.data.scaling import InputScaling
from kernel_layers.data.tensor import TensorDataModule

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
    "InputScaling",
    "LetterDataModule",
    "MNISTDataModule",
    "TensorDataModule",
    "default_batch_size",
]
