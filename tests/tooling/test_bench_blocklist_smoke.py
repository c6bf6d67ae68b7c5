"""``python -m benchmarks --parts blocklist`` still runs (its quick mode, once, in a
subprocess). No timing is asserted: only that every row looked up for real (the
allowed clients were never refused, the blocked one always was, nothing went to Redis)
and that every entry count was loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.blocklist import ENTRY_COUNTS
from tests.tooling.quick_bench import run_quick, section

pytestmark = pytest.mark.slow

PER_ROUND, ROUNDS = 200, 2  # the quick mode's


def test_the_blocklist_benchmark_looks_up_every_count(tmp_path: Path) -> None:
    report = run_quick("benchmarks", tmp_path / "benchmarks.md", "--parts", "blocklist")
    ping, *rows = section(report, "Blocked networks")
    assert ping[0] == "PING (the floor)"
    names = [row[0] for row in rows]
    for n in ENTRY_COUNTS:
        for version in (4, 6):
            assert f"{n:,} blocked networks, an IPv{version} client not blocked" in names
    for row in rows:
        blocked = row[0].endswith("(403)")
        assert row[4] == "0", row  # round trips: the blocklist never asks Redis
        assert row[5] == (str(PER_ROUND * ROUNDS) if blocked else "0"), row  # denied
        assert float(row[1]) > 0, row
    assert any(name.endswith("a blocked client (403)") for name in names)
    assert f"{max(ENTRY_COUNTS):,}: " in report.split("Loading the registry", 1)[1]
