"""``python -m benchmarks --parts flood`` still runs (its quick mode, once, in a
subprocess). No timing is asserted: only that both rows flooded for real, and the
calls per denied request that hold by construction: one check each without the
cache; with it, fewer than one and more than none (the batches go to Redis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_ratelimits.deny_cache import BATCH_REQUESTS
from tests.tooling.quick_bench import run_quick, section

pytest.importorskip("gunicorn", reason="the bench extra: pip install -e '.[bench]'")

pytestmark = pytest.mark.slow

FLOOD = 1000  # the quick mode's flood


def test_the_flood_benchmark_counts_the_calls_a_flood_costs(tmp_path: Path) -> None:
    report = run_quick("benchmarks", tmp_path / "benchmarks.md", "--parts", "flood")
    off, on = section(report, "Flood")
    assert off[0] == "off (0)" and on[0] == "on (10,000)"
    for row in (off, on):
        assert row[1] == f"{FLOOD:,}", row  # every request of the flood was denied
        assert all(float(cell.replace(",", "")) > 0 for cell in row[4:]), row
    assert off[2] == f"{FLOOD:,}" and off[3] == "1.000"  # a check per denied request
    calls = int(on[2].replace(",", ""))
    # Each of the 2 workers sends a batch per BATCH_REQUESTS refusals, at least.
    assert FLOOD // BATCH_REQUESTS - 2 <= calls < FLOOD, on
    assert "| flood: calls to Redis per denied request ≤ 0.05 |" in report
