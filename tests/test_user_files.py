"""A user's files for ``predict``: CSV headers (the pandas layout) and image folders
converted to the training data's pixel range (8-bit, 16-bit, transparency)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from kernel_layers.data import DigitsDataModule, TensorDataModule
from kernel_layers.data.user_files import csv_rows, read_feature_rows


def _write_csv(path: Path, header: list[str] | None, rows: np.ndarray) -> None:
    """What ``pandas.DataFrame(rows).to_csv(path, index=False)`` writes, via the stdlib."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        if header is not None:
            writer.writerow(header)
        writer.writerows(rows.tolist())


# ------------------------------------------------------------------ CSV header rule
@pytest.mark.parametrize(
    "header",
    [
        [str(i) for i in range(6)],  # pandas' RangeIndex column names
        [f"{float(i)}" for i in range(6)],  # float column names
        ["a", "b", "c", "d", "e", "f"],
        None,
    ],
    ids=["int-names", "float-names", "text", "none"],
)
def test_csv_header_of_pandas_is_skipped(tmp_path: Path, header) -> None:
    rows = np.random.default_rng(0).integers(0, 17, (5, 6)).astype(np.float64)
    _write_csv(tmp_path / "in.csv", header, rows)
    got = read_feature_rows(tmp_path / "in.csv", (6,))
    np.testing.assert_array_equal(got, rows)  # 5 rows, none shifted


def test_csv_first_row_that_is_not_0_to_d_minus_1_is_data(tmp_path: Path) -> None:
    rows = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 3.0], [0.0, 1.0, 2.0]])  # last: 0..D-1
    _write_csv(tmp_path / "in.csv", None, rows)
    np.testing.assert_array_equal(read_feature_rows(tmp_path / "in.csv", (3,)), rows)
    # The documented ambiguity: a first data row 0, 1, ..., D-1 is read as a header.
    _write_csv(tmp_path / "in.csv", None, rows[::-1])
    np.testing.assert_array_equal(read_feature_rows(tmp_path / "in.csv", (3,)), rows[1::-1])


@pytest.mark.parametrize("first", ["0", "0,1", "0.0,1.0"])
def test_csv_first_row_0_to_d_minus_1_with_fewer_than_3_columns_is_refused(first: str) -> None:
    width = first.count(",") + 1
    text = first + "\n" + "\n".join([",".join(["5"] * width)] * 3) + "\n"
    with pytest.raises(
        ValueError,
        match=rf"csv_rows: the first row of 'f.csv' is {first}, which may be pandas' column "
        r"names or data: with fewer than 3 columns it cannot be told",
    ):
        csv_rows(text, source="f.csv")
    np.testing.assert_array_equal(
        csv_rows("x0,x1\n0,1\n" if width == 2 else "x\n0\n"), [[0.0, 1.0][:width]]
    )


def test_csv_rows_name_the_bad_line() -> None:
    with pytest.raises(ValueError, match=r"cannot read 'f.csv' as comma-separated numbers: line 3"):
        csv_rows("0,2\n1,2\n3,x\n", source="f.csv")
    with pytest.raises(ValueError, match=r"every row of 'f.csv' must have 2 values .*line 3 has 3"):
        csv_rows("a,b\n1,2\n3,4,5\n", source="f.csv")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("x0,x1,x2\n1,2,3\n,,\n4,5,6\n", r"line 3 \(could not convert string to float: ''\)"),
        ("1,,3\n4,5,6\n", r"line 1 has a missing value \(''\) among numbers"),
        ("NA,2,3\n4,5,6\n", r"line 1 has a missing value \('NA'\) among numbers"),
        ('x0\n1.0\n""\n3.0\n', r"line 3 \(could not convert string to float: ''\)"),
        (",0,1,2\n0,1,2,3\n", r"line 1 .*\(pandas' header with its index column: write with"),
    ],
    ids=[
        "a row of empty fields",
        "first row, empty field",
        "first row, NA",
        "one column, quoted empty field",
        "pandas' index column",
    ],
)
def test_a_row_with_missing_values_is_refused_not_skipped(text: str, match: str) -> None:
    # pandas writes a row of NaN as ",,": skipping it would shift every later prediction
    with pytest.raises(
        ValueError, match=r"cannot read 'f.csv' as comma-separated numbers: " + match
    ):
        csv_rows(text, source="f.csv")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_a_value_that_is_not_finite_is_refused_with_its_line(value: str) -> None:
    with pytest.raises(
        ValueError, match=rf"every value of 'f.csv' must be finite, line 3 holds '{value}'"
    ):
        csv_rows(f"a,b\n1,2\n3,{value}\n", source="f.csv")


def test_blank_lines_are_skipped_and_a_header_may_name_a_column_na() -> None:
    np.testing.assert_array_equal(csv_rows("x,NA\n\n1,2\n   \n3,4\n"), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("bad", ["?", "#N/A"])
def test_a_first_row_of_numbers_with_one_bad_value_is_refused_not_skipped(bad: str) -> None:
    # As a header it would be dropped, and every row after it shifted by one.
    with pytest.raises(ValueError, match=rf"line 1 mixes numbers and text \('{re.escape(bad)}'\)"):
        csv_rows(f"1,2,{bad},4\n5,6,7,8\n")


def test_utf8_bom_and_carriage_return_line_ends_are_read(tmp_path: Path) -> None:
    # A spreadsheet's "CSV UTF-8" starts with a byte-order mark; old Mac ends use "\r".
    path = tmp_path / "x.csv"
    path.write_bytes("\ufeffpixel_\u00e40,pixel1\r1,2\r3,4\r".encode())
    np.testing.assert_array_equal(read_feature_rows(path, (2,)), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("text", ["", "x0,x1\n"], ids=["empty", "header-only"])
def test_a_csv_without_data_rows_is_refused_by_name(tmp_path: Path, text: str) -> None:
    assert csv_rows(text).shape[0] == 0
    path = tmp_path / "x.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"'.*x.csv' holds no rows"):
        read_feature_rows(path, (2,))


def test_a_truncated_image_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    _digits_as_png(folder, np.zeros((3, 64)))
    whole = (folder / "01.png").read_bytes()
    (folder / "01.png").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"cannot read the image '.*01.png'"):
        read_feature_rows(folder, (1, 8, 8), pixel_max=16.0)


def _npz_named_npy(path: Path) -> None:
    np.savez(path.with_suffix(".npz"), x=np.zeros((2, 3)))
    path.with_suffix(".npz").rename(path)


@pytest.mark.parametrize(
    ("write", "match"),
    [
        (lambda p: p.write_bytes(b""), r"cannot read '.*x.npy' as a .npy array without pickles"),
        (_npz_named_npy, r"'.*x.npy' must hold one .npy array, got an .npz archive"),
    ],
    ids=["empty", "npz"],
)
def test_a_npy_that_is_empty_or_an_archive_is_refused_by_name(
    tmp_path: Path, write, match: str
) -> None:
    write(tmp_path / "x.npy")
    with pytest.raises(ValueError, match=r"^read_feature_rows: " + match):
        read_feature_rows(tmp_path / "x.npy", (3,))


# ------------------------------------------------------------------ image folders
def _digits_as_png(folder: Path, raw: np.ndarray) -> np.ndarray:
    """Ordinary 8-bit PNGs (0..255) of digits rows (0..16); returns the stored bytes."""
    folder.mkdir()
    pixels = np.round(raw * (255 / 16)).astype(np.uint8)
    for i, row in enumerate(pixels):
        Image.fromarray(row.reshape(8, 8), mode="L").save(folder / f"{i:02d}.png")
    return pixels.astype(np.float64)


def test_an_8_bit_png_folder_is_converted_to_the_digits_range(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    raw = load_digits().data[:6]
    stored = _digits_as_png(tmp_path / "images", raw)
    got = read_feature_rows(tmp_path / "images", (1, 8, 8), pixel_max=16.0)
    np.testing.assert_array_equal(got, stored * (16.0 / 255.0))
    assert np.abs(got - raw).max() <= 16 / 255 / 2 + 1e-12  # within half a grey level
    dm = DigitsDataModule(batch_size=400)
    dm.set_predict_source(path=tmp_path / "images")
    served = torch.cat([b[0] for b in dm.predict_dataloader()])
    torch.testing.assert_close(served, dm.transform(stored * (16.0 / 255.0)), rtol=0, atol=0)
    assert float(served.max()) <= 1.0 + 1e-6  # not 255 / 16 times the training range


def test_a_16_bit_png_is_converted_by_its_own_range(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    values = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000
    image = Image.fromarray(values)
    assert image.mode.startswith("I")
    image.save(folder / "a.png")
    got = read_feature_rows(folder, (1, 8, 8), pixel_max=16.0)
    np.testing.assert_allclose(got[0], values.ravel() * (16.0 / 65535.0), rtol=1e-15)


def test_content_only_in_the_alpha_channel_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[2:6, 3:5, 3] = 255  # a glyph drawn only in alpha, RGB all black
    Image.fromarray(rgba, mode="RGBA").save(folder / "a.png")
    with pytest.raises(ValueError, match=r"image '.*a.png' has transparent pixels"):
        read_feature_rows(folder, (1, 8, 8), pixel_max=16.0)
    rgba[..., 3] = 255  # fully opaque: alpha carries nothing, accepted
    rgba[..., :3] = 51
    Image.fromarray(rgba, mode="RGBA").save(folder / "a.png")
    got = read_feature_rows(folder, (1, 8, 8), pixel_max=255.0)
    np.testing.assert_array_equal(got, np.full((1, 64), 51.0))


def test_an_image_folder_is_refused_when_the_pixel_range_is_unknown(tmp_path: Path) -> None:
    raw = np.random.default_rng(0).integers(0, 256, (40, 1, 8, 8)).astype(np.float64)
    stored = _digits_as_png(tmp_path / "images", raw[:3, 0].reshape(3, 64) * 16 / 255)
    labels = np.arange(40) % 2
    dm = TensorDataModule(raw[:30], labels[:30], raw[30:], labels[30:], val_fraction=0.0)
    dm.set_predict_source(path=tmp_path / "images")
    with pytest.raises(ValueError, match=r"the range of the training data's pixels is unknown"):
        dm.predict_dataloader()
    dm = TensorDataModule(
        raw[:30], labels[:30], raw[30:], labels[30:], val_fraction=0.0, pixel_max=255
    )
    dm.set_predict_source(path=tmp_path / "images")
    served = torch.cat([b[0] for b in dm.predict_dataloader()])
    torch.testing.assert_close(served, dm.transform(stored.reshape(3, 1, 8, 8)), rtol=0, atol=0)


def test_a_predict_file_is_read_again_at_each_loader(tmp_path: Path) -> None:
    x = np.random.default_rng(0).random((40, 3))
    dm = TensorDataModule(x[:30], np.arange(30) % 2, x[30:], np.arange(10) % 2)
    source = tmp_path / "incoming.npy"
    np.save(source, x[:2])
    dm.set_predict_source(path=source)
    assert len(next(iter(dm.predict_dataloader()))[0]) == 2
    np.save(source, x[:7])  # new rows at the same path
    assert len(next(iter(dm.predict_dataloader()))[0]) == 7
    dm.read_predict_source()  # read ahead: serves the next loader once
    np.save(source, x[:3])
    assert len(next(iter(dm.predict_dataloader()))[0]) == 7
    assert len(next(iter(dm.predict_dataloader()))[0]) == 3


def test_a_photo_is_read_upright_as_its_exif_orientation_says(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    stored = np.array([[0, 255, 0], [0, 255, 0]], dtype=np.uint8)  # 2 rows, 3 columns
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: 3 rows, 2 columns
    Image.fromarray(stored, mode="L").save(folder / "photo.png", exif=exif)
    got = read_feature_rows(folder, (1, 3, 2), pixel_max=255.0)
    np.testing.assert_array_equal(got[0].reshape(3, 2), np.rot90(stored, k=-1))
    with pytest.raises(ValueError, match=r"must have shape \(1, 2, 3\) .*got \(1, 3, 2\)"):
        read_feature_rows(folder, (1, 2, 3), pixel_max=255.0)


def test_an_animation_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    frames = [Image.new("L", (2, 2), 0), Image.new("L", (2, 2), 255)]
    frames[0].save(folder / "moving.gif", save_all=True, append_images=frames[1:])
    with pytest.raises(ValueError, match=r"'.*moving.gif' holds 2 frames \(an animation\)"):
        read_feature_rows(folder, (1, 2, 2), pixel_max=255.0)


def test_digit_separators_are_not_numbers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"line 2 \(could not convert string to float: '1_0'\)"):
        csv_rows("a,b,c\n1_0,2,3\n")


def test_a_cameras_mpo_jpeg_is_read_as_its_first_picture(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    first = Image.fromarray(np.full((4, 6, 3), 200, dtype=np.uint8))
    second = Image.fromarray(np.zeros((4, 6, 3), dtype=np.uint8))  # a depth map, say
    first.save(folder / "photo.jpg", format="MPO", save_all=True, append_images=[second])
    got = read_feature_rows(folder, (3, 4, 6), pixel_max=255.0)
    assert np.abs(got - 200).max() <= 2  # JPEG's round-off


def test_suffixes_are_read_in_any_case(tmp_path: Path) -> None:
    rows = np.arange(12, dtype=np.float64).reshape(4, 3) + 0.5
    np.save(tmp_path / "up.npy", rows)
    (tmp_path / "up.npy").rename(tmp_path / "UP.NPY")
    (tmp_path / "UP.CSV").write_text("\n".join(",".join(str(v) for v in r) for r in rows))
    for name in ("UP.NPY", "UP.CSV"):
        np.testing.assert_array_equal(read_feature_rows(tmp_path / name, (3,)), rows)
