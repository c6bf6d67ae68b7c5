"""Redis Cluster changing under load: a slot migrated with its live keys, a master killed.

A cluster of three masters with one replica each (``RedisClusterHarness(replicas=1)``)
serves a real gunicorn (two workers, ``tests/fault_settings.py`` with
``RATELIMITS_SERVER_CLUSTER=1``) and the policies of ``tests.load.live.POLICIES``.
Four clients keep sending requests whose identity lives in the slot the test
moves or whose master it kills. Every answer must be a 200 or a fail-closed
503, never a 500; afterwards the limits hold again, and a migration keeps the
counters it moved.

The slot of an identity is found through the public ``KeySpace.of(identity).tag``
(every key of an identity carries it), never from a key name.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from devtools.redis_harness import RedisClusterHarness, RedisServer, node_id, reserved_port
from django_ratelimits.conf import get_settings
from django_ratelimits.engine import Identity, KeySpace
from tests.load.live import (
    POLICIES,
    TARGETS,
    WORKERS,
    Site,
    Traffic,
    assert_no_server_error,
    gunicorn,
    limit_holds,
    new_source,
    observe,
    prepare,
    serve,
)

pytestmark = pytest.mark.slow

LOAD = Identity("ip", "127.0.0.1")  # the identity of every request the traffic sends
SLOT_NEIGHBOURS = 20  # other clients whose keys live in LOAD's slot


@pytest.fixture(scope="module")
def cluster(
    redis_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisClusterHarness]:
    harness = RedisClusterHarness(
        tmp_path_factory.mktemp("cluster-faults"), binary=redis_binary, replicas=1
    )
    harness.start()
    yield harness
    harness.stop()


@pytest.fixture(scope="module")
def site(cluster: RedisClusterHarness, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("cluster-site")
    env = prepare(
        workdir,
        cluster.url,
        POLICIES,
        DJANGO_SETTINGS_MODULE="tests.fault_settings",
        RATELIMITS_SERVER_CLUSTER="1",
    )
    port = reserved_port()
    with serve("gunicorn", gunicorn(port, workdir, WORKERS), env, workdir, port, WORKERS) as served:
        yield served
    assert_no_server_error(served)


def slot_of(identity: Identity) -> int:
    # The site's SECRET_KEY is the tests' one, so its shard key is this process's.
    keys = KeySpace(secret=get_settings().shard_key)
    return redis.cluster.key_slot(keys.of(identity).tag.encode())


def same_slot_source(identity: Identity) -> str:
    """A new client address whose keys share ``identity``'s slot."""
    slot = slot_of(identity)
    while True:
        source = new_source()
        if slot_of(Identity("ip", source)) == slot:
            return source


def test_a_slot_with_live_keys_migrates_under_load(
    cluster: RedisClusterHarness, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    slot = slot_of(LOAD)
    source = cluster.master_of(slot)
    target = next(s for s in cluster.masters if s is not source)
    counted = same_slot_source(LOAD)  # a client with 3 requests counted in the slot that moves
    assert [site.get("/api/other", source=counted).status for _ in range(3)] == [200] * 3
    for _ in range(SLOT_NEIGHBOURS):  # more live keys in the slot, so the move takes a while
        assert site.get("/api/other", source=same_slot_source(LOAD)).status == 200
    from_id, to_id = node_id(source), node_id(target)
    moved = 0
    with (
        Traffic(site, TARGETS, clients=4) as traffic,
        source.client(decode_responses=True) as old,
        target.client(decode_responses=True) as new,
    ):
        traffic.wait_for(40)
        start = time.monotonic()
        new.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", from_id)
        old.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", to_id)
        # One key at a time, slowly: requests keep arriving while the slot is split.
        while keys := old.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
            old.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(0.05)
        for conn in (new, old):
            conn.execute_command("CLUSTER", "SETSLOT", slot, "NODE", to_id)
        for master in cluster.masters:
            if master not in (source, target):
                with master.client() as other:
                    other.execute_command("CLUSTER", "SETSLOT", slot, "NODE", to_id)
        end = time.monotonic()
        outcome = observe(traffic, start, end, WORKERS)
    with capsys.disabled():
        print("\n" + outcome.line(f"cluster: slot {slot} migrated, {moved} live keys"))
    # At least a key per identity: the load's, the counted client's, the neighbours'.
    assert moved >= 2 + SLOT_NEIGHBOURS
    assert cluster.master_of(slot) is target
    assert not traffic.errors, traffic.errors[:5]
    outcome.check()
    # The counters moved with their keys: the counted client has exactly 2 requests left.
    limit_holds(site, counted, used=3)


def test_a_master_killed_under_load_fails_over_to_its_replica(
    cluster: RedisClusterHarness, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    master = cluster.master_of(slot_of(LOAD))
    replica = cluster.replica_of(master)
    log_start = site.log_size()
    with Traffic(site, TARGETS, clients=4) as traffic:
        traffic.wait_for(40)
        start = time.monotonic()
        assert master.process is not None
        master.process.send_signal(signal.SIGKILL)
        master.process.wait()
        master.stop()
        promoted = _wait_for_promotion(replica)
        outcome = observe(traffic, start, promoted, WORKERS)
        limit_holds(site, same_slot_source(LOAD))  # enforced again in the slot that failed over
    with capsys.disabled():
        print(
            "\n"
            + outcome.line(
                f"cluster: master killed, replica promoted after {promoted - start:.1f} s"
            )
        )
    assert cluster.master_of(slot_of(LOAD)) is replica
    assert not traffic.errors, traffic.errors[:5]
    outcome.check()
    assert "signal backend_failed" in site.log_since(log_start)


def _wait_for_promotion(replica: RedisServer, timeout: float = 30.0) -> float:
    """When ``replica`` became a master of a healthy cluster (``time.monotonic()``)."""
    deadline = time.monotonic() + timeout
    with replica.client(decode_responses=True) as conn:
        while time.monotonic() < deadline:
            role = conn.info("replication")["role"]
            state = str(conn.execute_command("CLUSTER", "INFO"))
            if role == "master" and "cluster_state:ok" in state:
                return time.monotonic()
            time.sleep(0.05)
    raise AssertionError(f"{replica} was not promoted within {timeout} s")
