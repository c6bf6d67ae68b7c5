"""``python -m benchmarks.scaling`` still runs (quick mode): no timing is asserted.

Only that every shape made checks that reached Redis, and that on the cluster the
masters in use, and only those, ran the checks' scripts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scaling

pytestmark = pytest.mark.slow


def _rows(text: str, title: str) -> list[list[str]]:
    """The rows of the table under ``### title``, each split into its cells."""
    body = text.split(f"\n### {title}\n", 1)[1]
    table = body[body.index("\n|") + 1 :].split("\n\n", 1)[0]
    return [
        [cell.strip() for cell in row.strip("|").split(" | ")] for row in table.splitlines()[2:]
    ]


def test_every_shape_and_master_count_did_real_work(tmp_path: Path) -> None:
    output = tmp_path / "scaling.md"
    assert scaling.main(["--quick", "--output", str(output)]) == 0
    text = output.read_text()
    one = _rows(text, "One Redis core")
    assert [row[0] for row in one] == list(scaling.SHAPES)
    for row in one:
        assert int(row[1].replace(",", "")) > 0, row  # checks/s: checks were made
        assert float(row[4]) > 0, row  # Redis CPU per check: Redis did the work
        assert row[2] == "0", row  # denied: the allowed path was measured
    many = _rows(text, "The cluster, by masters in use")
    assert [row[0] for row in many] == ["1", "2", "3"]
    for row in many:
        in_use = int(row[0])
        assert row[2] == "0", row  # denied
        calls = [int(cell.replace(",", "")) for cell in row[-4:-1]]  # script calls per master
        assert all(n > 0 for n in calls[:in_use]), row
        assert all(n == 0 for n in calls[in_use:]), row
