"""Redis key names: bounded, unbreakable by user input, one hash tag per identity.

Layout (``P`` is the key prefix, ``{sN}`` the identity's shard tag)::

    P:{sN}:<algo>:<policy>:<rate>:<ident>   state of one limit for one identity
    P:{sN}:m:<ident>                        metadata list (capped)
    P:{sN}:o:<ident>                        offender record (HASH)
    P:{sN}:ox                               offender index of shard N (ZSET)

Every key of an identity carries the identity's shard tag, so on Redis Cluster
they share one slot with each other and with the shard's offender index, and
one script can update them all. ``<ident>`` is ``kind:value`` when the value is
short and made of safe characters, else ``kind:~`` and a digest of the value.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from django_ratelimits.engine.limits import Identity, Limit

_SAFE_PART = re.compile(r"[A-Za-z0-9._:@/+=-]{1,64}")
_LABEL_MAX = 200


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
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in text[:limit])


def ident(identity: Identity) -> str:
    """The identity as it appears in keys and in the offender index."""
    return f"{identity.kind}:{key_part(identity.value)}"


def label(identity: Identity) -> str:
    """The identity as people read it (dashboard), bounded and printable."""
    return printable(f"{identity.kind}:{identity.value}")


@dataclass(frozen=True)
class KeySpace:
    """Names every key the engine writes for one prefix and shard count."""

    prefix: str = "rl"
    shards: int = 64

    def shard(self, ident: str) -> int:
        digest = hashlib.blake2b(ident.encode("ascii"), digest_size=4).digest()
        return int.from_bytes(digest, "big") % self.shards

    def tag(self, ident: str) -> str:
        """``prefix:{sN}``: the start of every key of this identity."""
        return f"{self.prefix}:{{s{self.shard(ident)}}}"

    def state(self, ident: str, limit: Limit) -> str:
        policy = key_part(limit.policy)
        return f"{self.tag(ident)}:{limit.algorithm.code}:{policy}:{limit.rate}:{ident}"

    def metadata(self, ident: str) -> str:
        return f"{self.tag(ident)}:m:{ident}"

    def record(self, ident: str) -> str:
        return f"{self.tag(ident)}:o:{ident}"

    def index(self, shard: int) -> str:
        return f"{self.prefix}:{{s{shard}}}:ox"
