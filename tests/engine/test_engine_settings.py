"""The engine that DJANGO_RATELIMITS configures."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from django_ratelimits.engine import Algorithm, Check, Engine, Identity, Limit, get_engine
from django_ratelimits.rates import Rate


def test_get_engine_follows_the_settings(redis_standalone: Any) -> None:
    config = {
        "REDIS": redis_standalone.url,
        "KEY_PREFIX": "cfg",
        "SHARDS": 4,
        "METADATA_MAX_ENTRIES": 2,
    }
    with override_settings(DJANGO_RATELIMITS=config):
        engine = get_engine()
        assert get_engine() is engine
        assert engine.keys.prefix == "cfg" and engine.keys.shards == 4
        identity = Identity("ip", "192.0.2.77")
        check = Check(
            identity, [Limit("s", Rate(5, 60), Algorithm.FIXED_WINDOW)], "m", record_every=True
        )
        for _ in range(4):
            assert engine.check([check]).allowed
        client = redis_standalone.client()
        assert client.llen(engine.keys.of(identity).metadata) == 2
        assert engine.keys.of(identity).metadata.startswith("cfg:{s")
    with override_settings(DJANGO_RATELIMITS={**config, "KEY_PREFIX": "cfg2"}):
        assert get_engine() is not engine
        assert get_engine().keys.prefix == "cfg2"


def test_a_cost_chosen_per_request_never_grows_the_engine(redis_client: Any) -> None:
    engine = Engine(redis_client)
    limits = [Limit("big", Rate(1_000_000, 60), Algorithm.GCRA)]
    for cost in range(1, 500):
        assert engine.check([Check(Identity("ip", "192.0.2.5"), limits)], cost=cost).allowed
    assert len(engine._settings) <= 64  # the encoded settings arguments it keeps
