"""Issue 12: an identity the engine denied is refused by the worker without Redis until
its retry time, on real Redis and the engine's test clock.

Each test asks what an attacker would: does a cached denial outlive a lift, a reset or
a policy edit; does rotation grow the cache; do the dashboard's counts stay true; can
a cached staff block shut staff out, or a shadow policy refuse anything.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from django.http import HttpRequest
from django.test import Client, RequestFactory
from redis.cluster import RedisCluster

from django_ratelimits import costs
from django_ratelimits.compat import get_usage, is_ratelimited
from django_ratelimits.decide import adecide
from django_ratelimits.deny_cache import BATCH_REQUESTS, BATCH_US, DenialCache, cache_for
from django_ratelimits.engine import Check, Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.denials import Denials, Tally
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders, Query
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EngineCalls

pytestmark = pytest.mark.django_db
ADDRESS = "203.0.113.9"
ME = Identity("ip", ADDRESS)


def cache() -> DenialCache:
    found = cache_for(get_engine())
    assert found is not None
    return found


def policy(**fields: Any) -> None:
    Policy.objects.create(**{"name": "api", "rates": "2/h", "path": r"^/api/", **fields})
    get_registry().refresh()


def flood(client: Client, n: int) -> list[int]:
    return [client.get("/api/hello").status_code for _ in range(n)]


def cost_from_header(request: HttpRequest) -> int:
    return int(request.META.get("HTTP_X_COST", "1"))


costs.register("priced", cost_from_header)  # the cost the test sends, under "priced"


def priced(client: Client, cost: int) -> int:
    return client.get("/api/hello", HTTP_X_COST=str(cost)).status_code


def denials(identity: Identity = ME) -> int:
    offender = Offenders().inspect(identity).detail.offender
    return 0 if offender is None else offender.denials


def test_a_denied_identity_is_refused_without_redis_until_its_retry_time(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy(algorithm="sliding_log")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 2) == [200, 200]
    frozen_clock.advance(600)
    # The first denial makes the worker read the epoch; the second is learnt under it.
    first, second = me.get("/api/hello"), me.get("/api/hello")
    assert first.status_code == second.status_code == 429
    assert first["Retry-After"] == second["Retry-After"] == "3000"
    calls = EngineCalls(monkeypatch)
    again = me.get("/api/hello")
    assert again.status_code == 429
    for header in ("Retry-After", "RateLimit", "RateLimit-Policy"):
        assert again[header] == second[header]
    frozen_clock.advance(30)
    assert me.get("/api/hello")["Retry-After"] == "2970"
    assert flood(me, 50) == [429] * 50
    assert calls.n == 0  # not one check for 52 refusals
    # An entry refuses for a minute at most (HOLD_MAX_US), then Redis is asked again.
    frozen_clock.advance(970)
    later = me.get("/api/hello")
    assert later["Retry-After"] == "2000" and later["RateLimit"] == '"api";r=0;t=2000'
    assert flood(me, 50) == [429] * 50
    assert calls.n == 1
    frozen_clock.advance(2000)  # the retry time: Redis decides again, and admits
    assert me.get("/api/hello").status_code == 200
    assert calls.n == 2


def banned_after(denials: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """My address, at a policy of 2/h that bans after ``denials`` denials: each of them
    reaches the check script (none is refused by the cache, uncounted towards the ban),
    the ban lands, and from then on the ban (a block) is refused without Redis."""
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 2) == [200, 200]
    calls = EngineCalls(monkeypatch)
    assert flood(me, denials) == [429] * denials
    assert calls.n == denials, "a denial was refused by the cache, uncounted towards the ban"
    override = Controls(get_engine()).override(ME)
    assert override is not None and override.level == 1
    assert flood(me, 50) == [429] * 50
    assert calls.n <= denials + 2  # the ban is learnt as a block (after the epoch is read)


def test_a_banning_policy_s_denials_reach_redis_and_its_ban_is_cached(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each denial must be counted towards the ban by the check script; once banned,
    the block is refused without Redis like staff's."""
    policy(ban_after=5, ban_within="1h", ban_for="1h")
    banned_after(5, monkeypatch)


def test_a_ban_lands_though_another_policy_of_the_identity_is_denied_from_the_cache(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two policies count the address in one check: "api" bans after 3 denials, "site"
    does not, and both run out together. The cached denial of "site" must not answer
    for the check, else no later denial reaches the script that counts them towards
    "api"'s ban (a review found 10 denials and no ban)."""
    policy(ban_after=3, ban_within="1h", ban_for="1h")
    policy(name="site")
    banned_after(3, monkeypatch)


def test_a_costly_denial_never_refuses_a_cheaper_request_redis_would_admit(
    frozen_clock: FakeClock,
) -> None:
    """A token bucket of 10/m (a token every 6 s), emptied: a request of cost 5 is
    denied for 30 s. 7 s later a token is back, and Redis admits a request of cost 1:
    the cache must not refuse it for 23 s more."""
    policy(name="priced", rates="10/m", algorithm="token_bucket")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert priced(me, 10) == 200
    # The first denial makes the worker read the epoch; the second is learnt under it.
    assert [priced(me, 5), priced(me, 5)] == [429, 429]
    frozen_clock.advance(7)
    cheap = me.get("/api/hello", HTTP_X_COST="1")
    assert cheap.status_code == 200, f"refused, Retry-After {cheap.get('Retry-After')}"


def test_a_denial_refuses_requests_that_cost_as_much_or_more_without_redis(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that cost the same (a policy's cost) or more are refused from the cache
    until the retry time, as Redis would; one that costs less is asked of Redis."""
    policy(name="priced", rates="10/m", algorithm="token_bucket")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert priced(me, 8) == 200  # 2 tokens left: a request of 5 is denied with quota left
    assert [priced(me, 5), priced(me, 5)] == [429, 429]
    calls = EngineCalls(monkeypatch)
    frozen_clock.advance(6)  # 3 tokens
    assert [priced(me, 5), priced(me, 9), priced(me, 10)] == [429] * 3
    assert calls.n == 0
    assert priced(me, 3) == 200  # Redis admits it: the cache did not answer
    assert calls.n == 1
    # A denial of cost 1 refuses every cost, until a token is back.
    assert [priced(me, 1), priced(me, 1), priced(me, 4)] == [429] * 3
    assert calls.n == 2
    frozen_clock.advance(6)
    assert priced(me, 1) == 200


def test_other_clients_are_not_refused_by_someone_else_s_denial(frozen_clock: FakeClock) -> None:
    policy(rates="1/h")
    assert flood(Client(REMOTE_ADDR=ADDRESS), 5) == [200, 429, 429, 429, 429]
    assert flood(Client(REMOTE_ADDR="203.0.113.10"), 2) == [200, 429]


def test_the_offender_count_is_the_true_count_after_a_batch(frozen_clock: FakeClock) -> None:
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    n = 1000
    statuses = flood(me, n + 1)
    assert statuses == [200] + [429] * n
    # Batches of BATCH_REQUESTS went as they filled: fewer than that are pending.
    assert n - BATCH_REQUESTS < denials() <= n
    frozen_clock.advance(BATCH_US / 1e6)  # the oldest pending refusal is a batch's age
    flood(me, 1)
    assert denials() == n + 1
    detail = Offenders().inspect(ME).detail
    assert detail.offender is not None and detail.offender.by_policy == {"api": n + 1}
    # Who was behind the refused requests is kept too: the newest entries, as the list keeps.
    assert len(detail.hits) == get_engine().metadata_max_entries
    assert all(h.denied and h.policies == (("api", "D"),) for h in detail.hits)
    assert {h.who for h in detail.hits} == {"user:-"}


def test_a_request_refused_by_denials_learnt_at_two_times_counts_once(
    frozen_clock: FakeClock,
) -> None:
    Policy.objects.create(name="a", rates="1/h", path=r"^/api/hello")
    Policy.objects.create(name="b", rates="3/h", path=r"^/api/")
    get_registry().refresh()
    me = Client(REMOTE_ADDR=ADDRESS)
    # a denies twice (the second is learnt); ten seconds later b denies, learnt too.
    assert [me.get("/api/hello").status_code for _ in range(3)] == [200, 429, 429]
    frozen_clock.advance(10)
    assert [me.get("/api/other").status_code for _ in range(3)] == [200, 200, 429]
    assert denials() == 3
    assert me.get("/api/hello").status_code == 429  # both cached: refused without Redis
    cache().flush()
    offender = Offenders().inspect(ME).detail.offender
    assert offender is not None and offender.denials == 4  # one request, counted once
    assert offender.by_policy == {"a": 3, "b": 2}


def test_a_lift_reaches_the_worker_within_policy_refresh(frozen_clock: FakeClock) -> None:
    policy(rates="100/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    Offenders().block(ME, 3600)
    assert flood(me, 3) == [429] * 3  # the block, cached until its end
    assert len(cache()) == 1
    # The lift as another process's offenders service makes it: the override, the epoch.
    Controls(get_engine()).lift(ME)
    Denials(get_engine()).bump()
    assert me.get("/api/hello").status_code == 429  # POLICY_REFRESH has not passed yet
    frozen_clock.advance(2)  # POLICY_REFRESH: the worker reads the new epoch
    assert me.get("/api/hello").status_code == 200
    assert len(cache()) == 0


def test_a_lift_in_this_process_applies_at_once(frozen_clock: FakeClock) -> None:
    policy(rates="100/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    Offenders().block(ME, 3600)
    assert flood(me, 3) == [429] * 3
    Offenders().lift(ME)
    assert me.get("/api/hello").status_code == 200


@pytest.mark.parametrize("forget", [True, False])
def test_a_reset_reaches_the_worker_and_a_new_record_gets_no_denial_from_before(
    frozen_clock: FakeClock, forget: bool
) -> None:
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 11) == [200] + [429] * 10  # 2 denials in Redis, 8 pending
    Offenders().reset(ME, forget=forget)  # this process reads the new epoch at once
    frozen_clock.advance(0.5)
    assert flood(me, 2) == [200, 429]  # counted afresh: a new record if forgotten
    frozen_clock.advance(0.5)
    assert me.get("/api/hello").status_code == 429  # refused here; the batch is due
    # The 8 from before the reset go only to the record they belong to: the kept one,
    # never the one started after the reset; the refusal just made goes to either.
    assert denials() == (1 + 1 if forget else 2 + 8 + 1 + 1)


def test_a_policy_edit_is_not_refused_by_the_old_limits(frozen_clock: FakeClock) -> None:
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 3) == [200, 429, 429]
    edited = Policy.objects.get(name="api")
    edited.rates = "10/h"
    edited.save()
    get_registry().refresh()
    assert me.get("/api/hello").status_code == 200


def test_rotating_identities_never_grow_the_cache_past_its_bound(
    frozen_clock: FakeClock,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.DJANGO_RATELIMITS = {**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": 20}
    policy(rates="1/h", key="header", key_arg="X-Key", identity_budget="off")
    sizes = []
    for n in range(100):
        client = Client(headers={"X-Key": f"k{n}"})
        assert flood(client, 3) == [200, 429, 429]
        sizes.append(len(cache()))
    assert max(sizes) == 20 == cache().size
    # The newest are kept, the oldest went first.
    assert Client(headers={"X-Key": "k99"}).get("/api/hello").status_code == 429
    calls = EngineCalls(monkeypatch)
    assert Client(headers={"X-Key": "k0"}).get("/api/hello").status_code == 429
    assert calls.n == 1  # evicted: Redis denies it again


def test_zero_turns_the_cache_off(
    frozen_clock: FakeClock,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.DJANGO_RATELIMITS = {**settings.DJANGO_RATELIMITS, "DENIAL_CACHE": 0}
    policy(rates="1/h")
    assert cache_for(get_engine()) is None
    calls = EngineCalls(monkeypatch)
    assert flood(Client(REMOTE_ADDR=ADDRESS), 5) == [200] + [429] * 4
    assert calls.n == 5


def test_shadow_denials_are_never_cached(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy(rates="1/h", mode="shadow")
    calls = EngineCalls(monkeypatch)
    assert flood(Client(REMOTE_ADDR=ADDRESS), 5) == [200] * 5
    assert calls.n == 5
    assert len(cache_for(get_engine()) or ()) == 0


def test_a_cached_block_never_shuts_staff_out_of_admin(
    frozen_clock: FakeClock, admin_user: Any
) -> None:
    Policy.objects.create(name="all", rates="1000/h", key="ip", path="^/")
    get_registry().refresh()
    me = Client(REMOTE_ADDR=ADDRESS)
    me.force_login(admin_user)
    Offenders().block(ME, 3600)
    assert flood(me, 2) == [429, 429]  # cached
    assert me.get("/admin/").status_code == 200  # the way back: the block does not decide
    assert me.get("/api/hello").status_code == 429


def test_the_async_path_answers_from_the_cache_too(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy(rates="1/h")
    spec = get_registry().get("api")
    assert spec is not None
    request = RequestFactory().get("/api/hello", REMOTE_ADDR=ADDRESS)

    async def decide_many(n: int) -> list[bool]:
        return [(await adecide(request, [spec])).blocked() for _ in range(n)]

    assert asyncio.run(decide_many(3)) == [False, True, True]  # the 2nd is learnt
    calls = EngineCalls(monkeypatch)
    assert asyncio.run(decide_many(20)) == [True] * 20
    assert calls.n == 0


def test_a_batch_never_creates_a_record_nor_grows_the_index(frozen_clock: FakeClock) -> None:
    # Forged or stale: an identity never denied, whatever the batch claims.
    stranger = Identity("ip", "198.51.100.77")
    tally = Tally(requests=10**6)
    tally.policies["api"] = 10**6
    Denials(get_engine()).record({(stranger, 2**62): tally})
    assert Offenders().inspect(stranger).detail.offender is None


def test_a_redis_restart_empties_every_cache(
    site_redis: redis.Redis | RedisCluster, frozen_clock: FakeClock
) -> None:
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 3) == [200, 429, 429]
    if isinstance(site_redis, RedisCluster):
        site_redis.flushall(target_nodes=RedisCluster.PRIMARIES)
    else:
        site_redis.flushall()  # as a restart without persistence leaves it
    frozen_clock.advance(2)
    assert me.get("/api/hello").status_code == 200


def test_the_batch_rule_is_what_the_docs_say() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "flood.md").read_text()
    assert f"{BATCH_REQUESTS} refusals" in text and f"{BATCH_US // 1_000_000} second" in text


def test_the_compat_layer_answers_from_the_cache_as_redis_did(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = {"group": "g", "key": "ip", "rate": "1/h", "increment": True}
    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    usages = [get_usage(request, **options) for _ in range(3)]  # the 3rd is learnt
    calls = EngineCalls(monkeypatch)
    cached = get_usage(request, **options)
    assert calls.n == 0
    assert cached == usages[2] == {"count": 1, "limit": 1, "should_limit": True, "time_left": 3600}
    # A peek is answered from the cache too, but is no refusal: it is not counted.
    assert is_ratelimited(request, **{**options, "increment": False})
    assert denials() == 2 + 1  # Redis' two, and the one refused from the cache


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)  # stops the server
def test_a_redis_failure_drops_cached_denials_so_policies_fail_open_as_before(
    site_redis: redis.Redis | RedisCluster, frozen_clock: FakeClock, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("redis_standalone")
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 3) == [200, 429, 429]
    server.stop()
    try:
        assert me.get("/api/hello").status_code == 429  # nothing sent: the answer stands
        # The first call that fails (anyone's) drops the cache: fail open, as before.
        assert Client(REMOTE_ADDR="203.0.113.10").get("/api/hello").status_code == 200
        assert len(cache()) == 0
        assert flood(me, 3) == [200] * 3
    finally:
        server.start()


def test_a_slow_epoch_read_never_puts_back_the_epoch_of_before_a_reset(
    frozen_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request's read of the epoch is in flight, slow, from before staff's reset in
    # this process; the reset's own read must end last, and an answer sent before the
    # reset must not be learnt: else the identity just reset is refused here without
    # Redis. Meanwhile another request goes on without reading, and without waiting.
    policy(rates="1/h")
    worker, engine = cache(), get_engine()
    worker.read_epoch()
    checks = [Check(ME, get_registry().get("api").limits)]
    crossed = worker.sending(checks)  # a call sent before the reset
    engine.check(checks)
    denied = engine.check(checks)
    assert not denied.allowed
    real, reads = worker.denials.epoch, []
    read, go_on = threading.Event(), threading.Event()

    def slow() -> int:
        reads.append(threading.current_thread().name)
        epoch = real()
        if threading.current_thread().name == "request":
            read.set()
            go_on.wait(30)
        return epoch

    monkeypatch.setattr(worker.denials, "epoch", slow)
    request = threading.Thread(target=worker.read_epoch, name="request")
    request.start()
    assert read.wait(30)
    worker.read_epoch()  # another request: the read in flight is enough
    assert reads == ["request"]
    staff = threading.Thread(target=Offenders().reset, args=(ME,), name="staff")
    staff.start()
    staff.join(0.2)
    assert staff.is_alive()  # its read waits for the one in flight
    go_on.set()
    request.join(30)
    staff.join(30)
    assert reads == ["request", "staff"]
    worker.learn(denied, frozenset({"api"}), crossed)
    assert worker.refuse(checks, count=False) is None
    assert engine.check(checks).allowed  # the reset holds in Redis


def test_refusals_made_here_keep_their_own_time_in_the_record(frozen_clock: FakeClock) -> None:
    # Refused here at T, recorded only when a page is opened 30 minutes later: the
    # record's last denial is T, so the identity is not among the last 5 minutes'.
    policy(rates="1/h")
    me = Client(REMOTE_ADDR=ADDRESS)
    assert flood(me, 5) == [200, 429, 429, 429, 429]
    assert cache()._pending_requests > 0  # refused here, not recorded yet
    refused_at = frozen_clock.now_us() // 1000
    frozen_clock.advance(30 * 60)
    assert Offenders().listing(Query(period=300)).total == 0
    offender = Offenders().inspect(ME).detail.offender
    assert offender is not None and offender.denials == 4
    assert offender.last_ms - refused_at <= 1000  # its time, as well as the worker knows it
    assert [r.offender.ident for r in Offenders().listing(Query(period=3600)).rows] == [
        f"ip:{ADDRESS}"
    ]


def test_a_worker_forked_during_an_epoch_read_reads_the_epoch_and_records_nothing_twice(
    frozen_clock: FakeClock,
) -> None:
    # A pre-forking server forks while a thread of the parent reads the epoch, with
    # refusals pending: the child must be able to read the epoch (the parent's read
    # never ends in it), and must not record the parent's pending refusals again.
    policy(rates="1/h")
    assert flood(Client(REMOTE_ADDR=ADDRESS), 5) == [200, 429, 429, 429, 429]
    worker = cache()
    assert worker._pending_requests > 0
    assert worker._reading.acquire()  # a read in flight in the parent
    try:
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only
            ok = worker._reading.acquire(blocking=False) and worker._pending_requests == 0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        worker._reading.release()
    assert os.waitstatus_to_exitcode(status) == 0
