"""The dashboard benchmark still runs (its quick mode, small): no timing is asserted."""

from __future__ import annotations

from pathlib import Path

from benchmarks import dashboard_page
from tests.tooling.quick_bench import run_quick


def test_the_dashboard_benchmark_runs(tmp_path: Path) -> None:
    arguments = ("--offenders", "300")
    text = run_quick("benchmarks.dashboard_page", tmp_path / "report.md", *arguments)
    assert text.startswith("# Dashboard benchmark\n")
    assert "300 offenders in the index" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| operation |"))
    columns = header.strip("|").split(" | ")
    rows = {
        cells[0].strip(): dict(zip(columns, (c.strip() for c in cells), strict=True))
        for line in lines
        if line.startswith("| ") and not line.startswith(("| operation |", "| --- |"))
        for cells in [line.strip("|").split(" | ")]
    }
    for operation in ("page 1 (50 rows), by last denial", "detail of the IP with 1,000 users"):
        assert 1 <= int(rows[operation]["round trips"]) <= 4, rows[operation]  # not per row
    # The rows filtered to users time a page that shows users: the reader's rows, and
    # the render's records (one HGETALL per row shown).
    assert int(rows["page 1, kind=user"]["rows"]) >= 1
    assert "HGETALL" in rows["render: offenders, kind=user"]["Redis commands"]


def test_users_are_among_the_latest_denied() -> None:
    """A page filtered to users scans only the latest entries (about 13,000 of the full
    run's 100,000): the users must be among them, or the kind=user rows time an empty
    page. The last pass denies the latest; one in ten of its identities are users."""
    people = dashboard_page.offenders(1000)
    assert sum(who.kind == "user" for who, _ in people) == 100
    last = dashboard_page.passes(people)[-1]
    assert sum(who.kind == "user" for who, _ in last) * 10 == len(last)
