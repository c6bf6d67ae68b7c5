"""The check script: the Lua files joined, run as a script or as a Redis 7 function.

The same code serves both ways. ``SOURCE`` ends by calling ``check`` and runs
by its SHA (``EVALSHA``) on any Redis; ``LIBRARY`` registers ``check`` as the
function ``FUNCTION`` (``FCALL``) on Redis 7 and later, where the library's
code runs once, when it is loaded, instead of on every call. Both names carry
the code's digest, so two releases of this package can share one Redis while
a deployment rolls from one to the other.
"""

from __future__ import annotations

import hashlib
from importlib import resources

# Order matters: the prelude defines what the others use, override.lua what ban.lua
# calls, ban.lua what check.lua calls, check.lua last.
_PARTS = (
    "prelude",
    "override",
    "fixed_window",
    "sliding_window",
    "sliding_window_counter",
    "sliding_log",
    "token_bucket",
    "gcra",
    "ban",
    "concurrency",
    "attempts",
    "check",
)


def _load(parts: tuple[str, ...]) -> str:
    lua = resources.files("django_ratelimits.engine").joinpath("lua")
    return "\n".join(lua.joinpath(f"{part}.lua").read_text("utf-8") for part in parts)


_CODE = _load(_PARTS)
_DIGEST = hashlib.sha1(_CODE.encode("utf-8")).hexdigest()[:12]

SOURCE = _CODE + "\nreturn check(KEYS, ARGV)\n"
SHA = hashlib.sha1(SOURCE.encode("utf-8")).hexdigest()

FUNCTION = f"django_ratelimits_check_{_DIGEST}"
LIBRARY = (
    f"#!lua name=django_ratelimits_{_DIGEST}\n"
    + _CODE
    + f"\nKEPT = true\nredis.register_function('{FUNCTION}', check)\n"
)

OVERRIDE = (
    _load(_PARTS[:2])
    + """
bind()
TTL_EXTRA_MS = ARGV[5] + 0
set_override(KEYS[1], ARGV[1], ARGV[2] + 0, ARGV[3], ARGV[4] + 0)
"""
)
"""Staff's block or allow-listing (controls.py), written as a ban writes one: KEYS the
identity's state HASH; ARGV the override field's value, until when (µs), the note,
now (µs) and the TTL's allowance on a test clock (ms). Sent with ``EVAL``: staff's
writes are rare, and a script has no library to be missing after a restart."""
