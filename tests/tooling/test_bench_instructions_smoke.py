"""The instruction-count benchmark still runs (quick mode): counts are positive and ordered."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import instructions
from devtools.redis_harness import find_binary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("valgrind") is None,
        reason="valgrind is not installed (Debian: apt-get install valgrind; .ci/run does)",
    ),
]


def test_instructions_per_check_are_counted() -> None:
    rows = dict(instructions.rows(str(find_binary()), quick=True))
    floor = rows.pop("floor: EVALSHA of `return 1`")
    one, six = rows["gcra, 1 x 1"], rows["gcra, 2 x 3 + metadata"]
    # A check does more than an empty script, and six limits more than one.
    assert 0 < floor < one < six
    assert floor < rows["gcra, 1 x 1, denied"]
    # The design's floor ran its two commands (more than an empty call) and decided
    # nothing (less than the check it mirrors).
    assert floor < rows[instructions.IO_ONLY] < one
    # A first denial writes the index; a denial again within the second only counts.
    assert one < rows["gcra, 1 x 1, denied again within the second"] < rows["gcra, 1 x 1, denied"]
    # A ban's field is read with the limits (allowed) and written on a denial.
    assert floor < rows["gcra, 1 x 1, with a ban, allowed"]
    assert rows["gcra, 1 x 1, denied"] < rows["gcra, 1 x 1, with a ban, denied"]
    # Redis' TIME, read by the script where a test clock sends its time.
    assert floor < rows["gcra, 1 x 1, on Redis' TIME (no test clock)"]


def test_a_concurrency_check_and_its_release_are_counted() -> None:
    rows = dict(instructions.rows(str(find_binary()), quick=True))
    floor = rows["floor: EVALSHA of `return 1`"]
    check = rows["concurrency, 1 x 1 (slots never released, leases free them)"]
    # Real checks; the pair is two script calls, each more than an empty script (how
    # the check alone compares with the pair is left to full runs: quick ones are noisy).
    assert floor < check
    assert 2 * floor < rows["concurrency, 1 x 1, check + release"]
