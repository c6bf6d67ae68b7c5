"""The dashboard benchmark still runs (its quick mode, small): no timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_dashboard_benchmark_runs(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    command = ["benchmarks.dashboard_page", "--quick", "--offenders", "300", "--output", report]
    done = subprocess.run(
        [sys.executable, "-m", *map(str, command)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    assert text.startswith("# Dashboard benchmark\n")
    assert "300 offenders in the index" in text
    for operation in ("page 1 (50 rows), by last denial", "detail of the IP with 1,000 users"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {operation} |"))
        assert 1 <= int(row.split(" | ")[3]) <= 4, row  # round trips: a handful, not per row
