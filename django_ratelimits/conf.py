"""Settings: one dict, ``settings.DJANGO_RATELIMITS``, merged over documented defaults.

The defaults are the field defaults of :class:`RateLimitSettings` and nowhere
else; :data:`DEFAULTS` shows them under their setting names::

    DJANGO_RATELIMITS = {
        "REDIS": "redis://127.0.0.1:6379/0",
        "KEY_PREFIX": "shop-rl",
    }

:func:`get_settings` validates the dict once and caches the result until Django
sends ``setting_changed`` for ``DJANGO_RATELIMITS`` (as ``override_settings``
does). A bad value raises ``ImproperlyConfigured`` naming the key and the
problem. ``docs/configuration.md`` documents every key.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.encoding import force_bytes

from django_ratelimits.errors import RateParseError
from django_ratelimits.rates import Rate, parse_rate

__all__ = [
    "DEFAULTS",
    "SETTING_NAME",
    "IPNetwork",
    "InvalidSettings",
    "RateLimitSettings",
    "RedisServer",
    "get_settings",
    "ip_network",
    "unmapped",
]

SETTING_NAME: Final = "DJANGO_RATELIMITS"

URL_SCHEMES: Final = ("redis", "rediss", "unix")
CLUSTER_URL_SCHEMES: Final = ("redis", "rediss")

# Keys of REDIS["OPTIONS"] that the package sets itself.
_RESERVED_OPTIONS: Final = {
    "socket_timeout": f"set {SETTING_NAME}['SOCKET_TIMEOUT'] instead",
    "socket_connect_timeout": f"set {SETTING_NAME}['SOCKET_CONNECT_TIMEOUT'] instead",
    "decode_responses": "the engine works in bytes, so responses must not be decoded",
}

_KEY_PREFIX: Final = re.compile(r"[A-Za-z0-9_.-]{1,16}")
# What the shard key is for: HMAC(secret, purpose), so the shard key says
# nothing about SECRET_KEY and no other use of SECRET_KEY yields the same bytes.
SHARD_KEY_PURPOSE: Final = b"django_ratelimits.engine.keys shard placement"
SHARD_SECRET_MIN_LENGTH: Final = 16
# What the IP hashing key is for (HASH_IPS): another purpose, so another key.
IP_HASH_KEY_PURPOSE: Final = b"django_ratelimits.identity client address hashing"
METRICS_BACKENDS: Final = ("prometheus",)
"""What ``METRICS`` may name besides ``False`` (off): the backend that counts
(``docs/metrics.md``)."""
METRICS_TOKEN_MIN: Final = 32
"""The shortest ``METRICS_TOKEN``: the bearer token of the metrics view, a secret."""

# Inclusive bounds of the numeric settings, by attribute name.
_BOUNDS: Final[Mapping[str, tuple[float, int]]] = MappingProxyType(
    {
        "socket_timeout": (0.001, 60),
        "socket_connect_timeout": (0.001, 60),
        "shards": (1, 1024),
        "metadata_max_entries": (1, 10_000),
        "metadata_ttl": (1, 30 * 86_400),
        "offender_retention": (1, 365 * 86_400),
        "offender_index_max": (1, 100_000_000),
        "ipv4_prefix": (8, 32),
        "ipv6_prefix": (16, 128),
        "policy_refresh": (0.05, 3600),
        "breaker_failures": (1, 1000),
        "breaker_cooldown": (0.1, 3600),
        "denial_cache": (0, 1_000_000),
    }
)
_FLOATS: Final = frozenset(
    {"socket_timeout", "socket_connect_timeout", "policy_refresh", "breaker_cooldown"}
)
_BOOLEANS: Final = ("enabled", "headers_on_allowed", "hash_ips")
HEADER_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
"""A header a setting or a policy may name: letters, digits and hyphens, a valid HTTP
token that every server passes on (many drop header names with underscores)."""
DOTTED_PATH: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
"""The dotted path of a module attribute, as settings and policies name code."""
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
"""An IP network, as ``TRUSTED_PROXIES`` and a policy's exempt networks hold them."""


def unmapped(network: IPNetwork) -> IPNetwork:
    """``network``, or the IPv4 network an IPv4-mapped one stands for: ``::ffff:10.0.0.0/104``
    is ``10.0.0.0/8`` (the prefix less 96), ``::ffff:0:0/96`` every IPv4 address.

    A client or proxy address is matched in its IPv4 form (a server bound to ``[::]``
    shows an IPv4 peer as ``::ffff:10.0.0.1``), so a network read from settings or a
    form is too: left IPv6, the mapped network would match no address at all.
    """
    if network.version == 6 and network.prefixlen >= 96:
        ipv4 = network.network_address.ipv4_mapped
        if ipv4 is not None:
            return ipaddress.IPv4Network((ipv4, network.prefixlen - 96))
    return network


def ip_network(text: str, *, strict: bool = True) -> IPNetwork:
    """``ipaddress.ip_network(text, strict=strict)``, an IPv4-mapped one as its IPv4
    network (:func:`unmapped`): how a network read from settings, a form or the command
    is parsed. Raises ``ValueError`` as ``ip_network`` does."""
    return unmapped(ipaddress.ip_network(text, strict=strict))


def _name(attribute: str) -> str:
    return f"{SETTING_NAME}[{attribute.upper()!r}]"


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


class InvalidSettings(ImproperlyConfigured):
    """Every problem of ``DJANGO_RATELIMITS`` at once: ``problems``, one message each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class RedisServer:
    """A Redis server or cluster that the package connects to itself (not a cache alias).

    ``url`` is a ``redis://``, ``rediss://`` or ``unix://`` URL; ``options`` are
    extra keyword arguments for the redis-py client.
    """

    url: str
    cluster: bool = False
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    def __post_init__(self) -> None:
        name = _name("redis")
        if not isinstance(self.url, str):
            raise ImproperlyConfigured(f"{name} URL must be a str, not {type(self.url).__name__}")
        if not isinstance(self.cluster, bool):
            raise ImproperlyConfigured(
                f"{name} CLUSTER must be True or False, not {self.cluster!r}"
            )
        scheme = self.url.partition("://")[0].lower() if "://" in self.url else ""
        schemes = CLUSTER_URL_SCHEMES if self.cluster else URL_SCHEMES
        if scheme not in schemes:
            # Only the scheme is shown: the rest of a URL may hold a password.
            raise ImproperlyConfigured(
                f"{name} URL must start with {', '.join(s + '://' for s in schemes)}"
                f"{' for a cluster' if self.cluster else ''}, "
                f"not {scheme + '://' if scheme else 'no scheme'}"
            )
        if not isinstance(self.options, Mapping):
            raise ImproperlyConfigured(
                f"{name} OPTIONS must be a dict, not {type(self.options).__name__}"
            )
        for key, value in self.options.items():
            if not isinstance(key, str):
                raise ImproperlyConfigured(f"{name} OPTIONS keys must be str, not {key!r}")
            if key in _RESERVED_OPTIONS and (key != "decode_responses" or value):
                raise ImproperlyConfigured(
                    f"{name} OPTIONS must not set {key!r}: {_RESERVED_OPTIONS[key]}"
                )
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


@dataclass(frozen=True)
class RateLimitSettings:
    """The validated settings. Field defaults are the documented defaults.

    ``redis`` is ``None`` (find a django-redis cache), the name of a CACHES
    alias, or a :class:`RedisServer`.
    """

    redis: str | RedisServer | None = None
    key_prefix: str = "rl"
    socket_timeout: float = 0.25
    socket_connect_timeout: float = 0.25
    shards: int = 64
    metadata_max_entries: int = 50
    metadata_ttl: int = 3600
    offender_retention: int = 86_400
    offender_index_max: int = 1_000_000
    enabled: bool = True
    trusted_proxies: tuple[IPNetwork, ...] = ()
    client_ip_header: str = "X-Forwarded-For"
    ipv4_prefix: int = 32
    ipv6_prefix: int = 64
    policy_refresh: float = 2.0
    headers_on_allowed: bool = True
    response_view: str | None = None
    blocked_response_view: str | None = None
    fail_closed_status: int = 503
    breaker_failures: int = 3
    breaker_cooldown: float = 5.0
    denial_cache: int = 10_000
    identity_budget: str | None = "50/h"
    # Set by __post_init__ from ``identity_budget``: the rate, or None when off.
    identity_budget_rate: Rate | None = field(init=False, repr=False, compare=False)
    shard_secret: str | None = field(default=None, repr=False)
    key_functions: tuple[str, ...] = ()
    hash_ips: bool = False
    metrics: str | bool = False
    metrics_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        problems = list(self._problems())
        try:
            object.__setattr__(self, "identity_budget_rate", _identity_budget(self.identity_budget))
        except ImproperlyConfigured as error:
            problems.append(str(error))
        if problems:
            raise InvalidSettings(problems)

    def _problems(self) -> Iterator[str]:
        """What is wrong with the values, one message per problem."""
        if not (self.redis is None or isinstance(self.redis, str | RedisServer)):
            yield (
                f"{_name('redis')} must be None, a CACHES alias, a URL or a dict, "
                f"not {type(self.redis).__name__}"
            )
        if not isinstance(self.key_prefix, str) or not _KEY_PREFIX.fullmatch(self.key_prefix):
            yield (
                f"{_name('key_prefix')} must be 1 to 16 characters from A-Z, a-z, 0-9, "
                f"'_', '.' and '-', not {_describe(self.key_prefix)}"
            )
        for attribute, (low, high) in _BOUNDS.items():
            value = getattr(self, attribute)
            kind = "a number" if attribute in _FLOATS else "an integer"
            types = (int, float) if attribute in _FLOATS else (int,)
            if isinstance(value, bool) or not isinstance(value, types) or not low <= value <= high:
                yield (
                    f"{_name(attribute)} must be {kind} from {low} to {high}, "
                    f"not {_describe(value)}"
                )
        for attribute in _BOOLEANS:
            if not isinstance(getattr(self, attribute), bool):
                yield (
                    f"{_name(attribute)} must be True or False, "
                    f"not {_describe(getattr(self, attribute))}"
                )
        if not isinstance(self.client_ip_header, str) or not HEADER_NAME.fullmatch(
            self.client_ip_header
        ):
            yield (
                f"{_name('client_ip_header')} must be a header name such as "
                f"'X-Forwarded-For' or 'Forwarded', not {_describe(self.client_ip_header)}"
            )
        for attribute in ("response_view", "blocked_response_view"):
            view = getattr(self, attribute)
            if view is not None and not (isinstance(view, str) and DOTTED_PATH.fullmatch(view)):
                yield (
                    f"{_name(attribute)} must be None or the dotted path of a view, "
                    f"not {_describe(view)}"
                )
        if self.fail_closed_status not in (429, 503):
            yield (
                f"{_name('fail_closed_status')} must be 429 or 503, "
                f"not {_describe(self.fail_closed_status)}"
            )
        for attribute, minimum in (
            ("shard_secret", SHARD_SECRET_MIN_LENGTH),
            ("metrics_token", METRICS_TOKEN_MIN),
        ):
            secret = getattr(self, attribute)
            if secret is not None and not (isinstance(secret, str) and len(secret) >= minimum):
                # Never the value: it is a secret.
                shown = (
                    f"{len(secret)} characters"
                    if isinstance(secret, str)
                    else type(secret).__name__
                )
                yield (
                    f"{_name(attribute)} must be None or a str of at least {minimum} "
                    f"characters, not {shown}"
                )
        if not (self.metrics is False or self.metrics in METRICS_BACKENDS):
            yield (
                f"{_name('metrics')} must be False or "
                f"{' or '.join(map(repr, METRICS_BACKENDS))}, not {_describe(self.metrics)}"
            )

    @functools.cached_property
    def shard_key(self) -> bytes:
        """The key of the hash that places identities in shards (32 bytes).

        HMAC-SHA256 of :data:`SHARD_KEY_PURPOSE` keyed with ``SHARD_SECRET``,
        or with ``settings.SECRET_KEY`` when that is None: never the raw secret.
        """
        return self._derived_key(SHARD_KEY_PURPOSE)

    @functools.cached_property
    def ip_hash_key(self) -> bytes:
        """The key of the HMAC that stands for client addresses when ``HASH_IPS`` is on
        (32 bytes): derived as :attr:`shard_key` is, for another purpose."""
        return self._derived_key(IP_HASH_KEY_PURPOSE)

    def _derived_key(self, purpose: bytes) -> bytes:
        secret = settings.SECRET_KEY if self.shard_secret is None else self.shard_secret
        return hmac.new(force_bytes(secret), purpose, hashlib.sha256).digest()


DEFAULTS: Final[Mapping[str, object]] = MappingProxyType(
    {f.name.upper(): f.default for f in fields(RateLimitSettings) if f.init}
)


@functools.cache
def get_settings() -> RateLimitSettings:
    """The validated settings; cached until ``DJANGO_RATELIMITS`` or ``SECRET_KEY`` changes."""
    return _from_setting(getattr(settings, SETTING_NAME, {}))


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: object) -> None:
    if setting in (SETTING_NAME, "SECRET_KEY"):  # SECRET_KEY: the derived shard key
        get_settings.cache_clear()


def _from_setting(value: object) -> RateLimitSettings:
    """The settings from the dict; :class:`InvalidSettings` lists every problem in it."""
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f"{SETTING_NAME} must be a dict, not {type(value).__name__}")
    problems = [_unknown_key(key) for key in value if key not in DEFAULTS]
    values: dict[str, Any] = {key.lower(): item for key, item in value.items() if key in DEFAULTS}
    converters: dict[str, Callable[[Any], Any]] = {"redis": _redis}
    if "trusted_proxies" in values:
        converters["trusted_proxies"] = _networks
    if "key_functions" in values:
        converters["key_functions"] = _dotted_paths
    for attribute, convert in converters.items():
        try:
            values[attribute] = convert(values.get(attribute))
        except ImproperlyConfigured as error:
            problems.append(str(error))
            del values[attribute]  # the default, so the other values are still judged
    try:
        config = RateLimitSettings(**values)
    except InvalidSettings as error:
        problems.extend(error.problems)
    if problems:
        raise InvalidSettings(problems)
    return config


def _unknown_key(key: object) -> str:
    close = difflib.get_close_matches(str(key).upper(), DEFAULTS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{SETTING_NAME} has an unknown key {key!r}{hint}; the valid keys are {', '.join(DEFAULTS)}"
    )


def _identity_budget(value: object) -> Rate | None:
    """``IDENTITY_BUDGET``: new client-chosen identities per client IP, as a rate
    (``"50/h"``), or ``None`` / ``"off"`` for no budget."""
    if value is None or value == "off":
        return None
    problem = ""
    if isinstance(value, str):
        try:
            return parse_rate(value)
        except RateParseError as exc:
            problem = f": {exc}"
    raise ImproperlyConfigured(
        f"{_name('identity_budget')} must be a rate such as '50/h', or None or 'off', "
        f"not {_describe(value)}{problem}"
    )


def _networks(value: object) -> tuple[IPNetwork, ...]:
    """``TRUSTED_PROXIES``: a list of addresses or CIDRs (``"10.0.0.0/8"``), an
    IPv4-mapped one as its IPv4 network (:func:`unmapped`)."""
    name = _name("trusted_proxies")
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ImproperlyConfigured(
            f"{name} must be a list of addresses or CIDRs, not {_describe(value)}"
        )
    networks = []
    for item in value:
        try:
            networks.append(ip_network(item, strict=False))
        except (TypeError, ValueError):
            raise ImproperlyConfigured(
                f"{name} has {_describe(item)}, which is not an IP address or CIDR"
            ) from None
    return tuple(networks)


def _dotted_paths(value: object) -> tuple[str, ...]:
    """``KEY_FUNCTIONS``: a list of dotted paths, checked as text (nothing is imported)."""
    name = _name("key_functions")
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ImproperlyConfigured(
            f"{name} must be a list of dotted paths of functions, not {_describe(value)}"
        )
    for item in value:
        if not isinstance(item, str) or not DOTTED_PATH.fullmatch(item):
            raise ImproperlyConfigured(
                f"{name} has {_describe(item)}, which is not the dotted path of a function "
                "such as 'myproject.keys.tenant'"
            )
    return tuple(dict.fromkeys(value))


def _redis(value: object) -> str | RedisServer | None:
    """``REDIS`` as written: a URL string or a dict becomes a :class:`RedisServer`."""
    name = _name("redis")
    if isinstance(value, str):
        if not value.strip():
            raise ImproperlyConfigured(f"{name} must not be an empty string")
        return RedisServer(url=value) if "://" in value else value
    if isinstance(value, Mapping):
        for key in value:
            if key not in ("URL", "CLUSTER", "OPTIONS"):
                raise ImproperlyConfigured(
                    f"{name} has an unknown key {key!r}; the valid keys are URL, CLUSTER, OPTIONS"
                )
        if "URL" not in value:
            raise ImproperlyConfigured(f"{name} needs a URL, for example 'redis://127.0.0.1:6379'")
        return RedisServer(
            url=value["URL"],
            cluster=value.get("CLUSTER", False),
            options=value.get("OPTIONS", {}),
        )
    if value is None:
        return None
    raise ImproperlyConfigured(
        f"{name} must be None, a CACHES alias, a URL or a dict, not {type(value).__name__}"
    )
