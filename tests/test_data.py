"""Tests of kernel_layers.data: real on-disk formats written here, no network."""

from __future__ import annotations

import gzip
import inspect
import socket
import string
import struct
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from formats import (
    IDX_NAMES,
    N_TEST,
    N_TRAIN,
    make_mnist_dir,
    write_covtype,
    write_idx_images,
    write_idx_labels,
    write_letter,
)
from lightning.pytorch.loggers import CSVLogger

from kernel_layers import KernelClassifier, KernelRegressor, NystromLayer
from kernel_layers.data import (
    COVTYPE_TEST_SIZE,
    COVTYPE_TRAIN_SIZE,
    ArrayDataModule,
    CovTypeDataModule,
    DatasetNotFoundError,
    DigitsDataModule,
    FashionMNISTDataModule,
    LetterDataModule,
    MNISTDataModule,
    TensorDataModule,
    default_batch_size,
)
from kernel_layers.data import readers as _datasets
from kernel_layers.data.covtype import COVTYPE_URL
from kernel_layers.data.letter import LETTER_OPENML_URL


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The reachability probe fails, as on a machine without network; returns the URL
    lists it was called with. Any other connection attempt fails the test: a module must
    give up after the probe instead of trying (and timing out on) the download itself."""
    probes: list[list[str]] = []

    def refuse(urls, **kwargs):
        probes.append(list(urls))
        raise OSError("network unreachable (test)")

    def forbidden(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted after the probe: {args}")

    monkeypatch.setattr("kernel_layers.data.readers.check_network", refuse)
    monkeypatch.setattr(socket, "create_connection", forbidden)
    monkeypatch.setattr(socket.socket, "connect", forbidden)
    return probes


# ---------------------------------------------------------------------------- IDX reader
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_reads_lecun_format(tmp_path: Path, gz: bool) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.int64).reshape(2, 28, 28) % 256
    write_idx_images(tmp_path / "img", images, gz=gz)
    write_idx_labels(tmp_path / "lab", np.array([3, 9]), gz=gz)
    suffix = ".gz" if gz else ""
    got = _datasets.read_idx(tmp_path / f"img{suffix}")
    assert got.dtype == np.uint8 and got.shape == (2, 28, 28)
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(_datasets.read_idx(tmp_path / f"lab{suffix}"), [3, 9])


def test_write_idx_round_trips_other_dtypes(tmp_path: Path) -> None:
    for array in (np.arange(6, dtype=np.int32).reshape(2, 3), np.linspace(0, 1, 4)):
        _datasets.write_idx(tmp_path / "a.gz", array, compress=True)
        np.testing.assert_array_equal(_datasets.read_idx(tmp_path / "a.gz"), array)
    with pytest.raises(ValueError, match="write_idx: dtype complex128 has no IDX type code"):
        _datasets.write_idx(tmp_path / "c", np.zeros(2, dtype=complex))


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="is not an IDX file"):
        _datasets.read_idx(tmp_path / "bad")
    (tmp_path / "code").write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="unknown IDX type code 0x07"):
        _datasets.read_idx(tmp_path / "code")
    (tmp_path / "short").write_bytes(struct.pack(">IIII", 0x803, 5, 28, 28) + b"\x00" * 10)
    with pytest.raises(ValueError, match=r"truncated: header announces shape \(5, 28, 28\)"):
        _datasets.read_idx(tmp_path / "short")


# ---------------------------------------------------------------------------- MNIST
@pytest.mark.parametrize("owner", ["MNIST", "Fashion-MNIST"])
def test_the_other_data_sets_files_are_refused_by_their_labels(
    tmp_path: Path, owner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the two data sets share file names and format: files of one directly in the root
    # both look for would train the other silently
    import hashlib

    from kernel_layers.data import mnist

    raw = make_mnist_dir(tmp_path)
    digest = hashlib.md5(raw["y_train"].astype(np.uint8).tobytes()).hexdigest()
    monkeypatch.setattr(mnist, "LABELS_MD5", {digest: owner})
    right, wrong = (
        (MNISTDataModule, FashionMNISTDataModule)
        if owner == "MNIST"
        else (FashionMNISTDataModule, MNISTDataModule)
    )
    right(tmp_path, download=False).setup("fit")
    with pytest.raises(
        ValueError,
        match=rf"{wrong.__name__}: '.*train-labels-idx1-ubyte' holds {owner}'s labels, not "
        rf"{wrong.title}'s .*point 'root' at the {wrong.title} files",
    ):
        wrong(tmp_path, download=False).setup("fit")


@pytest.mark.parametrize(
    ("cls", "layout", "gz"),
    [
        (MNISTDataModule, "torchvision", False),
        (MNISTDataModule, "flat", True),
        (FashionMNISTDataModule, "torchvision", True),
        (FashionMNISTDataModule, "flat", False),
    ],
)
def test_idx_module_loads_real_layouts(tmp_path: Path, cls: type, layout: str, gz: bool) -> None:
    folder = tmp_path / cls.torchvision_name / "raw" if layout == "torchvision" else tmp_path
    raw = make_mnist_dir(folder, gz=gz)
    dm = cls(tmp_path, download=False, val_fraction=0.2)
    assert (dm.num_classes, dm.in_features, dm.input_shape) == (10, 784, (784,))
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.train_dataset) == 40 and len(dm.val_dataset) == 10
    assert len(dm.test_dataset) == N_TEST
    x, y = dm.train_dataset.tensors
    assert x.shape == (40, 784) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.min() == 0.0 and x.max() == 1.0
    # Global min-max on training pixels (0..100): test pixel values are divided by 100.
    x_test, y_test = dm.test_dataset.tensors
    expected = torch.from_numpy(raw["x_test"].reshape(N_TEST, -1)).float() / 100
    torch.testing.assert_close(x_test, expected)
    torch.testing.assert_close(y_test, torch.from_numpy(raw["y_test"]).long())


def test_idx_statistics_come_from_training_split(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path, train_max=100, test_pixel=200)
    dm = MNISTDataModule(tmp_path, download=False, val_fraction=0.0)
    dm.setup()
    assert float(dm.data_max.max()) == 100.0 and float(dm.data_min.min()) == 0.0
    # Planted test pixel 200 -> 2.0: the test split did not move the scaler, no clipping.
    assert dm.test_dataset.tensors[0][0, 14 * 28 + 14] == 2.0
    clipped = MNISTDataModule(tmp_path, download=False, val_fraction=0.0, clip=True)
    clipped.setup()
    assert clipped.test_dataset.tensors[0][0, 14 * 28 + 14] == 1.0
    torch.testing.assert_close(
        dm.transform(torch.full((1, 28, 28), 50, dtype=torch.uint8)), torch.full((1, 784), 0.5)
    )


def test_idx_feature_scaling_maps_constant_pixels_to_zero(tmp_path: Path) -> None:
    raw = make_mnist_dir(tmp_path)
    x_train = raw["x_train"].reshape(N_TRAIN, -1)
    x_train[:, 5] = 0  # a pixel constant in training ...
    write_idx_images(tmp_path / IDX_NAMES[0], x_train.reshape(N_TRAIN, 28, 28))
    dm = MNISTDataModule(tmp_path, download=False, val_fraction=0.0, scaling="feature")
    dm.setup()
    x = dm.train_features()
    assert torch.all(x[:, 5] == 0) and torch.isfinite(x).all()
    assert torch.all(x.amin(0)[x.amax(0) > 0] == 0) and x.max() == 1.0
    assert torch.all(dm.test_dataset.tensors[0][:, 5] == 0)  # ... is 0 in the test split too


def test_idx_image_mode(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path, gz=True)
    dm = FashionMNISTDataModule(tmp_path, flatten=False, download=False, batch_size=8)
    assert dm.input_shape == (1, 28, 28) and dm.in_features == 784
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 1, 28, 28) and y.shape == (8,)
    assert dm.train_features().shape == (45, 1, 28, 28)


def test_idx_module_rejects_malformed_files(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    write_idx_labels(tmp_path / IDX_NAMES[1], np.zeros(N_TRAIN - 1))
    with pytest.raises(ValueError, match=f"must hold {N_TRAIN} labels to match"):
        MNISTDataModule(tmp_path, download=False).setup()
    write_idx_images(tmp_path / IDX_NAMES[0], np.zeros((3, 8, 8)))
    with pytest.raises(ValueError, match=r"must hold images \[N, 28, 28\], got \[3, 8, 8\]"):
        MNISTDataModule(tmp_path, download=False).setup()


def test_idx_offline_error_names_directory_and_files(
    tmp_path: Path, no_network: list[list[str]]
) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        MNISTDataModule(tmp_path / "mnist", download=False).prepare_data()
    assert no_network == []  # download=False: not even the probe
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert "MNISTDataModule" in message and "download=False" in message
    assert str(tmp_path / "mnist" / "MNIST" / "raw") in message
    for name in IDX_NAMES:
        assert name in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_idx_download_failure_is_immediate_and_clear(
    tmp_path: Path, no_network: list[list[str]]
) -> None:
    with pytest.raises(
        DatasetNotFoundError,
        match=r"FashionMNISTDataModule: no Fashion-MNIST data under '.*' and the download "
        r"failed \(OSError: network unreachable \(test\)\)\. Expected the four IDX files "
        r"train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
        r"t10k-labels-idx1-ubyte",
    ):
        FashionMNISTDataModule(tmp_path).setup()
    assert len(no_network) == 1 and no_network[0]  # one probe, then the error


def test_incomplete_directory_is_not_used(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    (tmp_path / IDX_NAMES[3]).unlink()
    with pytest.raises(DatasetNotFoundError, match="t10k-labels-idx1-ubyte"):
        MNISTDataModule(tmp_path, download=False).setup()


# ---------------------------------------------------------------------------- batch rule
def test_batch_size_rule() -> None:
    assert default_batch_size(None) == 1000
    assert default_batch_size(300) == 1000
    assert default_batch_size(600) == 1200
    assert DigitsDataModule(num_features=600).batch_size == 1200
    assert DigitsDataModule(num_features=100).batch_size == 1000
    assert DigitsDataModule(num_features=600, batch_size=64).batch_size == 64


def test_training_batches_capped_at_training_split(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    dm = MNISTDataModule(tmp_path, download=False, num_features=600)
    dm.setup()
    assert dm.batch_size == 1200
    batches = list(dm.train_dataloader())
    assert len(batches) == 1 and batches[0][0].shape == (45, 784)
    explicit = MNISTDataModule(tmp_path, download=False, batch_size=100)
    explicit.setup()
    with pytest.warns(UserWarning, match="batch_size=100 exceeds the 45 training rows"):
        assert len(explicit.train_dataloader()) == 1


def test_loaders_drop_last_shuffle_and_order(tmp_path: Path) -> None:
    dm = DigitsDataModule(batch_size=100, val_fraction=0.1)
    dm.setup()
    n_train = len(dm.train_dataset)
    train = dm.train_dataloader()
    assert len(train) == n_train // 100
    torch.manual_seed(0)
    xb, yb = next(iter(train))
    assert xb.shape == (100, 64) and yb.shape == (100,)
    assert not torch.equal(yb, dm.train_targets()[:100])  # shuffled
    x_val = torch.cat([b[0] for b in dm.val_dataloader()])
    torch.testing.assert_close(x_val, dm.val_dataset.tensors[0])
    x_test = torch.cat([b[0] for b in dm.test_dataloader()])
    torch.testing.assert_close(x_test, dm.test_dataset.tensors[0])
    x_pred = torch.cat([b[0] for b in dm.predict_dataloader()])
    torch.testing.assert_close(x_pred, x_test)


def test_loader_before_setup_raises() -> None:
    with pytest.raises(RuntimeError, match="DigitsDataModule: call setup\\(\\) before"):
        DigitsDataModule().train_dataloader()


def test_no_validation_split() -> None:
    dm = DigitsDataModule(val_fraction=0.0)
    dm.setup()
    assert dm.val_dataset is None and dm.val_dataloader() == []
    assert len(dm.train_dataset) == 1347


# ---------------------------------------------------------------------------- splits
def test_validation_split_sizes_and_seed() -> None:
    a, b, c = (DigitsDataModule(val_fraction=0.2, seed=s) for s in (0, 0, 1))
    for dm in (a, b, c):
        dm.setup()
    assert len(a.val_dataset) == round(0.2 * 1347) and len(a.train_dataset) == 1347 - 269
    torch.testing.assert_close(a.val_dataset.tensors[0], b.val_dataset.tensors[0])
    assert not torch.equal(a.val_dataset.tensors[0], c.val_dataset.tensors[0])


def test_digits_quick_start() -> None:
    dm = DigitsDataModule(val_fraction=0.1)
    assert (dm.num_classes, dm.in_features) == (10, 64)
    dm.setup()
    assert len(dm.train_dataset) + len(dm.val_dataset) == 1347 and len(dm.test_dataset) == 450
    x, y = dm.train_dataset.tensors
    assert x.shape[1] == 64 and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.min() == 0 and x.max() == 1 and set(y.tolist()) == set(range(10))
    assert (
        torch.bincount(dm.test_dataset.tensors[1]).min() >= 43
    )  # stratified (class 8 has 174 rows)
    images = DigitsDataModule(flatten=False)
    images.setup()
    assert images.train_features().shape[1:] == (1, 8, 8)


# ---------------------------------------------------------------------------- CovType
@pytest.mark.parametrize("where", ["covtype.data.gz", "covertype/covtype.data"])
def test_covtype_reads_uci_csv(tmp_path: Path, where: str) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    x_raw, y_raw = write_covtype(path, n=200)
    dm = CovTypeDataModule(tmp_path, download=False, val_fraction=0.1)
    assert (dm.num_classes, dm.in_features) == (7, 54)
    dm.setup()
    n_train = round(200 * COVTYPE_TRAIN_SIZE / (COVTYPE_TRAIN_SIZE + COVTYPE_TEST_SIZE))
    assert n_train == 160
    assert len(dm.train_dataset) + len(dm.val_dataset) == n_train
    assert len(dm.val_dataset) == 16 and len(dm.test_dataset) == 40
    x, y = dm.train_dataset.tensors
    assert x.shape == (144, 54) and x.min() == 0 and x.max() == 1
    labels = torch.cat([y, dm.val_dataset.tensors[1], dm.test_dataset.tensors[1]])
    assert labels.min() == 0 and labels.max() == 6
    assert torch.bincount(labels).tolist() == np.bincount(y_raw - 1).tolist()
    # Per-feature min-max on the training rows: data_min / data_max are those rows' extremes.
    assert torch.all(dm.data_min >= torch.from_numpy(x_raw.min(0)).double())
    assert torch.all(dm.data_max <= torch.from_numpy(x_raw.max(0)).double())
    again = CovTypeDataModule(tmp_path, download=False, val_fraction=0.1)
    again.setup()
    torch.testing.assert_close(again.test_dataset.tensors[0], dm.test_dataset.tensors[0])


def test_covtype_paper_split_sizes() -> None:
    full = COVTYPE_TRAIN_SIZE + COVTYPE_TEST_SIZE
    assert full == 581012
    assert CovTypeDataModule._proportional_split(full, full, COVTYPE_TRAIN_SIZE) == 464810
    assert LetterDataModule._proportional_split(20000, 20000, 15000) == 15000


def test_covtype_download_keeps_arrays_that_load_without_pickles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 50, size=(100, 54)).astype(np.float64)
    y = (np.arange(100) % 7).astype(np.int64)
    monkeypatch.setattr("kernel_layers.data.readers.check_network", lambda urls, **kw: None)
    monkeypatch.setattr(CovTypeDataModule, "_from_sklearn", lambda self, download: (x, y))
    CovTypeDataModule(tmp_path, val_fraction=0.0).setup()  # the "download"
    assert (tmp_path / "covtype-arrays.npz").is_file()
    monkeypatch.undo()
    dm = CovTypeDataModule(tmp_path, download=False, val_fraction=0.0)
    dm.setup()
    assert len(dm.train_dataset) == 80 and len(dm.test_dataset) == 20
    labels = torch.cat([dm.train_targets(), dm.test_dataset.tensors[1]])
    assert sorted(set(labels.tolist())) == list(range(7))


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 cut short"], ids=["empty", "truncated"])
def test_a_damaged_array_cache_is_named(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "covtype-arrays.npz").write_bytes(content)
    with pytest.raises(ValueError, match=r"'.*covtype-arrays.npz' must be a .npz archive"):
        _datasets.read_arrays(tmp_path / "covtype-arrays.npz")


def test_covtype_rejects_malformed_csv(tmp_path: Path) -> None:
    (tmp_path / "covtype.data").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(ValueError, match="must have 55 comma-separated columns"):
        CovTypeDataModule(tmp_path, download=False).setup()
    (tmp_path / "covtype.data").write_text(",".join(["1"] * 54 + ["9"]) + "\n")
    with pytest.raises(
        ValueError, match=r"labels in .* must be integers in 1\.\.7, got 9 in row 0"
    ):
        CovTypeDataModule(tmp_path, download=False).setup()
    (tmp_path / "covtype.data").write_text(",".join(["1.5"] * 54 + ["2"]) + "\n")
    with pytest.raises(ValueError, match=r"cannot parse .* as a CSV of integers"):
        CovTypeDataModule(tmp_path, download=False).setup()


def test_covtype_csv_is_parsed_into_int32_without_a_float64_table(tmp_path: Path) -> None:
    x_raw, y_raw = write_covtype(tmp_path / "covtype.data.gz", n=50)
    x, y = _datasets.read_covtype_csv(tmp_path / "covtype.data.gz")
    assert x.dtype == np.int32 and y.dtype == np.int64
    np.testing.assert_array_equal(x, x_raw)
    np.testing.assert_array_equal(y, y_raw - 1)


def test_covtype_offline_error(tmp_path: Path, no_network: list[list[str]]) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        CovTypeDataModule(tmp_path / "home").prepare_data()
    assert no_network == [[COVTYPE_URL]]  # one probe of the download host, then the error
    message = str(info.value)
    assert f"no CovType data under '{tmp_path / 'home'}'" in message
    assert "download failed (OSError: network unreachable (test))" in message
    assert "covtype.data.gz" in message and "covtype-arrays.npz" in message
    with pytest.raises(DatasetNotFoundError, match=r"download is disabled \(download=False\)"):
        CovTypeDataModule(tmp_path / "home", download=False).setup()
    assert len(no_network) == 1  # download=False: no probe


# ---------------------------------------------------------------------------- Letter
def test_letter_reads_uci_csv(tmp_path: Path) -> None:
    letters, x_raw = write_letter(tmp_path / "letter-recognition.data", n=40)
    dm = LetterDataModule(tmp_path, download=False, val_fraction=0.0)
    assert (dm.num_classes, dm.in_features) == (26, 16)
    dm.setup()
    assert len(dm.train_dataset) == 30 and len(dm.test_dataset) == 10  # 75 / 25, file order
    expected = torch.tensor([ord(c) - ord("A") for c in letters])
    torch.testing.assert_close(dm.train_targets(), expected[:30])
    torch.testing.assert_close(dm.test_dataset.tensors[1], expected[30:])
    assert dm.train_targets()[0] == 19  # 'T' -> 19
    lo, hi = x_raw[:30].min(0), x_raw[:30].max(0)
    torch.testing.assert_close(
        dm.test_dataset.tensors[0], torch.from_numpy((x_raw[30:] - lo) / (hi - lo)).float()
    )


def test_letter_gz_in_subdirectory(tmp_path: Path) -> None:
    (tmp_path / "letter").mkdir()
    write_letter(tmp_path / "plain.data", n=52)
    with gzip.open(tmp_path / "letter" / "letter-recognition.data.gz", "wb") as fh:
        fh.write((tmp_path / "plain.data").read_bytes())
    dm = LetterDataModule(tmp_path, download=False)
    dm.setup()
    assert len(dm.train_dataset) + len(dm.val_dataset) == 39 and len(dm.test_dataset) == 13


def test_letter_rejects_malformed_csv(tmp_path: Path) -> None:
    (tmp_path / "letter-recognition.data").write_text("a," + ",".join(["1"] * 16) + "\n")
    with pytest.raises(ValueError, match=r"must start with a capital letter A\.\.Z, got 'a'"):
        LetterDataModule(tmp_path, download=False).setup()
    (tmp_path / "letter-recognition.data").write_text("A,1,2\n")
    with pytest.raises(ValueError, match=r"line 1 of .* must have 17 comma-separated fields"):
        LetterDataModule(tmp_path, download=False).setup()


def test_letter_offline_error(tmp_path: Path, no_network: list[list[str]]) -> None:
    with pytest.raises(
        DatasetNotFoundError,
        match=r"LetterDataModule: no Letter data under '.*home' and the download failed "
        r"\(OSError: network unreachable \(test\)\)\. Expected the UCI CSV "
        r"letter-recognition\.data",
    ):
        LetterDataModule(tmp_path / "home").setup()
    assert no_network == [[LETTER_OPENML_URL]]  # one probe of OpenML, then the error


def test_letter_openml_path_maps_letters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 16, size=(40, 16)).astype(np.float64)
    y = np.array([string.ascii_uppercase[i % 26] for i in range(40)], dtype=object)
    calls = []

    def fake_fetch_openml(name, **kwargs):
        calls.append((name, kwargs))
        return x, y

    monkeypatch.setattr("sklearn.datasets.fetch_openml", fake_fetch_openml)
    monkeypatch.setattr("kernel_layers.data.readers.check_network", lambda urls, **kw: None)
    dm = LetterDataModule(tmp_path, val_fraction=0.0)
    dm.setup()
    assert calls[0][0] == "letter" and calls[0][1]["version"] == 1
    assert calls[0][1]["data_home"] == str(tmp_path)
    assert dm.train_targets().tolist() == [i % 26 for i in range(30)]


# ---------------------------------------------------------------------------- in memory
def test_tensor_data_module_infers_shapes() -> None:
    x = torch.rand(60, 2, 3) * 10
    y = torch.arange(60) % 4
    dm = TensorDataModule(x[:50], y[:50], x[50:], y[50:], batch_size=10, val_fraction=0.2)
    assert (dm.num_classes, dm.in_features, dm.input_shape) == (4, 6, (2, 3))
    assert isinstance(dm, ArrayDataModule)
    dm.setup()
    assert dm.train_features().shape == (40, 2, 3) and len(dm.train_dataloader()) == 4
    assert dm.hparams["batch_size"] == 10 and "x_train" not in dm.hparams
    with pytest.raises(ValueError, match=r"argument 'y_test' must be integers in \[0, 2\)"):
        TensorDataModule(x[:50], y[:50] % 2, x[50:], y[50:], num_classes=2)
    match = "argument 'x_train' contain NaN or Inf: 2 value\\(s\\), the first in row 3"
    with pytest.raises(ValueError, match=match):
        bad = x[:50].clone()
        bad[3, 0, 0] = bad[7, 1, 2] = float("nan")
        TensorDataModule(bad, y[:50], x[50:], y[50:]).setup()


@pytest.mark.parametrize("float_targets", [False, True])
def test_tensor_data_module_fits_under_a_logger(float_targets: bool, tmp_path: Path) -> None:
    # A logger merges the data module's hyperparameters with the module's: the inferred
    # num_classes must be the one in use, not None.
    x = torch.rand(90, 3)
    y = (x[:, 0] * 3).floor().long()
    y_fit = y.float() if float_targets else y
    dm = TensorDataModule(x[:60], y_fit[:60], x[60:], y_fit[60:], batch_size=20,
                          float_targets=float_targets)  # fmt: skip
    layer = NystromLayer(3, 8, gamma=1.0)
    module: L.LightningModule = (
        KernelRegressor(layer) if float_targets else KernelClassifier(layer, num_classes=3)
    )
    trainer = L.Trainer(max_epochs=1, logger=CSVLogger(tmp_path), enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module, dm)
    assert dm.hparams["num_classes"] == (None if float_targets else 3)
    assert (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").is_file()


def test_batched_getitems_matches_indexing() -> None:
    dm = DigitsDataModule()
    dm.setup()
    ds = dm.train_dataset
    xb, yb = ds.__getitems__([3, 1, 4])
    torch.testing.assert_close(xb, torch.stack([ds[i][0] for i in (3, 1, 4)]))
    torch.testing.assert_close(yb, torch.stack([ds[i][1] for i in (3, 1, 4)]))


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "argument 'batch_size' must be an integer >= 1, got 0"),
        ({"num_features": 0}, ValueError, "argument 'num_features' must be an integer >= 1, got 0"),
        ({"num_workers": -1}, ValueError, "argument 'num_workers' must be an integer >= 0, got -1"),
        ({"seed": -2}, ValueError, "argument 'seed' must be an integer >= 0, got -2"),
        ({"batch_size": 2.5}, TypeError, "argument 'batch_size' must be an integer >= 1, got 2.5"),
        (
            {"val_fraction": 1.0},
            ValueError,
            r"argument 'val_fraction' must be in \[0, 1\), got 1.0",
        ),
        (
            {"val_fraction": -0.1},
            ValueError,
            r"argument 'val_fraction' must be in \[0, 1\), got -0.1",
        ),
        ({"scaling": "zscore"}, ValueError, "argument 'scaling' must be one of .* got 'zscore'"),
        ({"pin_memory": 1}, TypeError, "argument 'pin_memory' must be a bool, got 1"),
        ({"download": "no"}, TypeError, "argument 'download' must be a bool, got 'no'"),
    ],
)
def test_argument_validation(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=f"CovTypeDataModule: {match}"):
        CovTypeDataModule("unused", **kwargs)


def test_location_argument_validation() -> None:
    with pytest.raises(TypeError, match="MNISTDataModule: argument 'root' must be a str or path"):
        MNISTDataModule(root=3)
    with pytest.raises(TypeError, match="argument 'data_home' must be a str, path or None"):
        LetterDataModule(data_home=1.5)
    with pytest.raises(TypeError, match="DigitsDataModule: argument 'flatten' must be a bool"):
        DigitsDataModule(flatten="yes")
    with pytest.raises(ValueError, match="too few to hold out"):
        TensorDataModule(np.zeros((1, 2)), np.zeros(1), np.zeros((1, 2)), np.zeros(1)).setup()


def test_scaler_ignores_validation_rows() -> None:
    x = torch.arange(20, dtype=torch.float64).reshape(20, 1).repeat(1, 2)
    x[0, 0] = 1000.0  # planted in one training row; column 1 is column 0 without it
    y = torch.arange(20) % 2
    outcomes = set()
    for seed in range(8):
        dm = TensorDataModule(x, y, x[:4], y[:4], val_fraction=0.5, seed=seed)
        dm.setup()
        planted_in_val = bool((dm.val_dataset.tensors[0][:, 0] > 1).any())
        if planted_in_val:  # the validation row did not move the scaler
            assert torch.equal(dm.data_max[0], dm.data_max[1]) and dm.data_max[0] < 20
        else:
            assert float(dm.data_max[0]) == 1000.0
        assert dm.train_features().max() <= 1.0
        outcomes.add(planted_in_val)
    assert outcomes == {True, False}


# ------------------------------------------------------------------ common options
COMMON_OPTIONS = (
    "batch_size",
    "num_features",
    "val_fraction",
    "scaling",
    "clip",
    "num_workers",
    "pin_memory",
    "seed",
    "shuffle",
    "drop_last",
)


@pytest.mark.parametrize(
    "cls",
    [
        DigitsDataModule,
        MNISTDataModule,
        FashionMNISTDataModule,
        CovTypeDataModule,
        LetterDataModule,
    ],
)
def test_common_options_are_declared_once(cls: type[ArrayDataModule], tmp_path: Path) -> None:
    """Subclasses forward the base's options as **kwargs, and still record all of them."""
    base = inspect.signature(ArrayDataModule.__init__).parameters
    assert set(COMMON_OPTIONS) <= set(base)
    own = inspect.signature(cls.__init__).parameters
    assert not set(COMMON_OPTIONS) & set(own)
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in own.values())
    dm = cls(tmp_path, batch_size=7, seed=3) if cls is not DigitsDataModule else cls(seed=3)
    assert set(COMMON_OPTIONS) <= set(dm.hparams)
    assert dm.hparams["seed"] == dm.seed == 3
    assert dm.hparams["drop_last"] is True and dm.hparams["val_fraction"] == 0.1
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        cls(batchsize=7)


# ------------------------------------------------------------------ in-memory arguments
def _tensor_dm(**changes: object) -> TensorDataModule:
    x = np.random.default_rng(0).random((40, 3))
    y = np.arange(40) % 2
    args: dict = {"x_train": x[:30], "y_train": y[:30], "x_test": x[30:], "y_test": y[30:]}
    args.update(changes)
    return TensorDataModule(**args, val_fraction=0.0)


def _huge() -> np.ndarray:
    x = np.random.default_rng(0).random((30, 3))
    x[0, 0], x[1, 0] = 1e308, -1e308
    return x


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        (
            {"x_train": _huge()},
            ValueError,
            r"argument 'x_train' must have \|value\| <= 8.988e\+307 \(the min-max scaling's "
            r"span max - min overflows float64 beyond\), got max \|value\| = 1e\+308",
        ),
        (
            {"x_test": np.random.default_rng(0).random((10, 3)) + 1j},
            TypeError,
            r"argument 'x_test' must hold real numbers \(bool, integer or float\), got dtype "
            r"complex128",
        ),
        (
            {"x_train": np.zeros((30, 3), dtype="datetime64[s]")},
            TypeError,
            r"argument 'x_train' must hold real numbers .*got dtype datetime64\[s\]",
        ),
        (
            {"x_train": np.full((30, 3), "1.5", dtype=object)},
            TypeError,
            r"argument 'x_train' must hold real numbers .*got dtype object",
        ),
        (
            {"x_train": np.full((30, 3), "1.5")},
            TypeError,
            r"argument 'x_train' must hold real numbers .*got dtype <U3",
        ),
        (
            {"y_train": np.array(["cat", "dog"] * 15)},
            TypeError,
            r"argument 'y_train' must hold integer class indices, got dtype <U3 \(map class "
            r"names to 0..L-1 first, e.g. sklearn.preprocessing.LabelEncoder\)",
        ),
        (
            {"x_train": torch.empty(30, 3, device="meta")},
            ValueError,
            r"argument 'x_train' must hold data, got a meta tensor of shape \[30, 3\]",
        ),
        (
            {"y_test": torch.zeros(10, dtype=torch.long, device="meta")},
            ValueError,
            r"argument 'y_test' must hold data, got a meta tensor",
        ),
        (
            {"x_train": torch.rand(30, 3, dtype=torch.complex64)},
            TypeError,
            r"argument 'x_train' must hold real numbers, got dtype torch.complex64",
        ),
        (
            {"x_train": torch.rand(30, 3).to_sparse()},
            ValueError,
            r"argument 'x_train' must be a dense tensor, got layout torch.sparse_coo",
        ),
        (
            {"y_train": np.r_[np.arange(29) % 2, 255]},
            ValueError,
            r"argument 'num_classes' is None, so the labels of 'y_train' and 'y_test' must be "
            r"the classes 0..L-1, each present; got 3 distinct labels in \[0, 255\] "
            r"\(missing: \[2, 3, 4, 5, 6\] ...\); pass num_classes",
        ),
        (
            {"y_train": np.r_[np.arange(29) % 2, 1e9]},
            ValueError,
            r"argument 'num_classes' is None, .*got 3 distinct labels in \[0, 1000000000\]",
        ),
        (
            {"y_train": np.r_[np.arange(29) % 2, 1e9], "num_classes": 10},
            ValueError,
            r"argument 'y_train' must be integers in \[0, 10\), got values in "
            r"\[0.0, 1000000000.0\]",
        ),
        (
            {"y_test": np.r_[np.arange(9) % 2, 2.5]},
            ValueError,
            r"argument 'y_test' must be integers >= 0, got values in \[0.0, 2.5\] "
            r"\(regression targets: pass float_targets=True\)",
        ),
        (
            {"pixel_max": 0},
            ValueError,
            r"argument 'pixel_max' must be a finite number > 0, got 0.0",
        ),
    ],
    ids=[
        "1e308",
        "complex",
        "datetime",
        "object",
        "strings",
        "string-labels",
        "meta-features",
        "meta-labels",
        "complex-tensor",
        "sparse",
        "label-255",
        "label-1e9",
        "label-1e9-num-classes",
        "fractional-label",
        "pixel-max",
    ],
)
def test_tensor_data_module_refuses_bad_arguments_by_name(changes, error, message) -> None:
    with pytest.raises(error, match=rf"^TensorDataModule: {message}"):
        _tensor_dm(**changes)


def test_tensor_data_module_class_count_from_labels() -> None:
    assert _tensor_dm().num_classes == 2
    y = np.r_[np.arange(29) % 2, 255]
    dm = _tensor_dm(y_train=y, num_classes=256)  # an explicit count holds label 255
    assert dm.num_classes == 256
    dm.setup()
    assert dm.train_targets().max() == 255
    booleans = _tensor_dm(y_train=np.arange(30) % 2 == 1, y_test=np.arange(10) % 2 == 0)
    assert booleans.num_classes == 2


def test_rows_that_scale_beyond_float32_squares_are_refused() -> None:
    x = np.random.default_rng(0).random((40, 3))
    x_test = x[30:].copy()
    x_test[0, 1] = 1e25  # finite, but (1e25 / span)^2 overflows float32
    dm = TensorDataModule(x[:30], np.arange(30) % 2, x_test, np.arange(10) % 2)
    with pytest.raises(
        ValueError,
        match=r"TensorDataModule: test features scale to values up to \|1.\d+e\+25\| with the "
        r"training rows' min-max statistics .*their squares overflow float32",
    ):
        dm.setup()
    dm = _tensor_dm()
    with pytest.raises(ValueError, match=r"argument 'x' scale to values up to .*overflow float32"):
        dm.transform(np.full((2, 3), 1e30))
    with pytest.raises(ValueError, match=r"argument 'x' contain NaN or Inf"):
        dm.transform(np.full((2, 3), np.inf))


# ------------------------------------------------------------------ distributed loaders
@pytest.mark.parametrize("shuffle", [False, True])
def test_ddp_training_loader_keeps_the_data_modules_shuffle(shuffle: bool) -> None:
    """A fake 2-rank trainer: each rank gets its own DistributedSampler with the data
    module's shuffle and seed, which Lightning keeps (it replaces any other sampler by
    one that always shuffles)."""
    from torch.utils.data import DistributedSampler

    x = np.arange(64, dtype=np.float64).reshape(32, 2)
    y = np.arange(32) % 2
    orders = []
    for rank in (0, 1):
        dm = TensorDataModule(
            x, y, x[:4], y[:4], batch_size=4, val_fraction=0.0, shuffle=shuffle, seed=3
        )
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)  # type: ignore[assignment]
        dm.setup()
        loader = dm.train_dataloader()
        assert isinstance(loader.sampler, DistributedSampler)
        assert (loader.sampler.shuffle, loader.sampler.seed) == (shuffle, 3)
        assert (loader.sampler.num_replicas, loader.sampler.rank) == (2, rank)
        rows = [int(r) for batch in loader for r in (batch[0][:, 0] * 62 / 2).round()]
        orders.append(rows)
    if not shuffle:  # rank r: rows r, r + 2, ... in order
        assert orders == [list(range(0, 32, 2)), list(range(1, 32, 2))]
    else:
        assert orders[0] != sorted(orders[0])
    assert sorted(orders[0] + orders[1]) == list(range(32))  # each row on one rank once


@pytest.mark.parametrize("batch_size", [None, 100])
def test_ddp_training_batches_are_capped_at_each_processs_share(batch_size: int | None) -> None:
    """A fake 2-rank trainer: 45 training rows give each rank ceil(45 / 2) = 23 (the
    DistributedSampler's length, one row repeated on rank 1); a batch capped at all 45
    rows would leave each rank no full batch (drop_last) and train on nothing."""
    x = np.arange(90, dtype=np.float64).reshape(45, 2)
    y = np.arange(45) % 2
    for rank in (0, 1):
        dm = TensorDataModule(x, y, x[:4], y[:4], batch_size=batch_size, val_fraction=0.0)
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)  # type: ignore[assignment]
        dm.setup()
        if batch_size is None:  # the batch rule's 1000: capped without a warning
            loader = dm.train_dataloader()
        else:
            with pytest.warns(
                UserWarning,
                match=r"batch_size=100 exceeds the 23 training rows of each of the 2 "
                r"processes; using batches of 23",
            ):
                loader = dm.train_dataloader()
        assert len(loader.sampler) == 23  # type: ignore[arg-type]
        batches = list(loader)
        assert len(loader) == len(batches) == 1 and batches[0][0].shape == (23, 2)


def test_a_distributed_training_loader_resumes_mid_epoch() -> None:
    """Under DDP a fit killed mid-epoch resumes with the batches it had not trained on:
    rank 1's share of DistributedSampler's order, after the consumed batches."""
    from torch.utils.data import DistributedSampler

    from kernel_layers.data.loaders import BatchedTensorDataset, make_loader
    from kernel_layers.data.sampling import ResumableLoader

    data = BatchedTensorDataset(torch.arange(40.0)[:, None], torch.arange(40))

    def loader() -> ResumableLoader:
        made = make_loader(
            data,
            batch_size=4,
            train=True,
            num_workers=0,
            pin_memory=False,
            seed=3,
            shuffle=True,
            drop_last=True,
            world_size=2,
            rank=1,
        )
        assert isinstance(made, ResumableLoader)
        made.sampler.set_epoch(2)  # type: ignore[attr-defined]
        return made

    full = loader()
    assert isinstance(full.sampler, DistributedSampler)  # Lightning keeps it
    batches = [batch[1].tolist() for batch in full]
    reference = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
    reference.set_epoch(2)
    assert [row for batch in batches for row in batch] == list(reference)  # 5 full batches
    interrupted = loader()
    rows = iter(interrupted)
    next(rows), next(rows)
    state = interrupted.state_dict()
    assert state == {"epoch": 2, "batches": 2}
    resumed = loader()
    resumed.load_state_dict(state)
    assert [batch[1].tolist() for batch in resumed] == batches[2:]


def test_setup_after_a_changed_setting_splits_and_scales_anew() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((20, 3)) * [10.0, 900.0, 10.0], np.arange(20) % 2
    dm = TensorDataModule(x, y, x[:6], y[:6], val_fraction=0.1)
    dm.setup()
    assert (len(dm.train_dataset), len(dm.val_dataset)) == (18, 2)
    dm.val_fraction, dm.scaling, dm.seed = 0.5, "global", 7
    dm.setup()
    fresh = TensorDataModule(x, y, x[:6], y[:6], val_fraction=0.5, scaling="global", seed=7)
    fresh.setup()
    assert (len(dm.train_dataset), len(dm.val_dataset)) == (10, 10)
    torch.testing.assert_close(dm.data_max, fresh.data_max)
    torch.testing.assert_close(dm.train_dataset.tensors[0], fresh.train_dataset.tensors[0])
    dm.val_fraction = 1.5
    with pytest.raises(ValueError, match=r"argument 'val_fraction' must be in \[0, 1\), got 1.5"):
        dm.setup()


def test_a_module_pickled_before_it_recorded_its_settings_sets_up() -> None:
    x, y = np.random.default_rng(0).random((20, 3)), np.arange(20) % 2
    dm = TensorDataModule(x, y, x[:6], y[:6])
    dm.setup()
    del dm._built_with  # as unpickled from an older version
    dm.setup()
    assert len(dm.train_dataset) == 18


def test_nan_class_labels_are_named_with_their_row() -> None:
    x = np.random.default_rng(0).normal(size=(20, 3))
    y = (np.arange(20) % 2).astype(np.float64)
    y[5] = np.nan
    match = r"'y_train' must be integers >= 0, got NaN or Inf: 1 value\(s\), the first in row 5"
    with pytest.raises(ValueError, match=match):
        TensorDataModule(x[:15], y[:15], x[15:], y[15:] * 0)
