"""Redis key names: bounded, unbreakable by user input, one hash tag per identity.

Layout (``P`` is the key prefix, ``{sN}`` the identity's shard tag)::

    P:{sN}:s:<ident>                        state of every limit (HASH, a field per limit),
                                            its TTL horizon (t), its override (x)
    P:{sN}:log:<policy>:<rate>:<ident>      a sliding log's timestamps (ZSET)
    P:{sN}:cc:<policy>:<ident>              a concurrency limit's slots (ZSET of request
                                            ids scored by the end of their lease)
    P:{sN}:v:<ident>                        failed logins in flight (ZSET of request ids
                                            scored by the end of their lease)
    P:{sN}:m:<ident>                        metadata list (capped)
    P:{sN}:o:<ident>                        offender record: denials (HASH)
    P:{sN}:so:<ident>                       shadow record: would-be denials of shadow policies
    P:{sN}:xn:<ident>                       the override's note: who set it, when (JSON)
    P:{sN}:g:<kind>:<n>:<us>:<ident>        identity budget of a client IP (ZSET of digests)
    P:{sN}:ox                               offender index of shard N, by last denial (ZSET)
    P:{sN}:oxn                              offender index of shard N, by denial count (ZSET)
    P:{sN}:sox, P:{sN}:soxn                 the same two indexes of the shadow records
    P:{sN}:xs                               overrides in force in shard N, by end (ZSET)

Shadow-mode policies never deny, so what they would have denied is kept in a
ledger of its own (``so`` records, ``sox`` indexes), never counted as a denial.

An identity's shard comes from a hash of its ``ident`` keyed with the key
space's secret, so nobody without the secret can choose identities that share
a shard (and push a chosen one out of the shard's capped offender index).

Every key of an identity carries the identity's shard tag, so on Redis Cluster
they share one slot with each other and with the shard's offender index, and
one script can update them all. ``<ident>`` is ``kind:value`` when the value is
short and made of safe characters, else ``kind:~`` and a digest of the value.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_ratelimits.engine.limits import Identity, Limit
from django_ratelimits.rates import Rate

_SAFE_PART = re.compile(r"[A-Za-z0-9._:@/+=-]{1,64}")
# Identities whose key names each key space keeps, and the longest value kept by itself.
KEYS_CACHED = 4096
_CACHED_VALUE_MAX = 64
_LABEL_MAX = 200
# The state HASH's field that says until when (ms, on the engine's clock) the key's
# TTL lasts: written by the check script (HORIZON in lua/check.lua), never a limit's
# spec (specs hold "|").
HORIZON = "t"
# The state HASH's field holding the identity's override (blocked or allow-listed
# until a time, engine/overrides.py): read with the limits, in the same HMGET.
OVERRIDE = "x"
# The start of the state HASH's field that holds a policy's escalating ban (its level
# and recent denials, lua/ban.lua): "!ban|<policy>", never a spec (specs start with an
# algorithm's code).
BAN_FIELD = "!ban|"


# Down to this depth every shard gives all its entries to a merge of the shards'
# indexes (the offenders, the overrides in force), so the merge is exact.
EXACT_DEPTH = 100


def shard_share(want: int, shards: int) -> int:
    """How many entries of each of ``shards`` indexes to read so that their merge holds
    its first ``want``: all of them down to :data:`EXACT_DEPTH`, then about twice an even
    share, which hashing identities to shards makes ample."""
    return want if want <= EXACT_DEPTH else min(want, 2 * want // shards + 50)


def key_part(value: str) -> str:
    """``value`` if it is short and safe in a key, else ``~`` and its digest.

    Digests never collide with raw values, which cannot contain ``~``.
    """
    if _SAFE_PART.fullmatch(value):
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=15).digest()
    return "~" + base64.urlsafe_b64encode(digest).decode("ascii")


def printable(text: str, limit: int = _LABEL_MAX) -> str:
    """``text`` cut to ``limit`` characters, anything unprintable replaced."""
    text = text[:limit]
    if text.isprintable():  # the usual case, at C speed
        return text
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


def ident(identity: Identity) -> str:
    """The identity as it appears in keys and in the offender index."""
    return f"{identity.kind}:{key_part(identity.value)}"


def label(identity: Identity) -> str:
    """The identity as people read it (dashboard), bounded and printable.

    A value cut short or with characters replaced ends with its digest (its key's,
    :func:`key_part`), so that two identities never read the same on the dashboard:
    values equal in their first 200 characters, or apart only in what cannot be
    printed, would otherwise show as one identity in two rows.
    """
    text = f"{identity.kind}:{identity.value}"
    shown = printable(text)
    if shown == text:
        return text
    return f"{shown}\u2026 {key_part(identity.value)}"


def _index(tag: str, shadow: bool = False) -> str:
    """The offender index of the shard whose tag is ``tag``, scored by last denial; with
    ``shadow``, the shadow ledger's, by last would-be denial. By count: this and "n"."""
    return f"{tag}:{'so' if shadow else 'o'}x"


@dataclass(frozen=True)
class IdentityKeys:
    """Every key name of one identity, from one digest of it: its ident, its shard's
    tag and the state key a check names (so that working them out for an identity not
    seen lately is cheap: the other names are built when asked for, off the check's
    path)."""

    ident: str
    tag: str  # ``prefix:{sN}``: the start of every key of this identity
    # :attr:`state`, the one key every check of the identity names, encoded once (key
    # names are cached with the identity, see ``KeySpace.of``). The script names the
    # others from it, its tag and its ident, when it writes them (``who_of`` in
    # lua/prelude.lua).
    encoded_state: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoded_state", self.state.encode())

    @property
    def index(self) -> str:
        """The offender index of the identity's shard, by last denial."""
        return _index(self.tag)

    @property
    def count_index(self) -> str:
        """The same, by denial count."""
        return _index(self.tag) + "n"

    @property
    def shadow_index(self) -> str:
        """The shadow index of the shard, by last would-be denial."""
        return _index(self.tag, shadow=True)

    @property
    def shadow_count_index(self) -> str:
        """The same, by would-be denial count."""
        return _index(self.tag, shadow=True) + "n"

    @property
    def state(self) -> str:
        """The HASH of the identity's limits, one field per limit (``Limit.spec``).
        Sliding logs have keys of their own (:meth:`log`)."""
        return f"{self.tag}:s:{self.ident}"

    @property
    def metadata(self) -> str:
        return f"{self.tag}:m:{self.ident}"

    @property
    def record(self) -> str:  # check.lua builds it too (index name less its "x" + ":")
        return f"{self.tag}:o:{self.ident}"

    @property
    def shadow_record(self) -> str:
        return f"{self.tag}:so:{self.ident}"

    @property
    def override_note(self) -> str:
        return f"{self.tag}:xn:{self.ident}"

    @property
    def attempts(self) -> str:
        """The failed logins of the identity in flight (lua/attempts.lua): a ZSET."""
        return f"{self.tag}:v:{self.ident}"

    @property
    def override_index(self) -> str:
        """The overrides in force in the identity's shard (:meth:`KeySpace.override_index`)."""
        return f"{self.tag}:xs"

    @functools.cached_property
    def member(self) -> bytes:
        """The identity in a client's identity budget: 12 characters of its digest,
        so a budget of n members holds about 12n bytes however long the values."""
        digest = hashlib.blake2b(self.ident.encode("ascii"), digest_size=9).digest()
        return base64.urlsafe_b64encode(digest)

    def gate(self, kind: str, budget: Rate) -> str:
        """The identity budget (ZSET) of this client IP for identities of ``kind``."""
        return f"{self.tag}:g:{kind}:{budget.limit}:{budget.window_us}:{self.ident}"

    def log(self, limit: Limit) -> str:
        """The ZSET of a sliding-log limit, or of a concurrency limit's slots (one per
        policy: a lease edited in admin does not free or forget the slots held)."""
        if limit.is_concurrency:
            return f"{self.tag}:cc:{key_part(limit.policy)}:{self.ident}"
        return f"{self.tag}:log:{key_part(limit.policy)}:{limit.rate}:{self.ident}"


@dataclass(frozen=True)
class KeySpace:
    """Names every key the engine writes for one prefix, shard count and secret.

    ``secret`` (at most 64 bytes) keys the hash that places identities in
    shards; :func:`~django_ratelimits.engine.get_engine` passes the one the
    settings derive (``SHARD_SECRET``). Without one, placement is predictable:
    anyone can find identities that share a shard. Every writer and reader of
    the same keys must use the same secret.
    """

    prefix: str = "rl"
    shards: int = 64
    secret: bytes = field(default=b"", repr=False)
    _tags: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _placing: Any = field(init=False, repr=False, compare=False)  # hashlib's blake2b
    _seen: Callable[[str, str], IdentityKeys] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A brace would move the hash tag (so the slot) of every key, and check.lua
        # finds an identity's tag as its state key's start up to the first "}".
        if "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"a key prefix cannot hold '{{' or '}}', not {self.prefix!r}")
        # Worked out once per key space: the shards' tags, the keyed hash that places
        # identities (copied per identity, cheaper than keying a new one), and the
        # names of the identities seen lately (see ``of``).
        tags = tuple(f"{self.prefix}:{{s{n}}}" for n in range(self.shards))
        placing = hashlib.blake2b(digest_size=4, key=self.secret)
        seen = functools.lru_cache(maxsize=KEYS_CACHED)(self._named)
        object.__setattr__(self, "_tags", tags)
        object.__setattr__(self, "_placing", placing)
        object.__setattr__(self, "_seen", seen)

    def of(self, identity: Identity) -> IdentityKeys:
        """The keys of ``identity``. Busy identities come back request after request:
        their names are worked out once, and found again by kind and value (an ident
        is at most ~80 characters; a longer value is found by its ident, which digests
        it, so that the cache never holds long values)."""
        if len(identity.value) > _CACHED_VALUE_MAX:
            return self._seen("", ident(identity))
        return self._seen(identity.kind, identity.value)

    def of_ident(self, who: str) -> IdentityKeys:
        """The keys of an identity known by its ``ident`` (an offender index member)."""
        return self._seen("", who)

    def _named(self, kind: str, value: str) -> IdentityKeys:
        """The keys of the identity ``kind``/``value``; with no kind, ``value`` is its ident."""
        who = f"{kind}:{key_part(value)}" if kind else value
        placing = self._placing.copy()
        placing.update(who.encode("ascii"))
        shard = int.from_bytes(placing.digest(), "big") % self.shards
        return IdentityKeys(who, self._tags[shard])

    def tag(self, shard: int) -> str:
        """The hash tag of shard ``shard``: the start of every key in it."""
        return self._tags[shard]

    def index(self, shard: int, *, shadow: bool = False) -> str:
        """The offender index of shard ``shard``, scored by last denial (ms); with
        ``shadow``, the shadow ledger's, by last would-be denial."""
        return _index(self.tag(shard), shadow)

    def count_index(self, shard: int, *, shadow: bool = False) -> str:
        """The offender index of shard ``shard`` (or its shadow one), scored by count."""
        return f"{self.index(shard, shadow=shadow)}n"

    def override_index(self, shard: int) -> str:
        """The overrides of shard ``shard`` (blocks and allow-listings), scored by
        when each ends (ms); staff's writes keep it, trimmed by time."""
        return f"{self.tag(shard)}:xs"
