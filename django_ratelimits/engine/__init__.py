"""The Redis side of django-ratelimits.

>>> engine = Engine(redis.Redis())
>>> ip, user = Identity("ip", "203.0.113.7"), Identity("user", "42")
>>> limits = [Limit("api", rate) for rate in parse_rates("10/s, 120/m, 240/h")]
>>> decision = engine.check([Check(ip, limits), Check(user, limits)])
>>> decision.allowed, decision.retry_after

Later layers (middleware, decorators, DRF, dashboard) all go through here.
"""

from __future__ import annotations

from django_ratelimits.engine.core import Clock, Engine
from django_ratelimits.engine.decision import Decision, LimitResult
from django_ratelimits.engine.keys import KeySpace
from django_ratelimits.engine.limits import Algorithm, Check, Identity, Limit

__all__ = [
    "Algorithm",
    "Check",
    "Clock",
    "Decision",
    "Engine",
    "Identity",
    "KeySpace",
    "Limit",
    "LimitResult",
]
