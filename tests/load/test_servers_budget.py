"""Identity budgets through a real gunicorn: one address rotating API keys gets the
budget and then its address's limit through, and Redis stops growing; honest keys
are limited as before.

gunicorn (two sync workers) serves ``tests.urls`` with one policy, ``keys``:
``^/api/hello``, 5/h per ``X-Api-Key`` (GCRA), an identity budget of 10/h. Hourly
rates and budgets, and no fixed window to start again on the hour: nothing is given
back while the test runs, however slow the machine (gunicorn's engine runs on Redis'
clock, which no test clock reaches).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from devtools.redis_harness import RedisServer
from tests.load.live import Site, gunicorn_site, new_source

pytestmark = pytest.mark.slow

LIMIT, BUDGET = 5, 10
POLICY = {
    "name": "keys",
    "rates": f"{LIMIT}/h",
    "algorithm": "gcra",  # no window to turn: a fixed one would start again on the hour
    "path": r"^/api/hello",
    "key": "header",
    "key_arg": "X-Api-Key",
    "identity_budget": f"{BUDGET}/h",
}


@pytest.fixture(scope="module")
def site(redis_standalone: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with gunicorn_site(redis_standalone, tmp_path_factory.mktemp("budget"), [POLICY]) as served:
        yield served


@pytest.fixture
def redis_client(redis_standalone: RedisServer, site: Site) -> Iterator[redis.Redis]:
    with redis_standalone.client() as client:
        client.flushall()
        yield client


def _stored(client: redis.Redis) -> tuple[int, int]:
    """Keys in Redis, and the bytes MEMORY USAGE gives for all of them."""
    keys = list(client.scan_iter(count=1000))
    return len(keys), sum(client.memory_usage(key) or 0 for key in keys)


def _statuses(site: Site, source: str, keys: list[str]) -> list[int]:
    return [site.get("/api/hello", source=source, headers={"X-Api-Key": k}).status for k in keys]


def test_an_address_rotating_keys_gets_the_budget_then_its_limit_and_redis_stops_growing(
    site: Site, redis_client: redis.Redis
) -> None:
    source = new_source()
    first = _statuses(site, source, [f"rotated-{n}" for n in range(100)])
    assert first == [200] * (BUDGET + LIMIT) + [429] * (100 - BUDGET - LIMIT)
    stored = _stored(redis_client)
    more = _statuses(site, source, [f"rotated-{n}" for n in range(100, 400)])
    assert more == [429] * 300
    assert _stored(redis_client)[0] == stored[0], "a key per rotated value"
    assert _stored(redis_client)[1] <= stored[1] + 512, "memory grows with the requests"


def test_honest_keys_behind_one_address_within_the_budget_keep_their_own_limits(
    site: Site, redis_client: redis.Redis
) -> None:
    source = new_source()
    keys = [f"team-{n}" for n in range(BUDGET)]
    assert _statuses(site, source, keys * LIMIT) == [200] * (BUDGET * LIMIT)
    assert _statuses(site, source, keys) == [429] * BUDGET


def test_a_stable_key_is_limited_alone_while_its_address_rotates_others(
    site: Site, redis_client: redis.Redis
) -> None:
    source = new_source()
    assert _statuses(site, source, ["stable"]) == [200]
    _statuses(site, source, [f"rotated-{n}" for n in range(50)])
    assert _statuses(site, source, ["stable"] * LIMIT) == [200] * (LIMIT - 1) + [429]
