"""The data readers on damaged or hostile files: wrong label types, truncated or corrupt
gzip, empty IDX files, and pickles in a data folder that are never unpickled."""

from __future__ import annotations

import gzip
import logging
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from formats import IDX_NAMES, make_mnist_dir, write_covtype

from kernel_layers.data import CovTypeDataModule, MNISTDataModule
from kernel_layers.data.readers import read_idx


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)


def test_float_idx_labels_are_refused(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    labels = tmp_path / IDX_NAMES[1]
    values = np.arange(50, dtype=">f4") % 10 + 0.5
    labels.write_bytes(bytes([0, 0, 0x0D, 1]) + (50).to_bytes(4, "big") + values.tobytes())
    with pytest.raises(
        ValueError,
        match=r"MNISTDataModule: '.*train-labels-idx1-ubyte' must hold integer labels .*"
        r"got dtype float32",
    ):
        MNISTDataModule(tmp_path, download=False, val_fraction=0.0).setup()


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path, gz=True)
    path = tmp_path / (IDX_NAMES[0] + ".gz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(
        ValueError, match=r"'.*train-images-idx3-ubyte.gz' is a truncated or corrupt"
    ):
        read_idx(path)
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz' is a truncated or corrupt"):
        MNISTDataModule(tmp_path, download=False).setup()


def test_corrupt_covtype_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "covtype.data.gz"
    write_covtype(path, n=50)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"covtype.data.gz' is a truncated or corrupt gzip"):
        CovTypeDataModule(tmp_path, download=False).setup()


def test_idx_file_with_zero_images_is_refused(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    (tmp_path / IDX_NAMES[0]).write_bytes(bytes([0, 0, 8, 3]) + b"\0\0\0\0" + b"\0\0\0\x1c" * 2)
    with pytest.raises(ValueError, match=r"must hold at least one image, got 0"):
        MNISTDataModule(tmp_path, download=False).setup()


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # unpickling writes a marker file: the code ran
        return (Path.write_text, (Path(self.marker), "ran"))


def test_sklearn_cache_pickle_in_the_data_folder_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    cache = tmp_path / "covertype"
    cache.mkdir()
    for name in ("samples_py3", "targets_py3"):
        with open(cache / name, "wb") as fh:
            pickle.dump(_Payload(str(marker)), fh)
    with pytest.raises(
        ValueError,
        match=r"CovTypeDataModule: refusing to read scikit-learn's pickled cache "
        r"'.*covertype' \(loading a pickle can run code",
    ):
        CovTypeDataModule(tmp_path, download=False).setup()
    assert not marker.exists()
    write_covtype(tmp_path / "covtype.data.gz", n=60)  # the CSV beside it is read instead
    dm = CovTypeDataModule(tmp_path, download=False, val_fraction=0.0)
    dm.setup()
    assert not marker.exists() and len(dm.train_dataset) + len(dm.test_dataset) == 60


def test_gzip_helper_round_trip(tmp_path: Path) -> None:
    """The test's own helper writes real gzip (guards the truncation tests above)."""
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"abc")
    assert gzip.decompress(path.read_bytes()) == b"abc"


def test_idx_file_longer_than_its_header_is_refused(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    path = tmp_path / IDX_NAMES[0]
    path.write_bytes(path.read_bytes() + bytes(28 * 28))  # one image the header does not count
    with pytest.raises(
        ValueError,
        match=r"read_idx: '.*train-images-idx3-ubyte' is longer than its header: header "
        r"announces shape \(\d+, 28, 28\) \(\d+ bytes\), file holds \d+ bytes",
    ):
        MNISTDataModule(tmp_path, download=False).setup()


@pytest.mark.parametrize("rows", [1, 2])
def test_covtype_file_too_small_to_split_names_the_file(tmp_path: Path, rows: int) -> None:
    write_covtype(tmp_path / "covtype.data", n=rows)
    with pytest.raises(
        ValueError,
        match=rf"CovTypeDataModule: '.*covtype.data' holds {rows} row\(s\), too few for the "
        r"train / test split",
    ):
        CovTypeDataModule(tmp_path, download=False).setup()


def test_a_npy_under_the_npz_cache_name_is_named(tmp_path: Path) -> None:
    """A single ``.npy`` array under the ``.npz`` cache name: ``np.load`` returns an
    array, not an archive; the reader's own error names the file (was a raw TypeError)."""
    with open(tmp_path / "covtype-arrays.npz", "wb") as fh:
        np.save(fh, np.zeros((10, 55)))
    with pytest.raises(
        ValueError,
        match=r"CovTypeDataModule: '.*covtype-arrays.npz' must be a .npz archive of plain "
        r"arrays 'x' and 'y' \(it holds a single ndarray, not an archive\)",
    ):
        CovTypeDataModule(tmp_path, download=False).setup()


def test_a_link_planted_beside_a_written_file_is_not_followed(tmp_path, monkeypatch) -> None:
    import secrets

    from kernel_layers._files import replacing
    from kernel_layers.data.readers import read_arrays, write_arrays

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".covtype-arrays.npz.tmp.npz").symlink_to(victim)  # the old fixed scratch name
    write_arrays(home / "covtype-arrays.npz", np.ones((3, 2)), np.arange(3))
    assert victim.read_text() == "precious"
    x, y = read_arrays(home / "covtype-arrays.npz")
    assert x.shape == (3, 2) and y.tolist() == [0, 1, 2]
    # every scratch name taken by a link: refused, nothing written through them
    monkeypatch.setattr(secrets, "token_hex", lambda n: "fixed")
    (home / ".out.csv.fixed.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError, match=r"no fresh temporary name beside '.*out.csv'"):
        with replacing(home / "out.csv") as scratch:
            scratch.write_text("overwritten")
    assert victim.read_text() == "precious" and not (home / "out.csv").exists()


def test_a_gzip_bomb_is_refused_before_it_fills_memory(tmp_path, monkeypatch) -> None:
    from kernel_layers.data import gzipped
    from kernel_layers.data.readers import read_idx

    monkeypatch.setattr(gzipped, "EXPANSION_FLOOR", 2**20)  # 1 MiB, not 64 MiB
    monkeypatch.setattr(gzipped, "MAX_EXPANSION", 100)  # zeros compress about 1000 times
    header = struct.pack(">BBBBI", 0, 0, 0x08, 1, 10)  # ten unsigned-byte labels...
    bomb = tmp_path / "labels.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(header + bytes(8 * 2**20))  # ...then 8 MiB of zeros: about 8 KB on disk
    assert bomb.stat().st_size * gzipped.MAX_EXPANSION < 8 * 2**20
    with pytest.raises(ValueError, match=r"read_idx: '.*labels.gz' expands to more than \d+ "):
        read_idx(bomb)
    csv_bomb = tmp_path / "rows.csv"
    with gzip.open(csv_bomb, "wb", compresslevel=9) as fh:
        fh.write(b"\n" * 8 * 2**20)
    with pytest.raises(ValueError, match=r"'.*rows.csv' expands to more than"):
        gzipped.read_text(csv_bomb)
    from kernel_layers.data.readers import read_covtype_csv

    covtype = tmp_path / "covtype.data.gz"  # valid lines, streamed: bounded all the same
    with gzip.open(covtype, "wb", compresslevel=9) as fh:
        fh.write((",".join(["1"] * 54 + ["2"]) + "\n").encode() * 80_000)  # 9 MiB
    with pytest.raises(ValueError, match=r"'.*covtype.data.gz' expands to more than"):
        read_covtype_csv(covtype)


def test_only_regular_files_are_read(tmp_path) -> None:
    from kernel_layers.data.gzipped import read_text

    endless = tmp_path / "rows.csv"
    endless.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"'.*rows.csv' must be a regular file, got a device"):
        read_text(endless)


def test_array_headers_claiming_more_than_the_file_holds_are_refused(tmp_path) -> None:
    import io
    import zipfile

    from kernel_layers.data.readers import read_arrays
    from kernel_layers.data.user_files import read_feature_rows

    claim = io.BytesIO()  # a .npy header for 10^11 rows, and 64 bytes
    np.lib.format.write_array_header_1_0(
        claim, {"descr": "<f8", "fortran_order": False, "shape": (10**11, 3)}
    )
    claim.write(bytes(64))
    (tmp_path / "rows.npy").write_bytes(claim.getvalue())
    with pytest.raises(ValueError, match=r"cannot read '.*rows.npy' as a .npy array"):
        read_feature_rows(tmp_path / "rows.npy", (3,))
    labels = io.BytesIO()
    np.save(labels, np.arange(3))
    with zipfile.ZipFile(tmp_path / "arrays.npz", "w") as archive:
        archive.writestr("x.npy", claim.getvalue())
        archive.writestr("y.npy", labels.getvalue())
    with pytest.raises(ValueError, match=r"member 'x.npy' claims shape \(100000000000, 3\)"):
        read_arrays(tmp_path / "arrays.npz")


def test_an_image_of_another_size_is_refused_from_its_header(tmp_path) -> None:
    from PIL import Image

    from kernel_layers.data.user_files import read_feature_rows

    folder = tmp_path / "images"
    folder.mkdir()
    Image.new("L", (3000, 2000)).save(folder / "big.png")  # 6 Mpixel, a few KB on disk
    decoded = []
    original = Image.Image.load
    with pytest.MonkeyPatch.context() as patch:  # count decodes: the header suffices
        patch.setattr(Image.Image, "load", lambda self: decoded.append(1) or original(self))
        with pytest.raises(
            ValueError, match=r"must have shape \(1, 8, 8\) .*got \(1, 2000, 3000\)"
        ):
            read_feature_rows(folder, (1, 8, 8), pixel_max=16.0)
    assert decoded == []


def test_an_idx_header_of_more_bytes_than_int64_holds_is_named_exactly(tmp_path) -> None:
    path = tmp_path / "huge.idx"
    path.write_bytes(struct.pack(">BBBB4I", 0, 0, 0x08, 4, *(65536,) * 4))
    with pytest.raises(ValueError, match=r"is truncated: .* \(18446744073709551616 bytes\)"):
        read_idx(path)


def test_covtype_csv_with_a_byte_order_mark_or_cr_line_ends_is_read(tmp_path) -> None:
    from kernel_layers.data.readers import read_covtype_csv

    rows = [",".join(["1"] * 54 + ["2"]), ",".join(["2"] * 54 + ["3"])]
    (tmp_path / "bom.csv").write_text("\n".join(rows) + "\n", encoding="utf-8-sig")
    (tmp_path / "cr.csv").write_bytes(("\r".join(rows) + "\r").encode())
    for name in ("bom.csv", "cr.csv"):
        x, y = read_covtype_csv(tmp_path / name)
        assert x.shape == (2, 54) and y.tolist() == [1, 2], name


def test_a_sparse_table_that_compresses_hundreds_of_times_is_read(tmp_path, monkeypatch) -> None:
    from kernel_layers.data import gzipped

    monkeypatch.setattr(gzipped, "EXPANSION_FLOOR", 2**20)
    rows = np.eye(200, dtype=int)[np.random.default_rng(0).integers(0, 200, 3000)]
    text = "\n".join(",".join(map(str, row)) for row in rows) + "\n"  # 1.2 MB of one-hot
    sparse = tmp_path / "onehot.csv.gz"
    with gzip.open(sparse, "wt", compresslevel=9) as fh:
        fh.write(text)
    ratio = len(text) / sparse.stat().st_size
    assert 100 < ratio < gzipped.MAX_EXPANSION, ratio
    assert gzipped.read_text(sparse, "reader") == text


def test_a_rewritten_file_keeps_its_permissions_and_a_long_name_is_written(tmp_path) -> None:
    import os
    import stat

    from kernel_layers._files import replacing

    private = tmp_path / "preds.csv"
    private.write_text("old")
    os.chmod(private, 0o600)
    with replacing(private) as scratch:
        scratch.write_text("new")
    assert private.read_text() == "new" and stat.S_IMODE(private.stat().st_mode) == 0o600
    long = tmp_path / ("p" * 250 + ".csv")  # 254 bytes: as long as a name may be
    with replacing(long) as scratch:
        scratch.write_text("x")
    assert long.read_text() == "x"
