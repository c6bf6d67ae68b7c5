"""The Redis side of django-ratelimits.

>>> engine = Engine(redis.Redis())
>>> ip, user = Identity("ip", "203.0.113.7"), Identity("user", "42")
>>> limits = [Limit("api", rate) for rate in parse_rates("10/s, 120/m, 240/h")]
>>> decision = engine.check([Check(ip, limits), Check(user, limits)])
>>> decision.allowed, decision.retry_after

Later layers (middleware, decorators, DRF, dashboard) all go through here.
"""

from __future__ import annotations

from django_ratelimits.conf import get_settings
from django_ratelimits.engine.aconnection import get_async_redis
from django_ratelimits.engine.connection import get_redis
from django_ratelimits.engine.core import Clock, Engine
from django_ratelimits.engine.decision import Decision, LimitResult
from django_ratelimits.engine.keys import KeySpace
from django_ratelimits.engine.limits import (
    RATE_ALGORITHMS,
    Algorithm,
    Ban,
    Check,
    Gate,
    Identity,
    Limit,
)

__all__ = [
    "RATE_ALGORITHMS",
    "Algorithm",
    "Ban",
    "Check",
    "Clock",
    "Decision",
    "Engine",
    "Gate",
    "Identity",
    "KeySpace",
    "Limit",
    "LimitResult",
    "active_test_clock",
    "get_engine",
]

_current: tuple[object, object, Engine] | None = None
# The test kit's clock (django_ratelimits.testing.fake_clock): set by code only, never
# from settings, so production cannot turn it on (invariant 3; system check E100 errors
# if it is set when checks run).
_test_clock: Clock | None = None


def use_test_clock(clock: Clock | None) -> None:
    """Build the shared engine on ``clock`` from now on (``None``: Redis' ``TIME``).

    For :mod:`django_ratelimits.testing` only; no setting calls it.
    """
    global _current, _test_clock
    _test_clock, _current = clock, None


def active_test_clock() -> Clock | None:
    """The clock :func:`use_test_clock` set, if any."""
    return _test_clock


def get_engine() -> Engine:
    """The engine ``DJANGO_RATELIMITS`` configures, shared by the whole process.

    Built on first use (no network call until the first check) and rebuilt
    when the settings or the Redis client they resolve to change.
    """
    global _current
    config = get_settings()
    client = get_redis(config)
    current = _current
    if current is None or current[0] is not config or current[1] is not client:
        engine = Engine(
            client,
            keys=KeySpace(config.key_prefix, config.shards, config.shard_key),
            metadata_max_entries=config.metadata_max_entries,
            metadata_ttl=config.metadata_ttl,
            offender_retention=config.offender_retention,
            offender_index_max=config.offender_index_max,
            async_client=lambda: get_async_redis(config),
            clock=_test_clock,
        )
        current = _current = (config, client, engine)
    return current[2]
