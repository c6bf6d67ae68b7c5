"""Checks that ask Redis: does it answer (W002), would it refuse writes once full (W003).

Each question waits at most :data:`PING_TIMEOUT` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from django.core.checks import CheckMessage, Warning, register
from django.core.exceptions import ImproperlyConfigured

from django_ratelimits.checks.common import REDIS_TAG, TAG, valid_settings
from django_ratelimits.conf import SETTING_NAME, RateLimitSettings
from django_ratelimits.engine.connection import RedisClient, get_redis
from django_ratelimits.engine.memory import RECOMMENDED, NodeMemory, memory_of

PING_TIMEOUT: Final = 0.5
"""Seconds the Redis check waits for PING, whatever the configured socket timeouts."""


@register(REDIS_TAG)
def check_redis(**kwargs: Any) -> list[CheckMessage]:
    config = valid_settings()
    if config is None or not config.enabled:
        return []
    problem = _ping(config)
    if problem is None:
        return []
    return [
        Warning(
            f"Redis does not answer: {problem.rstrip('.')}. Until it does, policies fail open "
            "(requests pass unlimited) and fail-closed policies refuse requests.",
            hint=f"Start Redis or fix {SETTING_NAME}['REDIS']. Skip this check with "
            f"'manage.py check --tag {TAG}'.",
            id="django_ratelimits.W002",
        )
    ]


def _ping(config: RateLimitSettings) -> str | None:
    """Why PING failed, or None. Waits at most :data:`PING_TIMEOUT` seconds."""
    return _ask(config, "PING", lambda client: client.ping())[1]


_T = TypeVar("_T")


def _ask(
    config: RateLimitSettings, what: str, question: Callable[[RedisClient], _T]
) -> tuple[_T | None, str | None]:
    """``(answer, None)``, or ``(None, why there is none)``; ``(None, None)`` when
    the client cannot be made (E003 reports it). Waits at most :data:`PING_TIMEOUT`.

    The client may be a cache's, with that cache's (maybe unbounded) timeouts,
    so the question runs in a daemon thread that is abandoned if it is late.
    """
    outcome: list[tuple[_T | None, str | None]] = []

    def ask() -> None:
        try:
            outcome.append((question(get_redis(config)), None))
        except ImproperlyConfigured:
            outcome.append((None, None))
        except Exception as error:  # whatever the client raises, the answer is "no"
            outcome.append((None, f"{type(error).__name__}: {error}"))

    thread = threading.Thread(target=ask, name="django_ratelimits-check-redis", daemon=True)
    thread.start()
    thread.join(PING_TIMEOUT)
    if not outcome:
        return None, f"no answer to {what} within {PING_TIMEOUT} s"
    return outcome[0]


# --------------------------------------------------------------------------- eviction (W003)


@register(REDIS_TAG, deploy=True)
def check_eviction_policy(**kwargs: Any) -> list[CheckMessage]:
    """A Redis that refuses writes once full turns limiting off: a flood of new
    identities fills it, every check fails, and policies fail open."""
    config = valid_settings()
    if config is None or not config.enabled:
        return []
    nodes, _ = _ask(config, "INFO memory", memory_of)  # unreachable: W002 says so
    failing = [n for n in nodes or () if n.fails_writes]
    unread = [n for n in nodes or () if n.policy is None]
    found: list[CheckMessage] = []
    if failing:
        found.append(
            Warning(
                f"Redis {_addresses(failing)} has a maxmemory and maxmemory-policy noeviction: "
                "once full it refuses every write, so every check fails and policies fail "
                "open (requests pass unlimited; fail-closed policies refuse all). A flood of "
                "new identities is enough to fill it.",
                hint=f"Set maxmemory-policy {RECOMMENDED} (CONFIG SET and redis.conf): every "
                "key django-ratelimits writes has a TTL, so Redis can always make room, and "
                "LRU evicts one-off identities before the counters in use. See "
                "docs/deployment.md.",
                id="django_ratelimits.W003",
            )
        )
    if unread:
        reasons = "; ".join(f"{n.address}: {n.error}" for n in unread)
        found.append(
            Warning(
                f"Could not read Redis' maxmemory-policy ({reasons}). If it is noeviction "
                "with a maxmemory, a full Redis refuses writes and policies fail open.",
                hint=f"Check it where your Redis provider shows it and use {RECOMMENDED}; "
                "then silence django_ratelimits.W003, or let the limiter's Redis user run "
                "INFO or CONFIG GET.",
                id="django_ratelimits.W003",
            )
        )
    return found


def _addresses(nodes: Sequence[NodeMemory]) -> str:
    return ", ".join(n.address for n in nodes)
