"""Extract the data sets of Debian's ``r-cran-mlbench`` package as CSV files.

The package (``apt-get download r-cran-mlbench``) holds UCI data sets as R ``.rda``
files: Letter, Satellite, Shuttle, Vehicle, Vowel, DNA, Sonar, Ionosphere, Pima,
BostonHousing and more. They are read with the ``rdata`` package, which parses the
format and runs no code, and written as ``<out>/<Name>.csv`` (a header row, factors as
their labels, no index). ``LetterRecognition`` is also written as
``<out>/letter-recognition.data`` in the UCI layout that
:class:`kernel_layers.data.LetterDataModule` reads (the letter, then 16 integers).

Usage::

    apt-get download r-cran-mlbench
    python benchmarks/mlbench_data.py r-cran-mlbench_*.deb data/mlbench
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
from pathlib import Path

__all__ = ["deb_members", "extract", "main"]

_AR_MAGIC = b"!<arch>\n"


def deb_members(deb: bytes) -> dict[str, bytes]:
    """The members of a Debian package (an ``ar`` archive): name -> content.

    Raises:
        ValueError: ``deb`` is not an ``ar`` archive.
    """
    if not deb.startswith(_AR_MAGIC):
        raise ValueError("argument 'deb' must be a Debian package (an ar archive), it is not")
    members, pos = {}, len(_AR_MAGIC)
    while pos + 60 <= len(deb):
        header = deb[pos : pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        members[name] = deb[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    return members


def extract(deb_path: Path, out: Path) -> list[Path]:
    """Write every ``data/*.rda`` data frame of the package ``deb_path`` to ``out``.

    Returns:
        list[Path]: the files written.
    """
    members = deb_members(deb_path.read_bytes())
    data = next((v for k, v in members.items() if k.startswith("data.tar")), None)
    if data is None:
        raise ValueError(f"{deb_path}: no data.tar member; not a binary Debian package")
    import rdata  # a benchmark dependency: parses R's format, runs no code

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith(".rda")):
                continue
            blob = tar.extractfile(member)
            assert blob is not None
            with tempfile.NamedTemporaryFile(suffix=".rda") as tmp:
                tmp.write(blob.read())
                tmp.flush()
                frames = rdata.read_rda(tmp.name)
            for name, frame in frames.items():
                path = out / f"{name}.csv"
                frame.to_csv(path, index=False)
                written.append(path)
                if name == "LetterRecognition":
                    uci = out / "letter-recognition.data"
                    frame.astype({c: int for c in frame.columns[1:]}).to_csv(
                        uci, index=False, header=False
                    )
                    written.append(uci)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("deb", type=Path, help="the r-cran-mlbench .deb file")
    parser.add_argument("out", type=Path, help="folder for the CSV files")
    args = parser.parse_args(argv)
    for path in extract(args.deb, args.out):
        print(path)


if __name__ == "__main__":
    main()
