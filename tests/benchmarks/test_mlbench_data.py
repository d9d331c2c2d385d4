"""benchmarks/mlbench_data.py: the members of an ``ar`` archive, and the extraction of a
package's ``.rda`` data frames to CSV (on a tiny package built here)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

mlbench_data = pytest.importorskip("mlbench_data")


def _ar(members: dict[str, bytes]) -> bytes:
    """An ``ar`` archive as ``dpkg-deb`` writes it (60-byte headers, even offsets)."""
    out = bytearray(b"!<arch>\n")
    for name, content in members.items():
        header = (f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(content):<10}`\n").encode(
            "ascii"
        )
        assert len(header) == 60
        out += header + content + (b"\n" if len(content) % 2 else b"")
    return bytes(out)


def test_deb_members_reads_every_member_including_odd_sizes() -> None:
    members = {"debian-binary": b"2.0\n", "odd": b"abc", "data.tar.xz": b"\x00" * 10}
    assert mlbench_data.deb_members(_ar(members)) == members


def test_deb_members_refuses_what_is_not_an_ar_archive() -> None:
    with pytest.raises(ValueError, match="must be a Debian package"):
        mlbench_data.deb_members(b"PK\x03\x04 a zip file")


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_extract_writes_each_data_frame_as_csv_and_letter_in_the_uci_layout(
    tmp_path: Path,
) -> None:
    rdata = pytest.importorskip("rdata")
    pd = pytest.importorskip("pandas")
    frames = {
        "Tiny": pd.DataFrame({"V1": [0.5, 1.0, 2.0], "Class": pd.Categorical(["a", "b", "a"])}),
        "LetterRecognition": pd.DataFrame(
            {"lettr": pd.Categorical(["T", "I"]), "x.box": [2.0, 5.0], "y.box": [8.0, 12.0]}
        ),
    }
    blobs = {}
    for name, frame in frames.items():
        path = tmp_path / f"{name}.rda"
        rdata.write_rda(path, {name: frame})
        blobs[f"./usr/lib/R/site-library/mlbench/data/{name}.rda"] = path.read_bytes()
    blobs["./usr/share/doc/README"] = b"not data"
    deb = tmp_path / "r-cran-mlbench.deb"
    deb.write_bytes(_ar({"debian-binary": b"2.0\n", "data.tar.xz": _tar(blobs)}))

    written = mlbench_data.extract(deb, tmp_path / "out")

    assert sorted(p.name for p in written) == [
        "LetterRecognition.csv",
        "Tiny.csv",
        "letter-recognition.data",
    ]
    assert (tmp_path / "out" / "Tiny.csv").read_text() == "V1,Class\n0.5,a\n1.0,b\n2.0,a\n"
    assert (tmp_path / "out" / "letter-recognition.data").read_text() == "T,2,8\nI,5,12\n"


def test_extract_refuses_a_package_without_data(tmp_path: Path) -> None:
    deb = tmp_path / "source.deb"
    deb.write_bytes(_ar({"debian-binary": b"2.0\n", "control.tar.xz": _tar({})}))
    with pytest.raises(ValueError, match=r"no data\.tar member"):
        mlbench_data.extract(deb, tmp_path / "out")
