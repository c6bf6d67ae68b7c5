"""What staff's reset under every policy clears and keeps, on real Redis: every counter
the identity's state holds (the compat layer's, a deleted policy's), never its override
or its TTL horizon; a reset under one policy leaves the others' counters."""

from __future__ import annotations

from typing import Any

import pytest

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry

pytestmark = pytest.mark.django_db
ME = Identity("ip", "203.0.113.9")


def test_every_reset_clears_every_counter_and_keeps_the_override(site_redis: Any) -> None:
    engine = get_engine()
    key = engine.keys.of(ME).state
    Controls(engine).block(ME, 300)
    fields = {f"fw|1|{n}|1|p{n}": "1" for n in range(2500)}  # more than one HDEL's worth
    fields["!ban|gone"] = "3"
    fields["plain"] = "kept"  # no '|': no field the package writes
    site_redis.hset(key, mapping=fields)
    Offenders().reset(ME)
    assert set(site_redis.hgetall(key)) == {b"x", b"t", b"plain"}
    assert Controls(engine).override(ME) is not None  # the block stays in force


def test_a_reset_under_one_policy_leaves_the_others_and_every_policy_deletes_the_hash(
    site_redis: Any,
) -> None:
    key = get_engine().keys.of(ME).state
    site_redis.hset(key, mapping={"fw|1|1|1|compat": "1", "t": "9999999999999"})
    Policy.objects.create(name="api", rates="2/h", path=r"^/api/")
    get_registry().refresh()
    Offenders().reset(ME, "api")
    assert site_redis.hexists(key, "fw|1|1|1|compat")
    Offenders().reset(ME)
    assert not site_redis.exists(key)  # nothing but the horizon was left
