"""Concurrency slots: what a request holds, and the script that gives them back.

The check script takes a slot for each concurrency limit a request passes
(lua/concurrency.lua), a member of the identity's slots ZSET named by the
request's id. :class:`Held` says which; :meth:`Engine.release
<django_ratelimits.engine.core.Engine.release>` sends :data:`RELEASE` when the
response ends: the one extra round trip a request pays, and only a request
that holds slots. A slot nobody releases (a worker killed mid-request) leaves
when its lease ends, at the next acquisition.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass, field

RELEASE = """\
for i = 1, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[1])
end
return 0
"""
RELEASE_SHA = hashlib.sha1(RELEASE.encode("utf-8")).hexdigest()


def request_id() -> bytes:
    """A new request's id: 16 random characters, unique among the slots of an identity."""
    return base64.urlsafe_b64encode(os.urandom(12))


@dataclass(eq=False)
class Held:
    """The slots one engine call took: the request's id and each slot's ZSET.

    ``released`` turns true once they are given back (or once trying failed:
    the leases free them then), so that releasing twice sends nothing.
    """

    token: bytes
    keys: tuple[str, ...]
    released: bool = field(default=False)
