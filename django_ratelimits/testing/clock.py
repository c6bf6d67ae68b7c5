"""The engine's test clock.

:class:`FakeClock` replaces Redis' ``TIME`` as the engine's clock, so tests can
move time without sleeping. It is only reachable from code: an
:class:`~django_ratelimits.engine.Engine` built with ``clock=``, or the shared
engine under :func:`django_ratelimits.testing.fake_clock`. No setting turns it
on, so production cannot enable it by accident. While a fake clock drives
time, every key gets 60 extra seconds of TTL, so a slow test run cannot lose
state that the fake time still needs.
"""

from __future__ import annotations

import time


class FakeClock:
    """A clock in microseconds that moves only when told to."""

    def __init__(self, start_us: int | None = None) -> None:
        self._now = time.time_ns() // 1000 if start_us is None else start_us

    def now_us(self) -> int:
        return self._now

    def advance(self, seconds: float = 0, *, us: int = 0) -> None:
        """Move forward by ``seconds`` plus ``us`` microseconds (never back)."""
        step = round(seconds * 1_000_000) + us
        if step < 0:
            raise ValueError("a FakeClock only moves forward")
        self._now += step
