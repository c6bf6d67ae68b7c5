"""Checks that ask Redis: does it answer (W002), is it a cluster node asked as a
standalone server or the reverse (E011), would it refuse writes once full (W003).

Each question waits at most :data:`PING_TIMEOUT` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import redis
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from django_ratelimits.checks.common import REDIS_TAG, TAG, valid_settings
from django_ratelimits.conf import SETTING_NAME, RateLimitSettings, RedisServer
from django_ratelimits.engine.connection import RedisClient, bounded, get_redis
from django_ratelimits.engine.memory import RECOMMENDED, NodeMemory, memory_of, node_routes
from django_ratelimits.engine.topology import cluster_enabled, cluster_enabled_at

PING_TIMEOUT: Final = 0.5
"""Seconds the Redis check waits for PING, whatever the configured socket timeouts."""


@register(REDIS_TAG)
def check_redis(**kwargs: Any) -> list[CheckMessage]:
    """W002: Redis does not answer PING. E011: the client kind does not match the server
    (asked in the same thread, so a hung Redis costs the two one wait)."""
    config = valid_settings()
    if config is None or not config.enabled:
        return []
    nodes, problem = _ask(config, "PING", _ping_and_cluster_nodes)
    if nodes:
        return [_cluster_as_standalone(config, nodes)]
    if problem is None:
        return []
    if _not_a_cluster(config, problem):
        return [
            Error(
                f"{SETTING_NAME}['REDIS'] sets CLUSTER: True, but the server at its URL is "
                "not in cluster mode (cluster_enabled:0): no cluster client can be made, so "
                "every check fails and policies fail open (fail-closed ones refuse every "
                "request).",
                hint=f"Remove CLUSTER from {SETTING_NAME}['REDIS'], or give it the URL of a "
                "node of your Redis Cluster. See docs/configuration.md.",
                id="django_ratelimits.E011",
            )
        ]
    return [
        Warning(
            f"Redis does not answer: {problem.rstrip('.')}. Until it does, policies fail open "
            "(requests pass unlimited) and fail-closed policies refuse requests.",
            hint=f"Start Redis or fix {SETTING_NAME}['REDIS']. Skip this check with "
            f"'manage.py check --tag {TAG}'.",
            id="django_ratelimits.W002",
        )
    ]


def _ping_and_cluster_nodes(client: RedisClient) -> list[str]:
    """PING; then the address of a standalone client's server if that server is a
    cluster node (``[]`` if it is not, or will not say)."""
    client.ping()
    if not isinstance(client, redis.Redis) or not cluster_enabled(client):
        return []
    return [address for address, _, _ in node_routes(client)]


def _cluster_as_standalone(config: RateLimitSettings, nodes: list[str]) -> CheckMessage:
    if isinstance(config.redis, RedisServer):
        fix = (
            f"Set {SETTING_NAME}['REDIS'] = {{'URL': <the same URL>, 'CLUSTER': True}}: "
            "the cluster client reads the slot map and sends each key to its node."
        )
    else:
        fix = (
            f"A django-redis cache talks to one server: set {SETTING_NAME}['REDIS'] = "
            "{'URL': 'redis://<a node of the cluster>', 'CLUSTER': True} instead of the "
            "cache alias."
        )
    return Error(
        f"Redis {', '.join(nodes)} is a Redis Cluster node (cluster_enabled:1), but "
        f"{SETTING_NAME}['REDIS'] does not set CLUSTER: True, so it is asked as a "
        "standalone server: every key whose slot another node serves gets MOVED, that "
        "check fails and policies fail open. Most identities are never limited, while "
        "PING answers.",
        hint=f"{fix} See docs/configuration.md.",
        id="django_ratelimits.E011",
    )


def _not_a_cluster(config: RateLimitSettings, problem: str) -> bool:
    """Whether ``CLUSTER: True`` failed because its server is not in cluster mode: asked
    with a standalone client, only when the cluster client failed at once (a hung
    server has had its wait)."""
    target = config.redis
    if not isinstance(target, RedisServer) or not target.cluster or problem.startswith(_LATE):
        return False
    options = {**bounded(config), **target.options}
    enabled, _ = _within("INFO cluster", lambda: cluster_enabled_at(target.url, options))
    return enabled is False


_T = TypeVar("_T")


def _ask(
    config: RateLimitSettings, what: str, question: Callable[[RedisClient], _T]
) -> tuple[_T | None, str | None]:
    """``(answer, None)``, or ``(None, why there is none)``; ``(None, None)`` when
    the client cannot be made (E003 reports it). Waits at most :data:`PING_TIMEOUT`.

    The client may be a cache's, with that cache's (maybe unbounded) timeouts,
    so the question runs in a daemon thread that is abandoned if it is late.
    """
    return _within(what, lambda: question(get_redis(config)))


_LATE: Final = "no answer to "


def _within(what: str, question: Callable[[], _T]) -> tuple[_T | None, str | None]:
    """:func:`_ask`'s answer of ``question()``, asked in a daemon thread."""
    outcome: list[tuple[_T | None, str | None]] = []

    def ask() -> None:
        try:
            outcome.append((question(), None))
        except ImproperlyConfigured:
            outcome.append((None, None))
        except Exception as error:  # whatever the client raises, the answer is "no"
            outcome.append((None, f"{type(error).__name__}: {error}"))

    thread = threading.Thread(target=ask, name="django_ratelimits-check-redis", daemon=True)
    thread.start()
    thread.join(PING_TIMEOUT)
    if not outcome:
        return None, f"{_LATE}{what} within {PING_TIMEOUT} s"
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
