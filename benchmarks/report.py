"""Render the results tables of README.md and benchmarks/README.md from the records.

Every measured result is a record under ``benchmarks/results/*.json``: its figures, the
command that produced them, the commit, the machine and the date. A document marks each
table it shows with a pair of comments::

    <!-- table:NAME -->
    | ... rendered rows ... |
    <!-- /table:NAME -->

and this script rewrites the lines between them from the records, so that a table can
only change by changing its records.

A record file holds ``records`` (a list) and ``tables`` (NAME -> how to render it):

* a *rows* table lists record names (``rows``) and ``columns`` as ``[header, template]``
  pairs; a template is a ``str.format`` string over the record's figures and fields
  (``{test_acc:.2f} %``), with ``{NAME_time}`` for a figure ``NAME_s`` in seconds written
  as minutes and seconds and ``{machine_class}`` for the machine up to its first comma; a
  cell whose figures are missing renders as ``-``;
* a *section5* table renders ``reproduce.py``'s CSV named by ``source`` (``method x J``,
  mean ± std over the seeds of the figure ``key``); each record's ``figures`` then names
  the ``methods`` and ``dims`` (and, when it stands for some seeds only, the ``repeats``)
  of the CSV rows it stands for;
* a *schedule* table renders a ``time_to_accuracy.py`` CSV (``source``) the same way;
* a *matrix* table has one row per entry of ``rows`` and one column per ``[header,
  key]`` (or ``[header, key, template]``) of ``columns``; its cell is the template (else
  ``cell``, a template as above) filled from the record named ``ROW/KEY`` (``-`` when
  there is none); ``row_header`` heads the first column;
* a *suite_goals* table renders the goals of ``suite_goals.py`` from the file's records,
  a *regression_goals* table the goal of ``regression_goals.py``.

Usage::

    python benchmarks/report.py              # print every table
    python benchmarks/report.py --write      # rewrite the marked tables in both documents
    python benchmarks/report.py --check      # exit 1 when a document's table differs
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCUMENTS = (ROOT / "README.md", ROOT / "benchmarks" / "README.md")
REQUIRED = ("name", "figures", "command", "commit", "machine", "date")
MARKER = re.compile(
    r"<!-- table:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /table:(?P=name) -->", re.S
)


def record_files(results: Path = RESULTS) -> list[Path]:
    """The record files, sorted by name."""
    return sorted(results.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    """One record file, parsed."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def missing_fields(data: dict[str, Any]) -> list[str]:
    """``"record NAME: field"`` for every required field a file's records lack or leave
    empty."""
    problems = []
    for index, record in enumerate(data.get("records", [])):
        name = record.get("name", f"#{index}")
        for field in REQUIRED:
            value = record.get(field)
            if value is None or value == "" or value == {}:
                problems.append(f"record {name}: {field}")
    if not data.get("records"):
        problems.append("no records")
    return problems


def duration(seconds: float) -> str:
    """``4 min 7 s`` / ``1 h 16 min`` / ``9.3 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def _values(record: dict[str, Any]) -> dict[str, Any]:
    values = dict(record)
    values.update(record["figures"])
    for key, value in record["figures"].items():
        if key.endswith("_s") and isinstance(value, (int, float)):
            values[key[:-2] + "_time"] = duration(value)
    values["machine_class"] = record["machine"].split(",")[0]
    return values


def cell(template: str, record: dict[str, Any]) -> str:
    """``template`` filled from ``record``; ``-`` when a figure it names is missing."""
    values = _values(record)
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None and values.get(field) is None:
            return "-"
    return template.format(**values)


def _rows_table(data: dict[str, Any], spec: dict[str, Any]) -> str:
    by_name = {record["name"]: record for record in data["records"]}
    headers = [header for header, _ in spec["columns"]]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name in spec["rows"]:
        record = by_name[name]
        lines.append("| " + " | ".join(cell(t, record) for _, t in spec["columns"]) + " |")
    return "\n".join(lines)


def _matrix_table(data: dict[str, Any], spec: dict[str, Any]) -> str:
    by_name = {record["name"]: record for record in data["records"]}
    headers = [spec.get("row_header", "")] + [column[0] for column in spec["columns"]]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in spec["rows"]:
        cells = [row]
        for column in spec["columns"]:
            record = by_name.get(f"{row}/{column[1]}")
            template = column[2] if len(column) > 2 else spec["cell"]
            cells.append("-" if record is None else cell(template, record))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _section5_table(spec: dict[str, Any], results: Path) -> str:
    import section5_results

    rows = section5_results.read_csv(results / spec["source"])
    if "methods" in spec:
        rows = [row for row in rows if row["method"] in spec["methods"]]
    return section5_results.markdown_table(rows, key=spec.get("key", "test_acc"))


def _schedule_table(spec: dict[str, Any], results: Path) -> str:
    import time_to_accuracy

    rows = [time_to_accuracy._typed(row) for row in _read_csv(results / spec["source"])]
    return time_to_accuracy.summary_table(rows)


def render(name: str, results: Path = RESULTS) -> str:
    """The markdown of table ``name``, from the record file that defines it."""
    for path in record_files(results):
        data = load(path)
        spec = data.get("tables", {}).get(name)
        if spec is None:
            continue
        kind = spec.get("kind", "rows")
        if kind == "rows":
            return _rows_table(data, spec)
        if kind == "matrix":
            return _matrix_table(data, spec)
        if kind == "suite_goals":
            import suite_goals

            return suite_goals.goals_table(data["records"])
        if kind == "regression_goals":
            import regression_goals

            return regression_goals.goals_table(data["records"])
        if kind == "section5":
            return _section5_table(spec, results)
        if kind == "schedule":
            return _schedule_table(spec, results)
        raise ValueError(f"table {name} in {path.name}: unknown kind {kind!r}")
    raise KeyError(f"no record file under {results} defines table {name!r}")


def table_names(results: Path = RESULTS) -> list[str]:
    """Every table the records define."""
    return [name for path in record_files(results) for name in load(path).get("tables", {})]


def marked_tables(text: str) -> Iterator[tuple[str, str]]:
    """``(name, body)`` of every marked table in a document."""
    for match in MARKER.finditer(text):
        yield match.group("name"), match.group("body")


def rewrite(text: str, results: Path = RESULTS) -> str:
    """``text`` with every marked table rendered afresh from the records."""

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"<!-- table:{name} -->\n{render(name, results)}\n<!-- /table:{name} -->"

    return MARKER.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the tables; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the marked tables")
    mode.add_argument("--check", action="store_true", help="exit 1 when a table differs")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        for name in table_names():
            print(f"<!-- table:{name} -->\n{render(name)}\n<!-- /table:{name} -->\n")
        return 0
    stale = []
    for document in DOCUMENTS:
        text = document.read_text()
        fresh = rewrite(text)
        if fresh != text:
            stale.append(document.relative_to(ROOT).as_posix())
            if args.write:
                document.write_text(fresh)
    if args.check and stale:
        print("tables differ from the records in: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
