"""The dashboard benchmark still runs (its quick mode, small): no timing is asserted."""

from __future__ import annotations

from pathlib import Path

from tests.tooling.quick_bench import run_quick


def test_the_dashboard_benchmark_runs(tmp_path: Path) -> None:
    arguments = ("--offenders", "300")
    text = run_quick("benchmarks.dashboard_page", tmp_path / "report.md", *arguments)
    assert text.startswith("# Dashboard benchmark\n")
    assert "300 offenders in the index" in text
    for operation in ("page 1 (50 rows), by last denial", "detail of the IP with 1,000 users"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {operation} |"))
        assert 1 <= int(row.split(" | ")[3]) <= 4, row  # round trips: a handful, not per row
