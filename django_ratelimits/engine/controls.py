"""What staff do to one identity's state in Redis: reset, block, allow-list, lift.

The hot path (:class:`~django_ratelimits.engine.core.Engine`'s ``check``) only
reads what these write. Every call is one round trip (one pipeline, or one
command) to the node of the identity's slot, and any Redis failure raises
:class:`~django_ratelimits.exceptions.BackendError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import RedisClusterException, RedisError

from django_ratelimits.engine import overrides
from django_ratelimits.engine.core import Engine
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import label
from django_ratelimits.engine.limits import Identity, Limit
from django_ratelimits.engine.overrides import Override

_REDIS_ERRORS = (RedisError, RedisClusterException)
MAX_OVERRIDE = 365 * 86_400  # seconds


class Controls:
    """Staff's writes to the identities of one engine's key space."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def reset(
        self, identity: Identity, limits: Sequence[Limit] = (), *, forget: bool = False
    ) -> None:
        """Clear ``identity``'s state under ``limits``.

        With ``forget``, also drop its metadata list and offender and shadow
        records and take it out of their indexes.
        """
        keys = self.engine.keys.of(identity)
        fields = [limit.spec for limit in limits if not limit.is_log]
        names = [keys.log(limit) for limit in limits if limit.is_log]
        if forget:
            names += [keys.metadata, keys.record, keys.shadow_record]
        try:
            pipe = self.engine.client.pipeline(transaction=False)
            route = self.engine._route(keys.record)  # every key here shares its slot
            if fields:
                pipe.execute_command("HDEL", keys.state, *fields, **route)
            if names:
                pipe.execute_command("UNLINK", *names, **route)
            if forget:
                pipe.execute_command("ZREM", keys.index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.count_index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.shadow_index, keys.ident, **route)
                pipe.execute_command("ZREM", keys.shadow_count_index, keys.ident, **route)
            pipe.execute()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not reset {label(identity)}: {exc}") from exc

    def block(self, identity: Identity, seconds: float) -> None:
        """Deny every check of ``identity`` for ``seconds``, whatever its limits say."""
        self._override(identity, overrides.BLOCKED, seconds)

    def allow(self, identity: Identity, seconds: float) -> None:
        """Admit every check of ``identity`` for ``seconds``, uncounted."""
        self._override(identity, overrides.ALLOWED, seconds)

    def lift(self, identity: Identity) -> None:
        """End a block or allow-listing of ``identity``."""
        try:
            self.engine.client.delete(self.engine.keys.of(identity).override)
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not lift the override of {label(identity)}: {exc}") from exc

    def override(self, identity: Identity) -> Override | None:
        """The block or allow-listing of ``identity`` in force, or ``None``."""
        try:
            value = self.engine.client.get(self.engine.keys.of(identity).override)
            now = self.engine.now_us()
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not read the override of {label(identity)}: {exc}") from exc
        return overrides.decode(value, now)

    def _override(self, identity: Identity, mode: str, seconds: float) -> None:
        if not 0 < seconds <= MAX_OVERRIDE:
            raise ValueError(f"an override lasts from 0 to 365 days, not {seconds} s")
        engine = self.engine
        try:
            until = engine.now_us() + round(seconds * 1_000_000)
            # A test clock may stand still past the key's TTL: give the key a minute more.
            ttl_ms = round(seconds * 1000) + (60_000 if engine.clock else 0)
            value = overrides.marker(mode, until)
            engine.client.set(engine.keys.of(identity).override, value, px=ttl_ms)
        except _REDIS_ERRORS as exc:
            raise BackendError(f"could not override {label(identity)}: {exc}") from exc
