"""Blocked networks without a database: an admin's text checked, and the index requests use.

:func:`parse_network` turns what an admin (or ``manage.py ratelimits block-network``)
writes into one canonical network, or a ``ValidationError`` that admin shows next to
the field. :class:`NetworkIndex` holds the enabled, unexpired entries of one load,
compiled so that a lookup costs one dictionary probe per distinct prefix length
present (at most 33 for IPv4, 129 for IPv6, a handful in practice), whatever the
number of entries. An entry stops applying at its expiry on its own: every hit is
checked against the time, and the index knows its next expiry, after which the
registry prunes it (no database read, no wait for an edit).
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from django_ratelimits.conf import IPNetwork, unmapped
from django_ratelimits.policies.parse import cidr_error

__all__ = ["BROADEST_PREFIX", "NETWORK_MAX_LENGTH", "BlockedEntry", "NetworkIndex", "parse_network"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NETWORK_MAX_LENGTH: Final = 64
"""Longer than any network's text (an IPv6 CIDR has at most 43 characters)."""

BROADEST_PREFIX: Final[Mapping[int, int]] = {4: 8, 6: 16}
"""The shortest prefix an entry may have, per IP version: a /0 (every address) or a
/4 is a mistake that would lock out everyone, the admins included, and is refused."""


def parse_network(text: str) -> IPNetwork:
    """One address or network in canonical form, or a ``ValidationError``.

    ``203.0.113.7`` is ``203.0.113.7/32``; host bits set (``203.0.113.5/24``)
    are refused, naming the network meant, rather than silently widened; an
    IPv4-mapped IPv6 network (``::ffff:203.0.113.0/120``) becomes the IPv4
    network, which is what mapped client addresses are looked up as.
    """
    item = text.strip()
    if not item or len(item) > NETWORK_MAX_LENGTH or not item.isascii():
        raise ValidationError(
            _("Enter an IP address or network such as 203.0.113.0/24 or 2001:db8::/32."),
            code="network",
        )
    network = unmapped(_network(item))
    broadest = BROADEST_PREFIX[network.version]
    if network.prefixlen < broadest:
        raise ValidationError(
            _(
                "%(network)s covers too many addresses (it could lock everyone out, "
                "you included): the broadest entry allowed is a /%(prefix)s."
            ),
            code="network_too_broad",
            params={"network": str(network), "prefix": broadest},
        )
    return network


def _network(item: str) -> IPNetwork:
    """``ipaddress.ip_network(item)``, about four times faster on the usual forms
    (``address/prefix``, the stored one): a worker parses every entry on each reload."""
    address, slash, prefix = item.partition("/")
    if not slash or (prefix.isdigit() and len(prefix) <= 3):
        try:
            packed = socket.inet_pton(
                socket.AF_INET6 if ":" in address else socket.AF_INET, address
            )
            bits = int(prefix) if slash else len(packed) * 8
            value = int.from_bytes(packed, "big")
            # Strict: host bits set, or a prefix too long, raise ValueError.
            return (
                ipaddress.IPv4Network((value, bits))
                if len(packed) == 4
                else (ipaddress.IPv6Network((value, bits)))
            )
        except (OSError, ValueError):
            pass  # ip_network decides, and says why
    try:
        return ipaddress.ip_network(item)
    except ValueError:
        raise cidr_error(item) from None


@dataclass(frozen=True)
class BlockedEntry:
    """One enabled blocklist row: its network, why, and until when (epoch seconds)."""

    network: IPNetwork
    reason: str = ""
    expires_at: float | None = None
    pk: int | None = None

    def live(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


# Per prefix length, most specific first: (bits to shift the address right, its table).
_Tables = tuple[tuple[int, dict[int, BlockedEntry]], ...]


class NetworkIndex:
    """The live entries of one load, by IP version and prefix length.

    ``next_expiry`` is the earliest expiry of an entry (``math.inf`` if none
    expires): from then on :meth:`pruned` gives the index without it.
    """

    def __init__(self, entries: Iterable[BlockedEntry] = (), now: float = 0.0) -> None:
        self.entries = tuple(e for e in entries if e.live(now))
        self.next_expiry = min(
            (e.expires_at for e in self.entries if e.expires_at is not None), default=math.inf
        )
        tables: dict[int, dict[int, dict[int, BlockedEntry]]] = {4: {}, 6: {}}
        for entry in self.entries:
            network = entry.network
            table = tables[network.version].setdefault(network.prefixlen, {})
            key = int(network.network_address) >> (network.max_prefixlen - network.prefixlen)
            known = table.get(key)
            # The same network twice: the entry that lasts longer decides.
            if known is None or _until(entry) > _until(known):
                table[key] = entry
        self._v4 = _ordered(tables[4], 32)
        self._v6 = _ordered(tables[6], 128)

    def __len__(self) -> int:
        return len(self.entries)

    def find(self, address: IPAddress, now: float) -> BlockedEntry | None:
        """The live entry whose network holds ``address`` (the most specific), else None."""
        tables = self._v4 if address.version == 4 else self._v6
        if not tables:
            return None
        value = int(address)
        for shift, table in tables:
            entry = table.get(value >> shift)
            if entry is not None and entry.live(now):
                return entry
        return None

    def pruned(self, now: float) -> NetworkIndex:
        """This index without the entries expired at ``now``."""
        return NetworkIndex(self.entries, now)


def _until(entry: BlockedEntry) -> float:
    return math.inf if entry.expires_at is None else entry.expires_at


def _ordered(tables: dict[int, dict[int, BlockedEntry]], bits: int) -> _Tables:
    return tuple((bits - prefix, tables[prefix]) for prefix in sorted(tables, reverse=True))
