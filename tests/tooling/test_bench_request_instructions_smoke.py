"""The request path's instruction count still runs (quick mode): every row did real work."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from benchmarks import request_instructions as counted
from tests.tooling.quick_bench import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
        reason="valgrind is not installed (Debian: apt-get install valgrind; .ci/run does)",
    ),
]


def test_instructions_per_request_are_counted() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.request_instructions", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    rows = {
        cells[0]: int(cells[1].replace(",", ""))
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| request |")
        for cells in [[cell.strip() for cell in line.strip("|").split(" | ")]]
    }
    assert list(rows) == [counted.FLOOR, counted.ONE_REPLAYED, counted.TEN_REPLAYED,
                          counted.TEN_CALLED]  # fmt: skip
    floor = rows.pop(counted.FLOOR)
    # A request did real work, and the middleware's rows more than no rate limiting.
    assert floor > 0
    assert all(count > floor for count in rows.values()), rows


def test_without_valgrind_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(counted.INSIDE, raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert counted.main(["--quick"]) == 2
