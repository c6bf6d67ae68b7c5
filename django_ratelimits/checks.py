"""System checks (``manage.py check``) and a one-time hint about proxies.

Configuration checks carry the tag :data:`TAG`; the check that pings Redis
carries :data:`REDIS_TAG`, so ``manage.py check`` (and ``runserver``,
``migrate``) run both, and ``manage.py check --tag ratelimits`` only the
configuration ones.

========================  =========================================================
``E001``                  ``RateLimitMiddleware`` comes before ``AuthenticationMiddleware``
``E002``                  ``DJANGO_RATELIMITS`` is invalid
``E003``                  ``REDIS`` names no usable django-redis cache
``E004``                  ``TRUSTED_PROXIES`` trusts every address
``E008``                  a policy names a key function that is not allowed (one per policy)
``W001``                  the app is installed but ``RateLimitMiddleware`` is not
``W002``                  Redis does not answer PING within half a second
========================  =========================================================

:func:`warn_if_behind_proxy` is the runtime half: whether a proxy sits in
front of the site can only be seen on a request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, router
from django.urls import get_resolver
from django.utils.module_loading import import_string

from django_ratelimits import key_functions
from django_ratelimits.conf import SETTING_NAME, RateLimitSettings, RedisServer, get_settings
from django_ratelimits.engine.connection import get_redis
from django_ratelimits.spec import KeyKind

if TYPE_CHECKING:  # identity calls warn_if_behind_proxy: no import back at run time
    from django_ratelimits.identity import IPAddress, IPNetwork

__all__ = ["PING_TIMEOUT", "REDIS_TAG", "TAG", "warn_if_behind_proxy"]

logger = logging.getLogger("django_ratelimits")

TAG: Final = "ratelimits"
REDIS_TAG: Final = "ratelimits_redis"
PING_TIMEOUT: Final = 0.5
"""Seconds the Redis check waits for PING, whatever the configured socket timeouts."""

RATELIMIT_MIDDLEWARE: Final = "django_ratelimits.middleware.RateLimitMiddleware"
AUTH_MIDDLEWARE: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"


def _position(middleware: Sequence[str], target: str) -> int | None:
    """Index of the first entry that is ``target`` or a subclass of it."""
    target_class = import_string(target)
    for index, path in enumerate(middleware):
        try:
            candidate = import_string(path)
        except ImportError:
            continue  # Django reports a broken MIDDLEWARE entry itself
        if isinstance(candidate, type) and issubclass(candidate, target_class):
            return index
    return None


@register(TAG)
def check_middleware(**kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or ())
    ours = _position(middleware, RATELIMIT_MIDDLEWARE)
    if ours is None:
        return [
            Warning(
                "RateLimitMiddleware is not in MIDDLEWARE: policies with a path pattern "
                "are not enforced, only views decorated with @ratelimit are.",
                hint=f"Add {RATELIMIT_MIDDLEWARE!r} after {AUTH_MIDDLEWARE!r}, or silence "
                "this check (SILENCED_SYSTEM_CHECKS) if the site only uses decorators.",
                id="django_ratelimits.W001",
            )
        ]
    auth = _position(middleware, AUTH_MIDDLEWARE)
    if auth is not None and ours < auth:
        return [
            Error(
                "RateLimitMiddleware comes before AuthenticationMiddleware: policies that "
                "count by user, and staff or superuser exemptions, would see no user.",
                hint=f"Move {RATELIMIT_MIDDLEWARE!r} below {AUTH_MIDDLEWARE!r} in MIDDLEWARE.",
                id="django_ratelimits.E001",
            )
        ]
    return []


def _settings() -> RateLimitSettings | None:
    """The validated settings, or None when they are invalid (E002 says why)."""
    try:
        return get_settings()
    except ImproperlyConfigured:
        return None


@register(TAG)
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    try:
        config = get_settings()
    except ImproperlyConfigured as error:
        return [
            Error(
                str(error),
                hint=f"See docs/configuration.md for every key of {SETTING_NAME}.",
                id="django_ratelimits.E002",
            )
        ]
    if isinstance(config.redis, RedisServer):
        return []  # a URL is fully checked by conf; reaching it is W002's business
    try:
        get_redis(config)  # makes the cache's client; does not touch the network
    except ImproperlyConfigured as error:
        return [
            Error(
                str(error),
                hint=f"Set {SETTING_NAME}['REDIS'] to the alias of a django-redis cache "
                "or to a redis:// URL.",
                id="django_ratelimits.E003",
            )
        ]
    return []


@register(TAG)
def check_trusted_proxies(**kwargs: Any) -> list[CheckMessage]:
    config = _settings()
    if config is None:
        return []
    everything = [str(n) for n in config.trusted_proxies if n.prefixlen == 0]
    if not everything:
        return []
    return [
        Error(
            f"{SETTING_NAME}['TRUSTED_PROXIES'] contains {', '.join(everything)}, which "
            f"trusts every address: any client can choose its own address with "
            f"{config.client_ip_header} and escape every limit.",
            hint="List only the addresses or networks of your own proxies and load "
            "balancers, e.g. ['10.0.0.0/8'] or ['127.0.0.1'].",
            id="django_ratelimits.E004",
        )
    ]


@register(TAG)
def check_key_functions(
    *, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Every policy row whose key function is not allowed: it is never called.

    Reads the database, so, as Django's own database checks, only when asked
    to (``manage.py check --database default``, ``migrate``, the test runner).
    """
    from django_ratelimits.models import Policy  # models are not ready when this is imported

    if _settings() is None or router.db_for_read(Policy) not in (databases or ()):
        return []
    _import_urlconf()
    try:
        rows = list(Policy.objects.filter(key=KeyKind.CALLABLE).order_by("name"))
    except DatabaseError:  # no table before the first migrate: no rows to check
        return []
    return [
        Error(
            f"Rate-limit policy {row.name!r} names the key function {row.key_arg!r}, which "
            f"{SETTING_NAME}['KEY_FUNCTIONS'] does not list and no @ratelimit names: it is "
            "never called, and the policy counts by client IP instead.",
            hint=f"If the function is meant to count requests, add it to "
            f"{SETTING_NAME}['KEY_FUNCTIONS']; otherwise choose an allowed one in admin.",
            obj=row,
            id="django_ratelimits.E008",
        )
        for row in rows
        if not key_functions.is_allowed(row.key_arg)
    ]


def _import_urlconf() -> None:
    """Import ``ROOT_URLCONF``, so every ``@ratelimit`` has named its key function."""
    try:
        get_resolver().url_patterns  # noqa: B018  (imports the URLconf modules)
    except Exception:  # a broken URLconf is Django's own check's to report
        return


@register(REDIS_TAG)
def check_redis(**kwargs: Any) -> list[CheckMessage]:
    config = _settings()
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
    """Why PING failed, or None. Waits at most :data:`PING_TIMEOUT` seconds.

    The client may be a cache's, with that cache's (maybe unbounded) timeouts,
    so the PING runs in a daemon thread that is abandoned if it is late.
    """
    outcome: list[str | None] = []

    def ping() -> None:
        try:
            get_redis(config).ping()
        except ImproperlyConfigured:
            outcome.append(None)  # E003 reports it
        except Exception as error:  # whatever the client raises, the answer is "no"
            outcome.append(f"{type(error).__name__}: {error}")
        else:
            outcome.append(None)

    thread = threading.Thread(target=ping, name="django_ratelimits-check-ping", daemon=True)
    thread.start()
    thread.join(PING_TIMEOUT)
    if not outcome:
        return f"no answer to PING within {PING_TIMEOUT} s"
    return outcome[0]


# --------------------------------------------------------------------------- runtime hint

_peer_settled = False


def warn_if_behind_proxy(peer: IPAddress, trusted_proxies: Sequence[IPNetwork]) -> None:
    """Log once per process if the site seems to sit behind an untrusted proxy.

    Called with each request's ``REMOTE_ADDR``. When ``TRUSTED_PROXIES`` is
    empty and that peer is not a public address (private, loopback, shared
    carrier-grade NAT...), the peer is most likely a proxy or load balancer, so
    every client shares its one identity and limits trip for everyone at once.
    Settles (and costs nothing more) after the first warning or the first
    public peer; silent when ``DEBUG``.
    """
    global _peer_settled
    if _peer_settled or trusted_proxies:
        return
    if peer.is_global:
        _peer_settled = True  # clients reach the site directly
        return
    _peer_settled = True
    if settings.DEBUG:
        return
    logger.warning(
        "REMOTE_ADDR is %s, not a public address, and %s['TRUSTED_PROXIES'] is empty: if the "
        "site is behind a proxy or load balancer, every client counts as that one address. "
        "List your proxies in TRUSTED_PROXIES (see docs/deployment.md).",
        peer,
        SETTING_NAME,
    )
