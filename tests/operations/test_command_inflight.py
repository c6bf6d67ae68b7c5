"""``manage.py ratelimits reset`` frees the concurrency slots an identity holds."""

from __future__ import annotations

from django_ratelimits.engine import Check, Engine, Identity
from django_ratelimits.policies import current
from tests.operations.test_command import engine, policy, run

__all__ = ["engine"]  # the fixture, shared with the command's other tests


def test_reset_frees_the_slots_an_identity_holds(engine: Engine) -> None:
    policy(name="uploads", algorithm="concurrency", rates="2", key="ip")
    uploads = current().get("uploads")
    assert uploads is not None
    ip = Identity("ip", "192.0.2.77")
    held = [engine.check([Check(ip, uploads.limits)]) for _ in range(3)]
    assert [d.allowed for d in held] == [True, True, False]

    assert "counters reset under uploads" in run("reset", "ip:192.0.2.77", "--policy", "uploads")
    assert engine.peek([Check(ip, uploads.limits)]).results[0].remaining == 2
    assert engine.check([Check(ip, uploads.limits)]).allowed
