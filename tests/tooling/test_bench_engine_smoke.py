"""The engine benchmark still runs (its quick mode, in-process): no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import engine as bench
from devtools.redis_harness import RedisServer
from django_ratelimits.engine import RATE_ALGORITHMS


def test_the_engine_benchmark_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "benchmarks.md"
    assert bench.main(["--quick", "--output", str(report)]) == 0
    printed = capsys.readouterr().out
    text = report.read_text()
    assert text.startswith("# Benchmarks\n")
    rows = [  # of the latency table (the profile's before/after table has 3 columns)
        line
        for line in text.splitlines()
        if line.startswith("| ")
        and (" 1 x 1 |" in line or " 2 x 3 " in line)
        and line.count(" | ") > 5
    ]
    assert len(rows) == 2 * len(RATE_ALGORITHMS)
    for algorithm in RATE_ALGORITHMS:
        assert f"| {algorithm.value}, 1 x 1 |" in printed
        assert f"| {algorithm.value}, 2 x 3 + metadata |" in printed
        assert f"| {algorithm.value} | 1 |" in text  # its memory row: one key for one rate
    # The metadata list's row measured a full list (its cap and a fifth), not an empty one.
    assert f"Metadata list at its longest ({bench.METADATA_CAP * 6 // 5} entries of" in text
    for row in [*rows, next(line for line in text.splitlines() if line.startswith("| PING"))]:
        cells = row.split(" | ")
        assert cells[4] == "1", row  # round trips per call
        assert cells[5] == "0", row  # denied: the allowed path was measured
    # A ban on the allowed path: one round trip, every check admitted.
    row = next(line for line in text.splitlines() if "| gcra, 1 x 1, with a ban |" in line)
    cells = row.split(" | ")
    assert (cells[4], cells[5]) == ("1", "0"), row
    # A concurrency check and its release: two round trips, every check admitted.
    row = next(
        line for line in text.splitlines() if "| concurrency, 1 x 1, check + release" in line
    )
    cells = row.split(" | ")
    assert (cells[4], cells[5]) == ("2", "0"), row


def test_issue_12s_client_cpu_row_has_a_figure_and_a_verdict(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, name="bench-engine-smoke").start()
    try:
        report = bench.run(server, quick=True)
    finally:
        server.stop()
    [(figure, measured, target, verdict)] = bench.issue_12(report)
    assert figure == "client CPU of the engine call, 1 x 1 (GCRA) ÷ PING's"
    ratio = float(measured.split("x ")[0])
    assert ratio > 0 and " µs; least: " in measured, measured  # a real call took CPU
    assert target == f"≤ {bench.TARGET_CLIENT_CPU}x"
    assert verdict == ("met" if ratio <= bench.TARGET_CLIENT_CPU else "**missed**")
