"""Memory under attack: many identities leave Redis memory bounded by TTLs and caps.

``devtools/memory_attack.py`` is the attack (every identity counted once and denied
once, a metadata entry each); ``python -m devtools.memory_attack --identities 1000000``
is the full-size run whose figures docs/reliability.md quotes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from devtools.memory_attack import attack
from devtools.redis_harness import RedisServer
from django_ratelimits.engine import Algorithm, Engine, Limit
from django_ratelimits.rates import Rate

pytestmark = pytest.mark.slow

IDENTITIES = 3000
BYTES_BOUND = 2000  # per denied identity: its state, metadata list, record, index entries


@pytest.fixture
def client(redis_standalone: RedisServer) -> Iterator[redis.Redis]:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client(max_connections=8) as conn:
        conn.flushall()
        yield conn
        conn.flushall()


def test_an_identity_rotation_attack_is_bounded(
    client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    index_max = 640
    report = attack(Engine(client, offender_index_max=index_max), IDENTITIES)
    with capsys.disabled():
        print(f"\nmemory attack: {report.line()} (OFFENDER_INDEX_MAX {index_max})")
    assert report.keys_without_ttl == 0
    assert report.longest_ttl_s <= 86_400  # OFFENDER_RETENTION: then it is all gone
    assert report.index_entries <= index_max < IDENTITIES
    assert report.bytes_per_identity < BYTES_BOUND


def test_every_key_an_attack_leaves_expires(client: redis.Redis) -> None:
    engine = Engine(client, metadata_ttl=1, offender_retention=1)
    # Each identity's second request is denied while its first is in the window: 5 s, so
    # that a thread stalled on a busy machine cannot see the first slide out.
    seconds = Limit("login", Rate(1, 5), Algorithm.SLIDING_LOG)
    report = attack(engine, IDENTITIES, limit=seconds)
    # Not one key per identity: on a busy machine the first identities' keys of a second
    # are gone before the attack ends. Whatever is left has a TTL.
    assert report.keys > 0 and report.keys_without_ttl == 0
    deadline = time.monotonic() + 120  # TTLs of a second; Redis' active expiry takes a few
    while client.dbsize():
        assert time.monotonic() < deadline, f"{client.dbsize()} keys left"
        time.sleep(0.2)
