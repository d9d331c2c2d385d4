"""benchmarks/report.py: the documents' tables equal what the records render, and every
record carries its figures, command, commit, machine and date."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

report = pytest.importorskip("report")

DOCUMENTS = report.DOCUMENTS


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(report.ROOT).as_posix())
def test_every_table_in_the_documents_is_what_the_records_render(document: Path) -> None:
    text = document.read_text()
    tables = list(report.marked_tables(text))
    assert tables, f"{document.name} shows no table rendered from the records"
    for name, body in tables:
        assert body == report.render(name) + "\n", (
            f"table {name} in {document.name} differs from its records: "
            "run `python benchmarks/report.py --write`"
        )


def test_the_readme_shows_one_results_table_per_data_set() -> None:
    shown = {name for name, _ in report.marked_tables(report.DOCUMENTS[0].read_text())}
    assert {f"recipes_{d}" for d in ("digits", "mnist", "fashion-mnist", "covtype")} <= shown


def test_every_table_the_records_define_is_shown_in_a_document() -> None:
    shown = {name for doc in DOCUMENTS for name, _ in report.marked_tables(doc.read_text())}
    assert set(report.table_names()) <= shown


@pytest.mark.parametrize("path", report.record_files(), ids=lambda p: p.name)
def test_every_record_has_the_required_fields(path: Path) -> None:
    data = report.load(path)
    assert report.missing_fields(data) == []
    for record in data["records"]:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}|unknown", record["date"]), record["name"]
        assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", record["commit"]), record["name"]
    names = [record["name"] for record in data["records"]]
    assert len(names) == len(set(names)), f"{path.name}: two records of one result"


def test_one_current_record_per_result_no_dated_copies() -> None:
    dated = [p.name for p in report.RESULTS.iterdir() if re.search(r"\d{4}-\d{2}-\d{2}", p.name)]
    assert dated == []


def _csv_sources() -> list[tuple[Path, dict]]:
    out = []
    for path in report.record_files():
        data = report.load(path)
        for spec in data["tables"].values():
            if spec.get("kind") == "section5":
                out.append((path, data))
                break
    return out


@pytest.mark.parametrize("path,data", _csv_sources(), ids=lambda v: getattr(v, "name", ""))
def test_every_csv_row_of_a_section5_table_belongs_to_exactly_one_record(
    path: Path, data: dict
) -> None:
    (source,) = {spec["source"] for spec in data["tables"].values()}
    with (report.RESULTS / source).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        owners = [
            r["name"]
            for r in data["records"]
            if row["method"] in r["figures"]["methods"]
            and int(row["J"]) in r["figures"]["dims"]
            and int(row["repeat"]) in r["figures"].get("repeats", [int(row["repeat"])])
        ]
        assert len(owners) == 1, (
            f"{source}: {row['method']} J={row['J']} seed {row['repeat']} owned by {owners}"
        )


def _write_records(results: Path, figures: dict) -> None:
    record = {
        "name": "run",
        "figures": figures,
        "command": "python x.py",
        "commit": "abc1234",
        "machine": "2-core x86-64 CPU VM, some CPU",
        "date": "2026-01-01",
    }
    tables = {
        "demo": {
            "rows": ["run"],
            "columns": [
                ["accuracy", "{test_acc:.2f} %"],
                ["time", "{fit_time}"],
                ["untrained", "{untrained_acc:.2f} %"],
                ["machine", "{machine_class}"],
            ],
        }
    }
    (results / "demo.json").write_text(json.dumps({"records": [record], "tables": tables}))


def test_rewrite_replaces_a_stale_table_and_leaves_the_rest(tmp_path: Path) -> None:
    _write_records(tmp_path, {"test_acc": 98.304, "fit_s": 247})
    text = "intro\n<!-- table:demo -->\n| old |\n<!-- /table:demo -->\nafter\n"
    fresh = report.rewrite(text, tmp_path)
    assert fresh == (
        "intro\n<!-- table:demo -->\n"
        "| accuracy | time | untrained | machine |\n|---|---|---|---|\n"
        "| 98.30 % | 4 min 7 s | - | 2-core x86-64 CPU VM |\n"
        "<!-- /table:demo -->\nafter\n"
    )
    assert report.rewrite(fresh, tmp_path) == fresh


def test_missing_fields_are_named(tmp_path: Path) -> None:
    data = {"records": [{"name": "a", "figures": {"x": 1}, "command": "", "commit": "abc1234"}]}
    assert report.missing_fields(data) == [
        "record a: command",
        "record a: machine",
        "record a: date",
    ]
    assert report.missing_fields({"records": []}) == ["no records"]


def test_an_unknown_table_is_refused_by_name(tmp_path: Path) -> None:
    _write_records(tmp_path, {"test_acc": 1.0})
    with pytest.raises(KeyError, match="defines table 'nothing'"):
        report.render("nothing", tmp_path)


@pytest.mark.parametrize(
    "seconds,text", [(9.34, "9.3 s"), (51, "51 s"), (247, "4 min 7 s"), (4596, "1 h 16 min")]
)
def test_durations(seconds: float, text: str) -> None:
    assert report.duration(seconds) == text
