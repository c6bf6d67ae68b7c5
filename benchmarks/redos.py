"""One search of the catastrophic ``^/(\\w+-?)*$`` on adversarial paths: Python's ``re``
against RE2 (:class:`~django_ratelimits.policies.matching.PathPattern`).

``python -m benchmarks.redos``. Not part of ``make bench``: ``re`` takes seconds at 26
characters and doubles with each one more, so longer paths are estimated, not run.
"""

from __future__ import annotations

import re
import time
import timeit
from functools import partial

from django_ratelimits.policies.matching import PathPattern

PATTERN = r"^/(\w+-?)*$"
LENGTHS = (20, 22, 24, 26, 42, 5000)
RE_MAX = 26  # longest path given to re


def main() -> None:
    python, ours = re.compile(PATTERN), PathPattern(PATTERN)
    took: dict[int, float] = {}
    for length in LENGTHS:
        path = "/" + "a" * (length - 2) + "!"
        rounds = 200
        re2_seconds = min(timeit.repeat(partial(ours.search, path), number=rounds, repeat=5))
        if length <= RE_MAX:
            start = time.perf_counter()
            python.search(path)
            took[length] = time.perf_counter() - start
            re_text = f"{took[length]:.3f} s"
        else:
            factor = (took[RE_MAX] / took[RE_MAX - 2]) ** 0.5  # per added character
            hours = took[RE_MAX] * factor ** min(length - RE_MAX, 1000) / 3600
            re_text = f"not run: at x{factor:.2f} per character, about {hours:.3g} h"
        print(f"{length:5d} characters: re {re_text}; RE2 {re2_seconds / rounds * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
