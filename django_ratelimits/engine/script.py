"""The check script: the Lua files joined into one script, run by its SHA."""

from __future__ import annotations

import hashlib
from importlib import resources

# Order matters: the prelude defines what the algorithms use, check.lua last.
_PARTS = (
    "prelude",
    "fixed_window",
    "sliding_window",
    "sliding_window_counter",
    "sliding_log",
    "token_bucket",
    "gcra",
    "check",
)


def _load() -> str:
    lua = resources.files("django_ratelimits.engine").joinpath("lua")
    return "\n".join(lua.joinpath(f"{part}.lua").read_text("utf-8") for part in _PARTS)


SOURCE = _load()
SHA = hashlib.sha1(SOURCE.encode("utf-8")).hexdigest()
