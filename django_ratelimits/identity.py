"""Who a request is: the client address, the user, a header or a callable's key.

The client address is ``REMOTE_ADDR`` unless that peer is one of
``TRUSTED_PROXIES``; only then may ``CLIENT_IP_HEADER`` name the client, read
from the right so that nothing a client writes itself is believed. Addresses
are normalised and grouped by prefix (IPv6 per /64 by default), then, with
``HASH_IPS``, counted under a keyed hash of the group (:func:`counted_ip`).
``docs/client-ip.md`` and ``docs/privacy.md`` explain the rules.

Nothing here raises on client input: a bad or missing address gives
:data:`UNKNOWN` or the nearest trusted address, and the work per request is
bounded however long the headers are. :func:`warn_if_behind_proxy` logs once
if the peers look like a proxy that ``TRUSTED_PROXIES`` does not list.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import unicodedata
from collections.abc import Callable, Sequence
from typing import Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.module_loading import import_string

from django_ratelimits import key_functions
from django_ratelimits.conf import SETTING_NAME, IPNetwork, RateLimitSettings, get_settings
from django_ratelimits.engine import Identity
from django_ratelimits.policies.spec import KeyKind, PolicySpec

__all__ = [
    "UNKNOWN",
    "client_ip",
    "counted_ip",
    "group",
    "identities",
    "ip_identity",
    "key_function",
    "login_username",
    "normalize_username",
    "parse_address",
    "warn_if_behind_proxy",
]

logger = logging.getLogger("django_ratelimits")

UNKNOWN: Final = "unknown"
"""The client address when ``REMOTE_ADDR`` is missing or not an address."""
HASHED: Final = "h:"
"""How an IP identity's value starts when it is a hash of the address (``HASH_IPS``)."""

# Bounds on the proxy header: its last MAX_HEADER_CHARS characters, at most
# MAX_ENTRIES entries of them. A longer chain only ever loses entries on the
# left, the side a client writes.
MAX_HEADER_CHARS: Final = 8192
MAX_ENTRIES: Final = 100
# Longer than any address with brackets, a zone and a port.
_MAX_ADDRESS_CHARS: Final = 100

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


# --------------------------------------------------------------------------- client address


def client_ip(request: HttpRequest) -> str:
    """The client address, normalised and grouped by prefix.

    ``"203.0.113.7"``, ``"203.0.113.0/24"`` when ``IPV4_PREFIX`` is 24,
    ``"2001:db8:1:2::/64"``; :data:`UNKNOWN` when ``REMOTE_ADDR`` is missing
    or is not an address.
    """
    return _client(request)[2]


def ip_identity(request: HttpRequest) -> Identity:
    """The client address as the limiter counts it: its group (:func:`client_ip`), or
    with ``HASH_IPS`` the group's keyed hash (:func:`counted_ip`)."""
    return _client(request)[3]


def counted_ip(grouped: str, config: RateLimitSettings) -> str:
    """The value the address group ``grouped`` is counted under: itself, or with
    ``HASH_IPS`` ``h:`` and 32 hex digits (128 bits) of its HMAC-SHA256 keyed with
    the settings' IP hashing key. :data:`UNKNOWN` names no one and stays as it is."""
    if not config.hash_ips or grouped == UNKNOWN:
        return grouped
    return HASHED + hmac.digest(config.ip_hash_key, grouped.encode("ascii"), "sha256")[:16].hex()


def client_address(request: HttpRequest) -> IPAddress | None:
    """The client's own address, not grouped (``None`` if ``REMOTE_ADDR`` is unusable).

    For allow-lists, which must match single addresses inside an IPv6 /64.
    """
    return _client(request)[1]


_Client = tuple[RateLimitSettings, IPAddress | None, str, Identity]


def _client(request: HttpRequest) -> _Client:
    """The settings, the client's address, its group and the identity it is counted
    as, worked out once per request (every policy, gate, exemption and metadata
    entry of a request asks), and again only if the settings change. Without
    trusted proxies the client is the peer: what its ``REMOTE_ADDR`` gives is kept
    for the next requests of the same peer (at most :data:`_PEERS_KEPT` peers)."""
    config = get_settings()
    cached: _Client | None = getattr(request, _CACHE, None)
    if cached is not None and cached[0] is config:
        return cached
    peer = request.META.get("REMOTE_ADDR")
    kept = not config.trusted_proxies and isinstance(peer, str) and len(peer) <= _MAX_ADDRESS_CHARS
    cached = _by_peer.get(peer) if kept else None
    if cached is None or cached[0] is not config:
        address = _client_address(request, config)
        grouped = (
            UNKNOWN if address is None else group(address, config.ipv4_prefix, config.ipv6_prefix)
        )
        cached = (config, address, grouped, Identity("ip", counted_ip(grouped, config)))
        if kept:
            if len(_by_peer) >= _PEERS_KEPT:
                _by_peer.clear()
            _by_peer[peer] = cached
    setattr(request, _CACHE, cached)
    return cached


_CACHE = "_ratelimits_client"
# By REMOTE_ADDR, what a peer that is the client gives (the settings it was worked out
# under first, so that a change of settings works it out again).
_PEERS_KEPT: Final = 4096
_by_peer: dict[object, _Client] = {}


def _client_address(request: HttpRequest, config: RateLimitSettings) -> IPAddress | None:
    peer = parse_address(request.META.get("REMOTE_ADDR"))
    if peer is None:
        return None
    proxies = config.trusted_proxies
    warn_if_behind_proxy(peer, proxies)
    if proxies and _is_trusted(peer, proxies):
        header = request.META.get(meta_key(config.client_ip_header))
        if isinstance(header, str):
            return _from_header(config.client_ip_header.lower(), header, peer, proxies)
    return peer


def _from_header(name: str, value: str, peer: IPAddress, proxies: Sequence[IPNetwork]) -> IPAddress:
    """The client a trusted ``peer`` names in header ``name`` (lower case)."""
    if name == "x-forwarded-for":
        return _walk(_last_entries(value), parse_address, peer, proxies)
    if name == "forwarded":
        return _walk(_last_entries(value), _forwarded_for, peer, proxies)
    # A single-address header (X-Real-IP...): one address or nothing. A list,
    # such as two header lines joined, is not an address.
    return parse_address(value) or peer


def _walk(
    entries: Sequence[str],
    parse: Callable[[str], IPAddress | None],
    peer: IPAddress,
    proxies: Sequence[IPNetwork],
) -> IPAddress:
    """The right-most address of ``entries`` that is not a trusted proxy.

    A malformed entry (``parse`` gives ``None``) stops the walk, which answers
    the last address it read: anything further left may be forged. When every
    entry is trusted the left-most one is the client.
    """
    last = peer
    for entry in reversed(entries):
        address = parse(entry)
        if address is None:
            break
        last = address
        if not _is_trusted(address, proxies):
            break
    return last


def _last_entries(value: str) -> list[str]:
    """The right-most comma-separated entries of ``value``, at most :data:`MAX_ENTRIES`.

    An entry the bounds cut (the left-most one of a longer header) is dropped
    rather than read as a shorter, different address.
    """
    clipped = len(value) > MAX_HEADER_CHARS
    if clipped:
        value = value[-MAX_HEADER_CHARS:]
    entries = value.rsplit(",", MAX_ENTRIES)
    if clipped or len(entries) > MAX_ENTRIES:
        del entries[0]
    return entries


def _forwarded_for(element: str) -> IPAddress | None:
    """The address in the ``for`` parameter of one RFC 7239 ``Forwarded`` element.

    ``None`` when there is no ``for``, or it is ``unknown``, an obfuscated
    ``_name`` or not an address.
    """
    found = None
    for pair in element.split(";"):
        name, equals, node = pair.partition("=")
        if equals and name.strip().lower() == "for":
            if found is not None:  # two ``for`` in one element: malformed
                return None
            found = node.strip()
    if found is None:
        return None
    if len(found) >= 2 and found[0] == found[-1] == '"':
        found = found[1:-1]
    return parse_address(found)


def parse_address(text: object) -> IPAddress | None:
    """One address as a header or ``REMOTE_ADDR`` writes it, or ``None``.

    Accepts surrounding whitespace, a port (``1.2.3.4:80``, ``[::1]:80``), an
    IPv6 zone (``fe80::1%eth0``, dropped); an IPv4-mapped IPv6 address
    becomes the IPv4 address.
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    return _parse_address(text) if len(text) <= _MAX_ADDRESS_CHARS else None


@functools.lru_cache(maxsize=4096)
def _parse_address(text: str) -> IPAddress | None:
    if not text.isascii():
        return None
    host = text
    if text.startswith("["):
        host, bracket, port = text[1:].partition("]")
        if not bracket or not (port == "" or (port[:1] == ":" and _is_port(port[1:]))):
            return None
    elif text.count(":") == 1:  # IPv4 with a port; IPv6 has at least two colons
        host, _, port = text.partition(":")
        if not _is_port(port):
            return None
    if ":" in host:
        host = host.partition("%")[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_port(text: str) -> bool:
    """A port number, or an RFC 7239 obfuscated port (``_abc``)."""
    if text[:1] == "_":
        return len(text) > 1 and all(ch.isalnum() or ch in "._-" for ch in text)
    return 1 <= len(text) <= 5 and text.isdigit() and int(text) <= 65535


def _is_trusted(address: IPAddress, proxies: Sequence[IPNetwork]) -> bool:
    return any(address in network for network in proxies)


@functools.lru_cache(maxsize=16)
def meta_key(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_")


@functools.lru_cache(maxsize=4096)
def group(address: IPAddress, ipv4_prefix: int = 32, ipv6_prefix: int = 64) -> str:
    """``address`` as its network of the given prefix length.

    IPv4: the bare address at /32, else ``a.b.c.0/NN``. IPv6: always the
    network with its prefix (``2001:db8:1:2::/64``).
    """
    if isinstance(address, ipaddress.IPv4Address):
        if ipv4_prefix == 32:
            return str(address)
        return str(ipaddress.IPv4Network((address, ipv4_prefix), strict=False))
    return ipaddress.IPv6Network((address, ipv6_prefix), strict=False).compressed


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


# --------------------------------------------------------------------------- identities


def identities(request: HttpRequest, spec: PolicySpec) -> list[Identity]:
    """Who ``spec`` counts for ``request``; an empty list counts nobody."""
    kind = spec.key
    if kind == KeyKind.IP:
        return [ip_identity(request)]
    if kind == KeyKind.USER:
        return _user(request)
    if kind == KeyKind.USER_OR_IP:
        return _user(request) or [ip_identity(request)]
    if kind == KeyKind.IP_AND_USER:
        return [ip_identity(request), *_user(request)]
    if kind == KeyKind.HEADER:
        value = request.headers.get(spec.key_arg, "").strip() if spec.key_arg else ""
        return [Identity("header", value)] if value else [ip_identity(request)]
    if kind == KeyKind.CALLABLE:
        if not key_functions.is_allowed(spec.key_arg):
            _report_not_allowed(spec)
            return [ip_identity(request)]
        return _from_callable(request, spec.key_arg)
    if kind == KeyKind.USERNAME:
        return [_username(request) or ip_identity(request)]
    if kind == KeyKind.IP_AND_USERNAME:
        username = _username(request)
        return [ip_identity(request)] if username is None else [ip_identity(request), username]
    if kind == KeyKind.IP_USERNAME_PAIR:
        name = login_username(request)
        if name is None:
            return [ip_identity(request)]
        return [Identity("ip_username", f"{ip_identity(request).value} {name}")]
    raise ValueError(f"policy {spec.name!r} has an unknown key kind {kind!r}")


# --------------------------------------------------------------------------- usernames tried

USERNAME_MAX: Final = 254
"""Characters of a username tried that count (an e-mail address's longest); the rest
is cut, so no username makes keys, entries or work per request grow."""
_LOGIN: Final = "_ratelimits_username"


def normalize_username(value: object) -> str | None:
    """A username as a failed-login policy counts it: NFKC, case-folded, spaces
    trimmed and runs of them made one, at most :data:`USERNAME_MAX` characters;
    ``None`` for nothing to count (``None``, or a value whose text is blank).

    ``Admin``, `` admin`` and ``ADMIN`` in full-width letters are one username:
    variants an attacker writes never count apart (``docs/logins.md``). Normalising
    a normalised username changes nothing, so that staff naming the username the
    dashboard shows name the identity counted: one pass of NFKC and case folding is
    not enough (``ß`` and a combining accent fold to ``ss`` and the accent, which NFKC
    then composes into ``ś``), so passes repeat until the text holds still.
    """
    if value is None:
        return None
    # A value that is not a string (a JSON login's ``{"username": 12345}``) counts as
    # its text: Django's ModelBackend looks the user up by it, and a CharField lookup
    # turns any value into its text, so it tries that account's password.
    text = (value if isinstance(value, str) else str(value))[:USERNAME_MAX]
    for _ in range(_FOLD_PASSES):
        folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
        folded = " ".join(folded.split())[:USERNAME_MAX]
        if folded == text:
            break
        text = folded
    return text or None


# Passes of normalize_username: each changes a text only by composing what the last one's
# folding left apart; two settle every string tried (tests/request/test_logins.py).
_FOLD_PASSES: Final = 4


def set_login_username(request: HttpRequest, value: object) -> None:
    """Note the username a login on ``request`` tries, for failed-login policies."""
    setattr(request, _LOGIN, normalize_username(value))


def login_username(request: HttpRequest) -> str | None:
    """The normalised username the login on ``request`` tries (``None`` if none)."""
    return getattr(request, _LOGIN, None)


def _username(request: HttpRequest) -> Identity | None:
    name = login_username(request)
    return None if name is None else Identity("username", name)


def _user(request: HttpRequest) -> list[Identity]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    return [Identity("user", str(user.pk))]


def _from_callable(request: HttpRequest, path: str) -> list[Identity]:
    function = key_function(path)
    value = function(request)
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        raise TypeError(
            f"the key function {path} must return a str or None, not {type(value).__name__}"
        )
    return [Identity("key", value)]


_reported: set[tuple[str, str]] = set()


def _report_not_allowed(spec: PolicySpec) -> None:
    """Log, once per process and policy, that its key function is not allowed."""
    if (spec.name, spec.key_arg) in _reported:
        return
    _reported.add((spec.name, spec.key_arg))
    logger.error(
        "rate-limit policy %r names the key function %r, which KEY_FUNCTIONS does not list "
        "and no @ratelimit names: it is never called, the policy counts by client IP "
        "instead (system check django_ratelimits.E008)",
        spec.name,
        spec.key_arg,
    )


@functools.cache
def key_function(path: str) -> Callable[[HttpRequest], str | None]:
    """The callable at dotted ``path``, imported once.

    Only for allowed paths (:mod:`django_ratelimits.key_functions`). Raises
    ``ImproperlyConfigured`` when it cannot be imported or is not callable.
    """
    try:
        function = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"cannot import the key function {path!r}: {exc}") from exc
    if not callable(function):
        raise ImproperlyConfigured(f"the key function {path!r} is not callable")
    return function  # type: ignore[no-any-return]
