"""Checks of the project's setup: middleware order, ``DJANGO_RATELIMITS`` (and a setting
named almost like it), proxies, django-ratelimit settings that would be silently
ignored, a metrics backend that is not installed, a response view that cannot be
imported, a cache without socket timeouts, and TLS options that send async checks to a
thread (E001 to E004, E007, E009, E012, W001, W006, W007, W016, I001)."""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any, Final

from django.conf import settings
from django.core.checks import CheckMessage, Error, Info, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from redis.connection import parse_url

from django_ratelimits.checks.common import TAG, valid_settings
from django_ratelimits.conf import SETTING_NAME, InvalidSettings, RedisServer, get_settings
from django_ratelimits.engine.aconnection import make_async_redis, sync_only
from django_ratelimits.engine.connection import UnusableRedis, default_alias, get_redis
from django_ratelimits.resolved import translated_routes

RATELIMIT_MIDDLEWARE: Final = "django_ratelimits.middleware.RateLimitMiddleware"
AUTH_MIDDLEWARE: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"
LOCALE_MIDDLEWARE: Final = "django.middleware.locale.LocaleMiddleware"


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
    locale = _position(middleware, LOCALE_MIDDLEWARE)
    if locale is not None and ours < locale and _translated_routes():
        return [
            Warning(
                "RateLimitMiddleware comes before LocaleMiddleware, and the URLconf has "
                "translated routes: a path is resolved in the language the thread's "
                "previous request left active, so a request may be counted under the "
                "@ratelimit policies of another language's view, and a blocked admin "
                "may miss the way back to admin.",
                hint=f"Move {LOCALE_MIDDLEWARE!r} above {RATELIMIT_MIDDLEWARE!r} in "
                "MIDDLEWARE (Django's docs place it after SessionMiddleware).",
                id="django_ratelimits.W016",
            )
        ]
    return []


def _translated_routes() -> bool:
    """Whether the root URLconf has translated routes (False if it cannot be loaded:
    Django's own checks say why)."""
    try:
        return translated_routes(settings.ROOT_URLCONF)
    except Exception:
        return False


@register(TAG)
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    try:
        config = get_settings()
    except ImproperlyConfigured as error:
        problems = error.problems if isinstance(error, InvalidSettings) else (str(error),)
        return [
            Error(
                problem,
                # Said in full here: a pip install has no docs/ to point to.
                hint=f"Edit {SETTING_NAME} in your settings module: correct the value as "
                "said, or remove the key to use its default.",
                id="django_ratelimits.E002",
            )
            for problem in problems
        ]
    try:
        # The clients a request would make, sync and asyncio, made without the network:
        # but for a cluster's sync client, which reads the slot map (W002's business).
        if not (isinstance(config.redis, RedisServer) and config.redis.cluster):
            get_redis(config)
        make_async_redis(config)
        return _threaded(sync_only(config))
    except UnusableRedis as error:
        problem = str(error)
    if isinstance(config.redis, RedisServer):
        hint = (
            f"Correct {SETTING_NAME}['REDIS'] as said: a URL redis-py can read (a port and a "
            "db that are numbers: look for an environment variable left unexpanded), "
            "OPTIONS that redis-py's client and connection classes take, and no "
            "decode_responses in the URL's query (the engine reads bytes, and redis-py "
            "decodes replies for any value there, even 'False')."
        )
    else:
        hint = (
            f"Set {SETTING_NAME}['REDIS'] to the alias of a django-redis cache "
            "or to a redis:// URL."
        )
    return [Error(problem, hint=hint, id="django_ratelimits.E003")]


def _threaded(names: Sequence[str]) -> list[CheckMessage]:
    """I001: TLS options only redis-py's sync client takes (``names``) send the async
    path's checks through the sync client in a worker thread: limited as sync requests
    are, a thread hop each."""
    if not names:
        return []
    return [
        Info(
            f"{SETTING_NAME}['REDIS'] sets {', '.join(names)}, which redis-py's asyncio "
            "client does not take: async requests' checks run the sync client in a worker "
            "thread (limited as sync requests are, at the cost of a thread hop per check, "
            "and at most as many at once as the event loop's default executor has threads).",
            hint="To check on the event loop, use options the asyncio client takes: "
            "ssl_ca_certs (a file) rather than ssl_ca_path, a key that is not encrypted "
            "rather than ssl_password (redis-py 8's standalone asyncio client takes both, "
            "its cluster client neither), no OCSP options. Or silence this check.",
            id="django_ratelimits.I001",
        )
    ]


# The timeouts W007 looks for: a django-redis OPTIONS key, and the redis-py keyword it
# becomes (in CONNECTION_POOL_KWARGS or the LOCATION's query).
_TIMEOUTS: Final = (
    ("SOCKET_CONNECT_TIMEOUT", "socket_connect_timeout"),
    ("SOCKET_TIMEOUT", "socket_timeout"),
)


@register(TAG)
def check_cache_timeouts(**kwargs: Any) -> list[CheckMessage]:
    """W007: the django-redis cache rate limits use sets no socket timeouts. The package's
    own ``SOCKET_TIMEOUT`` applies only to clients it makes from a URL; django-redis sets
    none by default, so a Redis that hangs (not down: stopped, or swapping) holds every
    limited request as long as the operating system lets it, and the breaker never
    opens."""
    try:
        config = get_settings()
        if isinstance(config.redis, RedisServer):
            return []
        alias = config.redis if config.redis is not None else default_alias()
    except ImproperlyConfigured:
        return []  # E002's or E003's
    caches: Mapping[str, Any] = settings.CACHES
    cache = caches.get(alias)
    if not isinstance(cache, Mapping):
        return []  # E003's
    options = cache.get("OPTIONS") or {}
    pool = options.get("CONNECTION_POOL_KWARGS") or {}
    location = cache.get("LOCATION")
    first = location[0] if isinstance(location, list | tuple) and location else location
    try:
        query = parse_url(str(first).split(",")[0]) if first else {}
    except ValueError:
        query = {}  # E003's
    missing = [
        name
        for name, key in _TIMEOUTS
        if options.get(name) is None and pool.get(key) is None and query.get(key) is None
    ]
    if not missing:
        return []
    return [
        Warning(
            f"The cache {alias!r} that rate limits use sets no {' and no '.join(missing)}: "
            "a Redis that hangs holds every limited request as long as the operating "
            "system lets it.",
            hint=f"Add {{'SOCKET_CONNECT_TIMEOUT': 0.25, 'SOCKET_TIMEOUT': 0.25}} to that "
            f"cache's OPTIONS, or set {SETTING_NAME}['REDIS'] to a URL of its own, whose "
            f"clients take {SETTING_NAME}['SOCKET_TIMEOUT'].",
            obj=alias,
            id="django_ratelimits.W007",
        )
    ]


# How alike a settings name must be to DJANGO_RATELIMITS for W006: DJANGO_RATELIMIT,
# DJANGO_RATE_LIMITS, DJANGO_RATELIMTS are (0.94 to 0.97), no name Django defines is.
_MISSPELLING_CUTOFF: Final = 0.85


@register(TAG)
def check_setting_name(**kwargs: Any) -> list[CheckMessage]:
    """W006: a setting named almost ``DJANGO_RATELIMITS`` (``DJANGO_RATELIMIT``, as the
    django-ratelimit package is named): nothing reads it, so every key it holds keeps
    its default, silently. django-ratelimit's ``RATELIMIT_*`` names are E007's; a name
    that is ``DJANGO_RATELIMITS_`` and more (``DJANGO_RATELIMITS_ON``) is a project's own
    setting beside it, spelt right."""
    names = [
        n
        for n in dir(settings)
        if n != SETTING_NAME and not n.startswith((SETTING_NAME + "_", "RATELIMIT_"))
    ]
    close = difflib.get_close_matches(SETTING_NAME, names, n=5, cutoff=_MISSPELLING_CUTOFF)
    return [
        Warning(
            f"The setting {name} is not read: did you mean {SETTING_NAME}? Every key it "
            f"holds is ignored and keeps its default.",
            hint=f"Rename it {SETTING_NAME}, or silence django_ratelimits.W006 "
            "(SILENCED_SYSTEM_CHECKS) if another package reads it.",
            obj=name,
            id="django_ratelimits.W006",
        )
        for name in sorted(close)
    ]


@register(TAG)
def check_trusted_proxies(**kwargs: Any) -> list[CheckMessage]:
    config = valid_settings()
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
            "balancers, e.g. ['10.0.0.0/8'] or ['127.0.0.1']. An IPv4-mapped network is "
            "read as the IPv4 network it maps: '::ffff:0:0/96' is 0.0.0.0/0.",
            id="django_ratelimits.E004",
        )
    ]


@register(TAG)
def check_compat_settings(**kwargs: Any) -> list[CheckMessage]:
    """E007: django-ratelimit settings that :mod:`django_ratelimits.compat` does not honour.

    ``RATELIMIT_ENABLE``, ``RATELIMIT_FAIL_OPEN`` and ``RATELIMIT_EXCEPTION_CLASS``
    are honoured. The others have a ``DJANGO_RATELIMITS`` equivalent that every
    entry point uses; a value that already agrees with it is accepted.
    """
    config = valid_settings()
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


# The module each METRICS backend needs, and the extra that installs it.
_METRICS_NEEDS: Final = {"prometheus": ("prometheus_client", "django-ratelimits[prometheus]")}


@register(TAG)
def check_metrics_backend(**kwargs: Any) -> list[CheckMessage]:
    """E009: ``METRICS`` names a backend whose client library is not installed (the
    first request would fail to count, and the metrics view to answer)."""
    config = valid_settings()
    if config is None or config.metrics is False:
        return []
    module, extra = _METRICS_NEEDS[str(config.metrics)]
    try:
        found = importlib.util.find_spec(module) is not None
    except ValueError:  # imported already, without a spec
        found = True
    if found:
        return []
    return [
        Error(
            f"{SETTING_NAME}['METRICS'] is {config.metrics!r} but {module} is not installed.",
            hint=f"pip install '{extra}', or set {SETTING_NAME}['METRICS'] = False.",
            id="django_ratelimits.E009",
        )
    ]


@register(TAG)
def check_response_views(**kwargs: Any) -> list[CheckMessage]:
    """E012: ``RESPONSE_VIEW`` or ``BLOCKED_RESPONSE_VIEW`` names nothing importable
    (or nothing callable). Each refusal would get the built-in answer instead (logged),
    where it was a 500 before the request path fell back."""
    config = valid_settings()
    if config is None:
        return []
    found: list[CheckMessage] = []
    for key, path, answer in (
        ("RESPONSE_VIEW", config.response_view, "429"),
        ("BLOCKED_RESPONSE_VIEW", config.blocked_response_view, "403"),
    ):
        if path is None:
            continue
        try:
            view = import_string(path)
        except Exception as error:  # ImportError, or whatever the module raised
            problem = f"cannot be imported ({type(error).__name__}: {error})"
        else:
            if callable(view):
                continue
            problem = f"names a non-callable {type(view).__name__}"
        found.append(
            Error(
                f"{SETTING_NAME}['{key}'] = {path!r} {problem}. Every such refusal gets the "
                f"built-in {answer} instead of your view, and an error is logged.",
                hint=f"Correct the dotted path to a view(request, exception), or remove "
                f"{key} for the built-in {answer}.",
                id="django_ratelimits.E012",
            )
        )
    return found
