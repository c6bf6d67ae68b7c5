"""The settings of :mod:`benchmarks.flood`'s servers: :mod:`benchmarks.settings` with
``DENIAL_CACHE`` from ``RATELIMITS_BENCH_DENIAL_CACHE`` (the default when unset)."""

from __future__ import annotations

import os

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import DJANGO_RATELIMITS as BASE

DJANGO_RATELIMITS = {
    **BASE,
    "DENIAL_CACHE": int(os.environ.get("RATELIMITS_BENCH_DENIAL_CACHE", "10000")),
}
