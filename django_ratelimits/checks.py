"""System checks (``manage.py check``) and a one-time hint about proxies.

Configuration checks carry the tag :data:`TAG`; the check that pings Redis
carries :data:`REDIS_TAG`, so ``manage.py check`` (and ``runserver``,
``migrate``) run both, and ``manage.py check --tag ratelimits`` only the
configuration ones.

========================  =========================================================
``E001``                  ``RateLimitMiddleware`` comes before ``AuthenticationMiddleware``
``E002``                  ``DJANGO_RATELIMITS`` is invalid
``E003``                  ``REDIS`` gives no usable client (a decoding one among them)
``E004``                  ``TRUSTED_PROXIES`` trusts every address
``E005``                  a policy row's path pattern is one RE2 refuses
``E006``                  code names a policy that does not exist
``E007``                  a django-ratelimit setting that ``compat`` does not honour
``E008``                  a policy names a key function that is not allowed (one per policy)
``W001``                  the app is installed but ``RateLimitMiddleware`` is not
``W002``                  Redis does not answer PING within half a second
``W003``                  (``--deploy``) a full Redis would refuse writes, or its
                          ``maxmemory-policy`` could not be read
``W004``                  the policy table cannot be read, so E006 cannot tell
========================  =========================================================

:func:`warn_if_behind_proxy` is the runtime half: whether a proxy sits in
front of the site can only be seen on a request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import router
from django.urls import get_resolver
from django.utils.module_loading import import_string

from django_ratelimits import key_functions
from django_ratelimits.conf import (
    SETTING_NAME,
    InvalidSettings,
    RateLimitSettings,
    RedisServer,
    get_settings,
)
from django_ratelimits.engine.connection import RedisClient, get_redis, url_decodes_responses
from django_ratelimits.engine.memory import RECOMMENDED, NodeMemory, memory_of
from django_ratelimits.policy_fields import parse_path
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
        problems = error.problems if isinstance(error, InvalidSettings) else (str(error),)
        return [
            Error(
                problem,
                hint=f"See docs/configuration.md for every key of {SETTING_NAME}.",
                id="django_ratelimits.E002",
            )
            for problem in problems
        ]
    if isinstance(config.redis, RedisServer):
        if not url_decodes_responses(config.redis):
            return []  # the rest of a URL is checked by conf; reaching it is W002's business
        problem = f"{SETTING_NAME}['REDIS'] URL asks for decode_responses"
        hint = (
            "Remove decode_responses from the URL's query: the engine reads bytes, and "
            "redis-py decodes replies for any value there, even 'False'."
        )
    else:
        try:
            get_redis(config)  # makes the cache's client; does not touch the network
            return []
        except ImproperlyConfigured as error:
            problem = str(error)
        hint = (
            f"Set {SETTING_NAME}['REDIS'] to the alias of a django-redis cache "
            "or to a redis:// URL."
        )
    return [Error(problem, hint=hint, id="django_ratelimits.E003")]


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
def check_policy_names(**kwargs: Any) -> list[CheckMessage]:
    """E006: ``@ratelimit("name")`` or a ``PolicyThrottle`` naming no policy limits nothing;
    W004 when the policy table cannot be read to tell.

    A name is known when a decorator declared it with ``rate=`` or a row has it
    (enabled or not). Rows are read only when some name has no declaration.
    """
    from django_ratelimits.models import Policy  # the app registry is ready by now
    from django_ratelimits.policies import get_registry
    from django_ratelimits.policy_references import references

    named = references()  # a broken URLconf raises, as in Django's own URL checks
    registry = get_registry()
    undeclared = {ref.name for ref in named if not registry.knows(ref.name)}
    if not undeclared:
        return []
    try:
        rows = set(Policy.objects.filter(name__in=undeclared).values_list("name", flat=True))
    except Exception as error:  # no table yet, no database, no access...
        return [
            Warning(
                f"Cannot read the rate-limit policy table to tell whether these policies "
                f"exist: {', '.join(sorted(undeclared))} ({type(error).__name__}: {error}).",
                hint="Run 'manage.py migrate', or check the database settings. Until the "
                "policies exist, the code that names them limits nothing.",
                id="django_ratelimits.W004",
            )
        ]
    return [
        Error(
            f"{ref.where} names the rate-limit policy {ref.name!r}, which does not exist: "
            "it limits nothing.",
            hint="Create the policy in admin, give @ratelimit a rate= default that creates "
            "it, or correct the name.",
            obj=ref.where,
            id="django_ratelimits.E006",
        )
        for ref in named
        if ref.name in undeclared - rows
    ]


@register(TAG)
def check_compat_settings(**kwargs: Any) -> list[CheckMessage]:
    """E007: django-ratelimit settings that :mod:`django_ratelimits.compat` does not honour.

    ``RATELIMIT_ENABLE``, ``RATELIMIT_FAIL_OPEN`` and ``RATELIMIT_EXCEPTION_CLASS``
    are honoured. The others have a ``DJANGO_RATELIMITS`` equivalent that every
    entry point uses; a value that already agrees with it is accepted.
    """
    config = _settings()
    if config is None:
        return []
    found = []
    for name, key, ours in (
        ("RATELIMIT_IPV4_MASK", "IPV4_PREFIX", config.ipv4_prefix),
        ("RATELIMIT_IPV6_MASK", "IPV6_PREFIX", config.ipv6_prefix),
    ):
        value = getattr(settings, name, None)
        if value is not None and value != ours:
            found.append((name, f"Set {SETTING_NAME}['{key}'] = {value!r} instead."))
    if getattr(settings, "RATELIMIT_IP_META_KEY", None):
        found.append(
            (
                "RATELIMIT_IP_META_KEY",
                f"Clients are counted by REMOTE_ADDR, or by {SETTING_NAME}['CLIENT_IP_HEADER'] "
                f"when the peer is one of {SETTING_NAME}['TRUSTED_PROXIES']: set those instead.",
            )
        )
    view = getattr(settings, "RATELIMIT_VIEW", None)
    if view is not None and view != config.response_view:
        found.append(
            (
                "RATELIMIT_VIEW",
                f"Set {SETTING_NAME}['RESPONSE_VIEW'] = {view!r} instead: RateLimitMiddleware "
                "calls it as view(request, exception) for every refusal.",
            )
        )
    return [
        Error(
            f"{name} is a django-ratelimit setting that django_ratelimits does not honour.",
            hint=f"{hint} Then remove {name} (docs/migrating-from-django-ratelimit.md).",
            id="django_ratelimits.E007",
        )
        for name, hint in found
    ]


@register(TAG)
def check_path_patterns(
    databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Rows saved before patterns were matched by RE2 may hold one it refuses.

    Such a row is skipped at run time (the registry logs it at each reload),
    so no request is limited by it: each is an error here, by name. Plain
    ``manage.py check`` reads the database the policies are read from, as E006
    does; ``databases`` (``migrate``, ``check --database``) names others. A
    database that cannot be read yet (before ``migrate``) has no rows to judge.
    """
    # Here, not at the top: identity imports this module, and must not need the app registry.
    from django_ratelimits.models import Policy

    found: list[CheckMessage] = []
    for alias in databases if databases is not None else [router.db_for_read(Policy)]:
        if not router.allow_migrate_model(alias, Policy):
            continue
        try:
            rows = list(Policy.objects.using(alias).exclude(path="").values_list("name", "path"))
        except Exception:  # not migrated yet, no database, no access: no rows to judge
            continue
        for name, path in rows:
            try:
                parse_path(path)
            except ValidationError as error:
                found.append(_refused_pattern(name, path, error))
    return found


def _refused_pattern(name: str, path: str, error: ValidationError) -> Error:
    return Error(
        f"Rate-limit policy {name!r} has the path pattern {path!r}, which the linear-time "
        f"matcher refuses: {' '.join(error.messages)} While enabled, the policy is skipped: its "
        "path limits no request, and a view decorated with its name gets the default "
        "declared in code.",
        hint="Rewrite the pattern in RE2 syntax in admin (or disable the policy); "
        "see docs/policies.md, 'Path patterns'.",
        obj=f"policy {name!r}",
        id="django_ratelimits.E005",
    )


@register(TAG)
def check_key_functions(
    *, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Every policy row whose key function is not allowed: it is never called.

    Reads the policies' database as E005 and E006 do, in a plain ``manage.py
    check`` too; a database that cannot be read yet has no rows to judge.
    """
    from django_ratelimits.models import Policy  # models are not ready when this is imported

    if _settings() is None:
        return []
    _import_urlconf()
    try:
        rows = list(Policy.objects.filter(key=KeyKind.CALLABLE).order_by("name"))
    except Exception:  # not migrated yet, no database, no access: no rows to judge
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
    config = _settings()
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
