"""benchmarks/data_load.py reports the tensors a data module keeps after setup()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from formats import write_covtype

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "data_load.py"


def test_data_load_reports_covtype_tensors(tmp_path: Path) -> None:
    write_covtype(tmp_path / "covtype.data.gz", n=500)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "covtype", "--data-home", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    row = json.loads(out.splitlines()[-1])
    # 500 rows: 400 train (10 % of them validation), 100 test; 54 float32 + int64 label
    assert row["train_rows"] == 360 and row["dtype"] == "torch.float32"
    assert row["tensors_mib"] == round(500 * (54 * 4 + 8) / 2**20)
    assert row["setup_s"] >= 0 and row["peak_growth_mib"] >= 0
