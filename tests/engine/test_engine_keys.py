"""Keys: bounded and unbreakable, one slot per identity, every one with a TTL;
and what one request costs in round trips."""

from __future__ import annotations

import hashlib
import tracemalloc
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.connection import Connection

from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Check,
    Engine,
    Identity,
    KeySpace,
    Limit,
)
from django_ratelimits.engine.keys import KEYS_CACHED, ident, label, printable
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, all_keys, check_calls, fresh_engine

HOSTILE = [
    "x" * 10_000,
    "{a}",
    "}{",
    "a b",
    "line\nbreak",
    "nul\x00byte",
    "\udcff\udcfe not utf-8",
    "*",
    "ip:1.2.3.4",
    "~forged",
    "é",
]


def seed_000_request(ip: str, user: str, algorithm: Algorithm) -> list[Check]:
    """Seed 000's case: 10/s, 120/m, 240/h for the IP and for the user."""
    limits = [Limit("api", rate, algorithm) for rate in parse_rates("10/s, 120/m, 240/h")]
    return [
        Check(Identity("ip", ip), limits, metadata=f"user:{user}|/api", record_every=True),
        Check(Identity("user", user), limits, metadata=f"ip:{ip}|/api", record_every=True),
    ]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_identities_yield_bounded_valid_keys(redis_client: Any, value: str) -> None:
    engine = fresh_engine(redis_client, FakeClock(EPOCH_US))
    identity = Identity("user", value)
    limit = Limit("api", parse_rates("1/m")[0], Algorithm.SLIDING_LOG)
    assert engine.check([Check(identity, [limit], metadata=value)]).allowed
    assert not engine.check([Check(identity, [limit], metadata=value)]).allowed

    keys = [k for k in all_keys(redis_client) if k.startswith(engine.keys.prefix.encode())]
    assert len(keys) == 5  # state, metadata, offender record, both shard indexes
    tag = engine.keys.of(identity).tag.encode()
    for key in keys:
        assert len(key) < 120
        assert key.startswith(tag)
        assert key.count(b"{") == 1 and key.count(b"}") == 1
        assert not any(ch in key for ch in b" \n\r\t\x00")
        key.decode("ascii")
    if isinstance(redis_client, RedisCluster):
        assert len({redis_client.keyslot(k) for k in keys}) == 1
    own = engine.keys.of(identity)
    record = redis_client.hgetall(own.record)
    assert len(record[b"id"]) < 1000
    assert b"\n" not in record[b"id"]
    # The script reads the ident from the state key and the label and the hit entry's
    # head from one argument: each lands whole, whatever the value holds.
    assert record[b"id"].decode() == label(identity)
    assert redis_client.zscore(own.index, own.ident) is not None
    entry = redis_client.lindex(own.metadata, 0).decode()
    assert entry.startswith(printable(value, 300) + "|")
    assert entry.endswith("|D|api=D")


@pytest.mark.parametrize("prefix", ["a{b", "a}b", "{x}"])
def test_a_prefix_with_a_brace_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        KeySpace(prefix=prefix)


def test_distinct_values_never_share_a_key() -> None:
    idents = {ident(Identity("user", v)) for v in HOSTILE}
    assert len(idents) == len(HOSTILE)
    # A raw value can never look like the digest of another one.
    assert ident(Identity("user", "~forged")) != "user:~forged"


def test_shards_spread_identities() -> None:
    space = KeySpace(shards=64)
    used = {space.of(Identity("ip", f"10.0.{n // 256}.{n % 256}")).index for n in range(2000)}
    assert len(used) == 64


def test_an_identity_has_the_same_names_by_value_and_by_ident() -> None:
    # A check finds an identity's names by its kind and value, staff's code by its ident
    # (an offender index member): both must name the same keys, digested values too.
    space = KeySpace(prefix="same", secret=b"s" * 32)
    for value in HOSTILE:
        identity = Identity("user", value)
        assert space.of(identity) == space.of_ident(ident(identity))


@pytest.mark.parametrize("secret", [b"", b"s" * 32])
def test_an_identitys_shard_is_the_keyed_hash_of_its_ident(secret: bytes) -> None:
    # Where an identity lives must not change between releases: a worker of the next
    # release would otherwise read fresh state for every identity during a deployment.
    space = KeySpace(prefix="placed", secret=secret)
    for n in range(200):
        who = ident(Identity("ip", f"10.1.0.{n}"))
        digest = hashlib.blake2b(who.encode(), digest_size=4, key=secret).digest()
        shard = int.from_bytes(digest, "big") % 64
        assert space.of(Identity("ip", f"10.1.0.{n}")).tag == f"placed:{{s{shard}}}"


def test_rotating_identities_cannot_grow_the_cache_of_key_names() -> None:
    # An attacker who sends a new identity per request, with values of 5,000 characters,
    # costs each worker at most KEYS_CACHED entries, none of which holds the value.
    space = KeySpace(prefix="rotated")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(KEYS_CACHED + 1_000):
            space.of(Identity("header", f"{n}-" + "x" * 5_000))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert space._seen.cache_info().currsize == KEYS_CACHED  # type: ignore[attr-defined]
    # Keeping the values would take over 20 MB; the names take about 500 bytes each.
    assert grown < KEYS_CACHED * 1_000


SHADOW = [Limit("watch", rate, Algorithm.FIXED_WINDOW) for rate in parse_rates("1/m")]


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_every_key_written_has_a_ttl(redis_client: Any, algorithm: Algorithm) -> None:
    engine = fresh_engine(redis_client)  # the real Redis clock: real TTLs
    for n in range(30):
        shadow = Check(Identity("ip", f"192.0.2.{n % 3}"), SHADOW, shadow=True)
        engine.check([*seed_000_request(f"192.0.2.{n % 3}", str(n % 5), algorithm), shadow])
    keys = [k for k in all_keys(redis_client) if k.startswith(engine.keys.prefix.encode())]
    assert len(keys) > 10
    for key in keys:
        ttl = redis_client.pttl(key)
        assert 0 < ttl <= 86_400_000, (key, ttl)


class CountingConnection(Connection):
    """A real connection that counts the times it writes to the socket."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


@pytest.mark.parametrize("algorithm", RATE_ALGORITHMS)
def test_two_identities_three_rates_cost_one_round_trip(
    redis_standalone: Any, algorithm: Algorithm
) -> None:
    pool = redis.ConnectionPool(
        connection_class=CountingConnection, host=redis_standalone.host, port=redis_standalone.port
    )
    engine = fresh_engine(redis.Redis(connection_pool=pool))
    request = seed_000_request("203.0.113.50", "42", algorithm)
    engine.check(request)  # connect and load the script
    before = CountingConnection.sends
    decision = engine.check(request)
    assert CountingConnection.sends - before == 1
    assert len(decision.results) == 6 and decision.allowed
    before = CountingConnection.sends
    engine.peek(request)
    assert CountingConnection.sends - before == 1


def _check_calls(cluster: Any) -> int:
    return check_calls(*(redis.Redis(host=host, port=port) for host, port in cluster.nodes))


def test_on_a_cluster_one_script_call_per_slot(redis_cluster: Any) -> None:
    engine = fresh_engine(redis_cluster.client())
    request = seed_000_request("203.0.113.51", "43", Algorithm.GCRA)
    engine.check(request)
    slots = {redis_cluster.client().keyslot(engine.keys.of(c.identity).tag) for c in request}
    before = _check_calls(redis_cluster)
    assert engine.check(request).allowed
    assert _check_calls(redis_cluster) - before == len(slots)


def test_a_shared_shard_makes_one_call_on_a_cluster(redis_cluster: Any) -> None:
    # With one shard every identity shares one slot: one call decides both.
    client = redis_cluster.client()
    engine = Engine(client, keys=KeySpace(prefix="oneshard", shards=1))
    request = seed_000_request("203.0.113.52", "44", Algorithm.FIXED_WINDOW)
    engine.check(request)
    before = _check_calls(redis_cluster)
    engine.check(request)
    assert _check_calls(redis_cluster) - before == 1


def test_on_a_cluster_one_write_per_node_involved(redis_cluster: Any) -> None:
    client = redis_cluster.client()
    for node in client.get_nodes():  # the pools make counting connections from now on
        pool = node.redis_connection.connection_pool
        pool.disconnect()
        pool.connection_class = CountingConnection
        pool.reset()
    engine = fresh_engine(client)
    # Identities spread over shards; find two whose slots live on different nodes.
    checks = seed_000_request("203.0.113.60", "60", Algorithm.SLIDING_WINDOW)
    nodes = {client.get_node_from_key(engine.keys.of(c.identity).tag).name for c in checks}
    for n in range(61, 200):
        if len(nodes) == 2:
            break
        checks = seed_000_request(f"203.0.113.{n}", str(n), Algorithm.SLIDING_WINDOW)
        nodes = {client.get_node_from_key(engine.keys.of(c.identity).tag).name for c in checks}
    assert len(nodes) == 2
    engine.check(checks)  # connect to both nodes and load the script
    before = CountingConnection.sends
    assert engine.check(checks).allowed
    assert CountingConnection.sends - before == 2


def test_a_label_is_the_identity_as_it_is_when_nothing_was_cut_or_replaced() -> None:
    assert label(Identity("ip", "203.0.113.7")) == "ip:203.0.113.7"
    assert label(Identity("user", "é")) == "user:é"
    cut = label(Identity("header", "x" * 10_000))
    assert cut.startswith("header:" + "x" * 193) and cut.isprintable()
    assert cut.endswith(ident(Identity("header", "x" * 10_000)).partition(":")[2])
    labels = {label(Identity("user", v)) for v in HOSTILE}
    assert len(labels) == len(HOSTILE)
