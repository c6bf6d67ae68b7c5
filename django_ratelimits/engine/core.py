"""The engine: every limit of a request decided in one round trip to Redis."""

from __future__ import annotations

import asyncio
import logging
import struct
import weakref
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from redis import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException, RedisError, ResponseError

from django_ratelimits.engine import awire, script, wire
from django_ratelimits.engine.aconnection import AsyncClient
from django_ratelimits.engine.concurrency import RELEASE, RELEASE_SHA, Held, request_id
from django_ratelimits.engine.decision import Decision, LimitResult
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.keys import IdentityKeys, KeySpace, label, printable
from django_ratelimits.engine.limits import Check, Identity, Limit

RedisClient = Redis | RedisCluster
_REDIS_ERRORS = (RedisError, RedisClusterException)
logger = logging.getLogger("django_ratelimits")
# The give-backs of cancelled calls, kept until they end: the event loop keeps only weak
# references to tasks, and a give-back whose caller was cancelled again has no other.
_giving_back: set[asyncio.Task[None]] = set()
_SETTINGS_KEPT = 64  # settings arguments an engine keeps encoded (by mode and cost)
_ATTEMPTS = 3  # sends of one check: the call, then at most two after "not loaded" errors


def _not_loaded(error: Exception) -> bool:
    """Whether ``error`` only says the check's code is not on that node (yet)."""
    if isinstance(error, NoScriptError):
        return True
    text = str(error).lower()
    return isinstance(error, ResponseError) and (
        "function not found" in text or "fcall" in text or "function|load" in text
    )


class Clock(Protocol):
    """A source of time other than Redis' own, for tests only.

    Nothing in settings can install one: only code that builds an
    :class:`Engine` itself (see :mod:`django_ratelimits.testing`).
    """

    def now_us(self) -> int: ...


Pairs = list[tuple[Identity, Limit]]


@dataclass
class _Gated:
    """A gated check in a call: the gate's verdict comes first, then the results of
    ``fallback`` (the client IP's group) or of ``own`` (the identity's group).

    ``own`` is ``None`` when the identity lives in another slot (a cluster): the
    call holds only the gate and the fallback, and ``later`` goes in a second
    round trip if the gate lets the identity through (``later`` is ``None`` when
    ``own`` is not).
    """

    fallback: Pairs
    own: Pairs | None
    later: Check | None


@dataclass
class _Call:
    """One script call: the groups of identities that share one slot."""

    route: bytes  # a key of the slot, to find its node on a cluster
    keys: list[str | bytes] = field(default_factory=list)
    args: list[str | bytes | int] = field(default_factory=list)
    parts: list[Pairs | _Gated] = field(default_factory=list)
    concurrent: bool = False  # whether the call may take concurrency slots
    token: bytes | None = None  # then the request's id, which _plan names
    # The keys where the call may take a place under the request's id: its concurrency
    # slots, its logins in flight (lua/attempts.lua).
    taking: tuple[str, ...] = ()


@dataclass
class _Found:
    """What one round trip decided, and the gated checks it let through to the next."""

    results: list[LimitResult]
    now_us: int
    later: list[Check]


class Engine:
    """Decides limits against one Redis (standalone, sentinel or cluster).

    ``check`` charges, ``peek`` only looks; both take every :class:`Check` of
    one request and cost one network round trip on standalone Redis (one per
    node involved, sent together, on a cluster). Any Redis failure raises
    :class:`~django_ratelimits.engine.errors.BackendError`.

    ``acheck`` and ``apeek`` are the same for async code: they use the asyncio
    client ``async_client()`` gives for the running loop or, when it gives
    ``None`` (or none was passed), run the sync call in a worker thread, so
    the event loop is never blocked.

    A check that passes a concurrency limit holds a slot until :meth:`release`
    (or :meth:`arelease`) gives back ``Decision.held``, or its lease ends. An
    ``acheck`` (or a reserving ``apeek``) whose caller is cancelled before it returns
    gives back whatever its call may have taken, once the call has ended.

    Staff's writes (reset, block, allow-list, lift) are not here: see
    :class:`~django_ratelimits.engine.controls.Controls`.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        keys: KeySpace | None = None,
        metadata_max_entries: int = 50,
        metadata_ttl: int = 3600,
        offender_retention: int = 86400,
        offender_index_max: int = 1_000_000,
        clock: Clock | None = None,
        async_client: Callable[[], AsyncClient | None] | None = None,
    ) -> None:
        self.client = client
        # Known once: isinstance() against redis-py's cluster class is slow (a protocol
        # in its bases), and the engine asks on every call.
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._line = wire.line(client)  # see engine/wire.py
        # The line of each asyncio client this engine has sent to (engine/awire.py),
        # forgotten with the client (one per event loop).
        self._alines: weakref.WeakKeyDictionary[AsyncClient, awire.AOwn | awire.APooled | None]
        self._alines = weakref.WeakKeyDictionary()
        self.keys = keys or KeySpace()
        self.metadata_max_entries = metadata_max_entries
        self.offender_retention = offender_retention  # seconds an offender record lasts
        self._functions = True  # FCALL until Redis says it has no functions (Redis 6)
        self.clock = clock
        self._async_client = async_client
        per_shard = -(-offender_index_max // self.keys.shards)
        self._tail = b"|%d|%d|%d|%d" % (
            metadata_max_entries,
            metadata_ttl * 1000,
            offender_retention * 1000,
            per_shard,
        )
        self._settings: dict[tuple[str, int], bytes] = {}

    @property
    def cluster(self) -> bool:
        """Whether the engine talks to a Redis Cluster, where one request's identities
        may live on several nodes (decided by one script call each)."""
        return self._cluster is not None

    @property
    def check_command(self) -> str:
        """``FCALL`` (Redis 7+) or ``EVALSHA`` (Redis 6, known after the first check):
        the command that runs checks, and whose ``INFO commandstats`` show their cost."""
        return "FCALL" if self._functions else "EVALSHA"

    def check(
        self, checks: Iterable[Check], *, cost: int = 1, token: bytes | None = None
    ) -> Decision:
        """Charge ``cost`` to every limit of every check that admits it.

        Each check (one identity) is all or nothing: if one of its limits
        denies, none of its limits is charged. A denial is recorded in the
        offender index; metadata, if given, in the identity's metadata list.
        ``token`` is the request's id where it holds or may take places (concurrency
        slots, a login's place in flight: :attr:`Check.reserve`); by default a new one.
        """
        return self._run(self._rounds(checks, "c", cost, token))

    def peek(
        self, checks: Iterable[Check], *, cost: int = 0, token: bytes | None = None
    ) -> Decision:
        """What ``check`` would decide for ``cost``, writing nothing (but the place of
        a :attr:`Check.reserve` check that passes, held by ``token``).

        With the default cost of 0, ``remaining`` is the quota left now.
        """
        return self._run(self._rounds(checks, "p", cost, token))

    async def acheck(
        self, checks: Iterable[Check], *, cost: int = 1, token: bytes | None = None
    ) -> Decision:
        """:meth:`check` for async code."""
        return await self._arun(self._rounds(checks, "c", cost, token))

    async def apeek(
        self, checks: Iterable[Check], *, cost: int = 0, token: bytes | None = None
    ) -> Decision:
        """:meth:`peek` for async code."""
        return await self._arun(self._rounds(checks, "p", cost, token))

    def now_us(self) -> int:
        """The time on the engine's clock (Redis' TIME, or the test clock), in microseconds."""
        if self.clock is not None:
            return self.clock.now_us()
        seconds, micros = self.client.time()
        return int(seconds) * 1_000_000 + int(micros)

    def _rounds(
        self, checks: Iterable[Check], mode: str, cost: int, token: bytes | None = None
    ) -> Generator[list[_Call], list[Any], Decision]:
        """The calls of each round trip, in turn, the replies of each sent back in.

        One round trip, but on a cluster where a gated identity lives in another
        slot than its client IP: that identity's group goes in a second one, and
        only if its gate let it through. And on a cluster, a request with soft checks
        whose other checks span several calls sends its soft checks last, in a round
        of their own, charged only if no other check refused (else peeked): within one
        call the script itself charges them only then.
        """
        checks = list(checks)
        calls = self._prepare(checks, mode, cost, token)
        soft = [c for c in checks if c.soft and c.limits] if mode == "c" else []
        if soft and _spread(calls):
            # A soft check is charged only if the request's refusing checks pass: where
            # they span several calls (a cluster), their answers come first, then the
            # soft checks in a round of their own (peeked if a refusing check refused).
            calls = self._prepare([c for c in checks if not c.soft], mode, cost, token)
        else:
            soft = []
        found, token = yield from self._round(calls, mode, cost, _token(calls))
        if soft:
            shadow = {limit for c in checks if c.shadow for limit in c.limits}
            refused = any(not r.allowed and r.limit not in shadow for r in found.results)
            after = "p" if refused else mode
            calls = self._plan(soft, after, cost, token)
            more, token = yield from self._round(calls, after, cost, token or _token(calls))
            found = _Found(found.results + more.results, max(found.now_us, more.now_us), [])
        held = () if token is None or mode != "c" else self._held(found.results, token)
        return Decision(results=tuple(found.results), now_us=found.now_us, held=held)

    def _round(
        self, calls: list[_Call], mode: str, cost: int, token: bytes | None
    ) -> Generator[list[_Call], list[Any], tuple[_Found, bytes | None]]:
        """What ``calls`` found (``token``: the request id they send, if any), with the
        second round trip of the gated identities they let through that live in another
        slot than their client IP (a cluster); and the request id sent by then."""
        found = self._decode(calls, (yield calls))
        if found.later:
            calls = self._plan(found.later, mode, cost, token)
            token = token or _token(calls)
            more = self._decode(calls, (yield calls))
            found = _Found(found.results + more.results, max(found.now_us, more.now_us), [])
        return found, token

    def _held(self, results: list[LimitResult], token: bytes) -> tuple[Held, ...]:
        """The slots ``token`` may hold: those of the concurrency limits that admitted
        it (one of a group another limit denied was not taken: releasing it is a no-op)."""
        keys = tuple(
            self.keys.of(r.identity).log(r.limit)
            for r in results
            if r.allowed and r.limit.is_concurrency
        )
        return (Held(token, keys),) if keys else ()

    def release(self, held: Held) -> None:
        """Give back the slots ``held`` took: one round trip (one per node holding
        them, sent together, on a cluster); nothing if they were given back already.
        Raises :class:`BackendError` if Redis fails (their leases free them then)."""
        if held.released:
            return
        held.released = True
        groups = self._release_groups(held)
        try:
            pipe = self.client.pipeline(transaction=False)
            for keys in groups:
                command = ("EVALSHA", RELEASE_SHA, len(keys), *keys, held.token)
                pipe.execute_command(*command, **self._route(keys[0]))
            replies = pipe.execute(raise_on_error=False)
            for keys, reply in zip(groups, replies, strict=True):
                if isinstance(reply, NoScriptError):
                    command = ("EVAL", RELEASE, len(keys), *keys, held.token)
                    self.client.execute_command(*command, **self._route(keys[0]))
                elif isinstance(reply, Exception):
                    raise reply
        except _REDIS_ERRORS as exc:
            raise BackendError(f"concurrency release failed: {exc}") from exc

    async def arelease(self, held: Held) -> None:
        """:meth:`release` for async code."""
        client = self._async_client() if self._async_client is not None else None
        if client is None or held.released:
            await asyncio.to_thread(self.release, held)
            return
        held.released = True
        try:
            await asyncio.gather(
                *(self._arelease(client, keys, held.token) for keys in self._release_groups(held))
            )
        except _REDIS_ERRORS as exc:
            raise BackendError(f"concurrency release failed: {exc}") from exc

    async def _arelease(self, client: AsyncClient, keys: list[str], token: bytes) -> None:
        route: dict[str, Any] = {}
        if isinstance(client, AsyncRedisCluster):
            await client.initialize()
            route["target_nodes"] = client.get_node_from_key(keys[0])
        try:
            await client.execute_command("EVALSHA", RELEASE_SHA, len(keys), *keys, token, **route)
        except NoScriptError:
            await client.execute_command("EVAL", RELEASE, len(keys), *keys, token, **route)

    def _release_groups(self, held: Held) -> list[list[str]]:
        """``held``'s keys by slot: one release per slot on a cluster, one in all else."""
        groups: dict[int, list[str]] = {}
        for key in held.keys:
            groups.setdefault(self._slot(key), []).append(key)
        return list(groups.values())

    def _run(self, rounds: Generator[list[_Call], list[Any], Decision]) -> Decision:
        try:
            calls = next(rounds)
            while True:
                calls = rounds.send(self._execute(calls))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _arun(self, rounds: Generator[list[_Call], list[Any], Decision]) -> Decision:
        taking: list[_Call] = []  # the calls sent that may take places, this round's too
        try:
            calls = next(rounds)
            while True:
                taking += [call for call in calls if call.taking]
                if taking:
                    replies = await self._aexecute_taking(calls, taking)
                else:
                    replies = await self._aexecute(calls)
                calls = rounds.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _aexecute_taking(self, calls: list[_Call], taking: list[_Call]) -> list[Any]:
        """:meth:`_aexecute` for a round after which the request may hold places in Redis
        (``taking``: its calls, and those of earlier rounds, that may have taken some).

        The caller's cancellation (on ASGI, the client went away) does not cut the
        call short: once sent, Redis may run it whatever the caller does, and only its
        end tells when that has happened. The cancelled caller waits for that end (its
        reply, or its failure), then for the release of every place ``taking`` may have
        taken under the request's id (a place not taken is left alone), then is
        cancelled. Should that wait be cancelled too, the release still runs.
        """
        sent = asyncio.ensure_future(self._aexecute(calls))
        try:
            return await asyncio.shield(sent)
        except asyncio.CancelledError:
            keys: dict[bytes, dict[str, None]] = {}  # by request id (one per engine call)
            for call in taking:
                assert call.token is not None  # a call that takes places sends the id
                keys.setdefault(call.token, {}).update(dict.fromkeys(call.taking))
            held = [Held(token, tuple(its)) for token, its in keys.items()]
            await self.arelease_shielded(held, after=sent)
            raise

    async def arelease_shielded(
        self, held: Iterable[Held], *, after: asyncio.Future[Any] | None = None
    ) -> None:
        """:meth:`arelease` of each of ``held`` (once ``after`` has ended, if given: its
        reply or its failure) for a caller that is being cancelled, or may be: the caller
        waits for it, and should that wait be cancelled, it goes on. Raises nothing for
        Redis failing: that is logged, and the leases free the places."""
        giving_back = asyncio.ensure_future(self._release_after(list(held), after))
        _giving_back.add(giving_back)
        giving_back.add_done_callback(_giving_back.discard)
        await asyncio.shield(giving_back)

    async def _release_after(self, held: list[Held], after: asyncio.Future[Any] | None) -> None:
        if after is not None:  # a call's end: the release must not reach Redis before it
            await asyncio.wait([after])
            if not after.cancelled():
                after.exception()  # its caller, cancelled, no longer hears of a failure
        for slots in held:
            try:
                await self.arelease(slots)
            except BackendError as error:
                logger.warning(
                    "could not give back %d concurrency slot(s) or login place(s), their "
                    "lease will: %s",
                    len(slots.keys),
                    error,
                )

    def _prepare(
        self, checks: Iterable[Check], mode: str, cost: int, token: bytes | None = None
    ) -> list[_Call]:
        """Validate one request and plan its script calls; nothing is sent."""
        least = 1 if mode == "c" else 0
        if cost < least:
            raise ValueError(f"cost must be at least {least}, not {cost}")
        planned = [c for c in checks if c.limits]
        if any(c.soft for c in planned):  # after the checks whose refusal they wait on
            planned = [c for c in planned if not c.soft] + [c for c in planned if c.soft]
        for chk in planned:
            if cost <= 1 and not chk.costs:  # 1 (or 0 to peek) fits every limit: none to refuse
                continue
            for limit, charged in zip(chk.limits, chk.charges(cost), strict=True):
                if charged < least:
                    raise ValueError(f"cost must be at least {least}, not {charged}")
                if charged > limit.most_cost and not limit.is_concurrency:
                    raise ValueError(
                        f"cost {charged} exceeds the capacity {limit.most_cost} of "
                        f"{limit.policy} ({limit.rate}): such a request could never pass"
                    )
        return self._plan(planned, mode, cost, token)

    @staticmethod
    def _decode(calls: list[_Call], replies: list[Any]) -> _Found:
        found = _Found([], 0, [])
        for call, reply in zip(calls, replies, strict=True):
            values = struct.unpack(f"<{len(reply) // 8}q", reply)
            found.now_us = max(found.now_us, values[0])
            n = 1
            for part in call.parts:
                if isinstance(part, list):
                    pairs = part
                else:
                    passed, n = values[n], n + 1
                    if passed and part.later is not None:
                        found.later.append(part.later)
                    pairs = (part.own or []) if passed else part.fallback
                for identity, limit in pairs:
                    # outcome: 1 allowed, 0 denied by the limit, 2 denied by a block,
                    # 3 refused only for the failed logins in flight (lua/attempts.lua)
                    outcome, remaining, retry, reset = values[n : n + 4]
                    n += 4
                    found.results.append(
                        LimitResult(
                            identity,
                            limit,
                            outcome == 1,
                            remaining,
                            retry,
                            reset,
                            outcome == 2,
                            outcome == 3,
                        )
                    )
        return found

    def _plan(
        self, checks: list[Check], mode: str, cost: int, token: bytes | None = None
    ) -> list[_Call]:
        """Group the checks into script calls: one call, or one per slot on a cluster.

        A gated check goes where its client IP lives: the gate, then the IP's
        group (the fallback), then the identity's own group if it shares the
        slot, else the identity is left for a second round trip (see :class:`_Gated`).
        The fallback leaves out the limits that a check of the IP without a gate
        already counts in this request (a policy counting the address and the user:
        a user over budget is counted against the address once, not twice).
        """
        # The script reads Redis' TIME, but on a test clock, whose time comes first.
        leading: list[Any] = [] if self.clock is None else [self.clock.now_us()]
        calls: dict[int, _Call] = {}
        counted: set[tuple[Identity, bytes]] | None = None  # made at the first gate
        for chk in checks:
            keys = self.keys.of(chk.identity)
            gate = chk.gate
            if gate is None:
                call = self._call_of(calls, keys)
                call.parts.append(self._group(call, keys, chk))
                continue
            client = self.keys.of(gate.client)
            call = self._call_of(calls, client)
            together = self._slot(client.encoded_state) == self._slot(keys.encoded_state)
            budget = gate.budget
            if counted is None:
                counted = _counted(checks)
            uncounted = _uncounted(chk, gate.client, counted)
            # The groups that follow the gate (check.lua): shape 2 the fallback and the
            # identity's, 1 the fallback alone; 3 and 0 the same with no fallback.
            shape = (2 if together else 1) if uncounted is not None else (3 if together else 0)
            call.keys.append(client.gate(chk.identity.kind, budget))
            header = b"%d|%d|%d" % (budget.limit, budget.window_us, shape)
            call.args += [b"g", header, keys.member]
            fallback = (
                [] if uncounted is None else self._group(call, client, uncounted, gate.client)
            )
            if together:
                call.parts.append(_Gated(fallback, self._group(call, keys, chk), None))
            else:
                call.parts.append(_Gated(fallback, None, replace(chk, gate=None)))
        settings = self._settings.get((mode, cost))
        if settings is None:  # the script's settings argument, one per mode and cost
            settings = b"%s|%d%s" % (mode.encode(), cost, self._tail)
            if len(self._settings) < _SETTINGS_KEPT:  # a cost per request cannot grow it
                self._settings[mode, cost] = settings
        leading.append(settings)
        for call in calls.values():
            if call.concurrent:  # its slots are the request's: one id for all of them
                token = call.token = token or request_id()
                call.args[:0] = [*leading, b"r", token]
            else:
                call.args[:0] = leading
        return list(calls.values())

    @staticmethod
    def _group(
        call: _Call, keys: IdentityKeys, chk: Check, fallback: Identity | None = None
    ) -> Pairs:
        """Add the group of ``chk`` (its identity's ``keys`` and its limits) to
        ``call``, without its gate; its pairs. With ``fallback`` (a gate's client IP,
        whose ``keys`` are given), the group counts that identity instead, without
        the check's metadata."""
        identity, limits = chk.identity if fallback is None else fallback, chk.limits
        metadata = chk.metadata if fallback is None else None
        if len(limits) > 1 and len({limit.encoded_spec for limit in limits}) != len(limits):
            raise ValueError(f"a limit is given twice for {label(identity)}")
        call.keys.append(keys.encoded_state)
        logs = [keys.log(limit) for limit in limits if limit.is_log]
        if logs:
            call.keys += logs
            slots = tuple(keys.log(limit) for limit in limits if limit.is_concurrency)
            if slots:
                call.concurrent = True
                call.taking += slots
        if chk.reserve:  # its logins in flight (lua/attempts.lua), by the request's id
            call.keys.append(keys.attempts)
            call.concurrent = True
            call.taking += (keys.attempts,)
        # Two arguments. The limits, after the group's 4 flags: the script parses
        # each distinct text once. The info: the label, then a hit entry's head after
        # a "\n" (neither holds one: both are printable). The script reads the ident
        # from the state key.
        records = b"n" if metadata is None else b"a" if chk.record_every else b"d"
        flags = (
            (b"s" if chk.shadow else b"e")
            + (b"o" if chk.overrides else b"x")
            + records
            + (b"c" if chk.soft else b"v" if chk.reserve else b"r")
        )
        head = "" if metadata is None else printable(metadata, 300)
        info = f"{label(identity)}\n{head}"
        if chk.costs:  # limits that charge their own cost (a policy's cost per request)
            framed = flags + b"".join(map(Limit.framed_at, limits, chk.costs))
        else:
            framed = flags + b"".join([limit.framed_spec for limit in limits])
        call.args += [framed, info]
        return [(identity, limit) for limit in limits]

    def _call_of(self, calls: dict[int, _Call], keys: IdentityKeys) -> _Call:
        """The call of ``calls`` for the slot of ``keys``, added if it is the first."""
        slot = 0 if self._cluster is None else self._slot(keys.encoded_state)
        call = calls.get(slot)
        if call is None:
            call = calls[slot] = _Call(keys.encoded_state)
        return call

    def _slot(self, key: str | bytes) -> int:
        if self._cluster is not None:
            return int(self._cluster.keyslot(key))
        return 0

    def _execute(self, calls: list[_Call]) -> list[Any]:
        if not calls:  # nothing to decide: no round trip
            return []
        try:
            if len(calls) == 1:
                return [self._eval(calls[0])]
            return self._eval_many(calls)
        except _REDIS_ERRORS as exc:
            raise BackendError(f"rate-limit check failed: {exc}") from exc

    def _route(self, key: str | bytes) -> dict[str, Any]:
        """On a cluster, name the node that serves ``key``'s slot, so redis-py
        does not ask the server which keys a command has (COMMAND GETKEYS:
        one more round trip per command)."""
        if self._cluster is not None:
            return {"target_nodes": self._cluster.get_node_from_key(key)}
        return {}

    def _command(self, call: _Call) -> tuple[Any, ...]:
        """The check as one command: FCALL of the library's function on Redis 7+, else
        EVALSHA of the script."""
        how = ("FCALL", script.FUNCTION) if self._functions else ("EVALSHA", script.SHA)
        return (*how, len(call.keys), *call.keys, *call.args)

    def _after(self, call: _Call, error: ResponseError, attempt: int) -> list[tuple[Any, ...]]:
        """What to send next when sending ``call`` the ``attempt``-th time (from 0)
        was answered ``error``: after a :func:`_not_loaded` error, what loads the code,
        then the check (the last reply being the check's); any other error, or one
        after the last attempt, is raised."""
        if attempt == _ATTEMPTS - 1 or not _not_loaded(error):
            raise error
        return self._recover(call, error)

    def _recover(self, call: _Call, error: Exception) -> list[tuple[Any, ...]]:
        if isinstance(error, NoScriptError):
            # Redis restarted or its script cache was flushed: EVAL runs the
            # script and caches it again, so the next call uses EVALSHA.
            return [("EVAL", script.SOURCE, len(call.keys), *call.keys, *call.args)]
        if "function not found" in str(error).lower():
            # A new or restarted node, or FUNCTION FLUSH: load the library once.
            return [("FUNCTION", "LOAD", "REPLACE", script.LIBRARY), self._command(call)]
        # FCALL or FUNCTION LOAD unknown (Redis 6) or not permitted: scripts from now on.
        self._functions = False
        return [self._command(call)]

    def _eval(self, call: _Call) -> Any:
        route, commands, attempt = self._route(call.route), [self._command(call)], 0
        while True:
            try:
                return [self._send(c, route) for c in commands][-1]
            except ResponseError as exc:
                commands, attempt = self._after(call, exc, attempt), attempt + 1

    def _send(self, command: tuple[Any, ...], route: dict[str, Any]) -> Any:
        if self._line is not None:
            return self._line.send(wire.pack(command))
        return self.client.execute_command(*command, **route)

    def _eval_many(self, calls: list[_Call]) -> list[Any]:
        """One check per slot, pipelined: nodes are written before any is read."""
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*self._command(call), **self._route(call.route))
        replies: list[Any] = pipe.execute(raise_on_error=False)
        for n, reply in enumerate(replies):
            if isinstance(reply, Exception):
                if not _not_loaded(reply):
                    raise reply
                replies[n] = self._eval(calls[n])
        return replies

    async def _aexecute(self, calls: list[_Call]) -> list[Any]:
        if not calls:
            return []
        client = self._async_client() if self._async_client is not None else None
        if client is None:
            return await asyncio.to_thread(self._execute, calls)
        try:
            # One coroutine per call: each cluster node is written to at once.
            return list(await asyncio.gather(*(self._aeval(client, call) for call in calls)))
        except _REDIS_ERRORS as exc:
            raise BackendError(f"rate-limit check failed: {exc}") from exc

    async def _aeval(self, client: AsyncClient, call: _Call) -> Any:
        route: dict[str, Any] = {}
        if isinstance(client, AsyncRedisCluster):
            await client.initialize()  # loads the slot map once; a no-op after that
            route["target_nodes"] = client.get_node_from_key(call.route.decode())
        commands, attempt = [self._command(call)], 0
        while True:
            try:
                return [await self._asend(client, c, route) for c in commands][-1]
            except ResponseError as exc:
                commands, attempt = self._after(call, exc, attempt), attempt + 1

    async def _asend(
        self, client: AsyncClient, command: tuple[Any, ...], route: dict[str, Any]
    ) -> Any:
        try:
            line = self._alines[client]
        except KeyError:  # the first call on this client (one per event loop)
            line = self._alines[client] = awire.aline(client)
        if line is not None:
            return await line.send(wire.pack(command))
        return await client.execute_command(*command, **route)


def _spread(calls: list[_Call]) -> bool:
    """Whether the calls' answers come from several scripts: several calls, or a gated
    identity decided in a second round trip (a cluster)."""
    return len(calls) > 1 or any(
        isinstance(part, _Gated) and part.own is None for call in calls for part in call.parts
    )


def _token(calls: list[_Call]) -> bytes | None:
    """The request's id the calls send, if they may take concurrency slots."""
    return next((call.token for call in calls if call.token is not None), None)


def _counted(checks: list[Check]) -> set[tuple[Identity, bytes]]:
    """The (identity, limit spec) pairs that the checks without a gate count."""
    return {
        (c.identity, limit.encoded_spec) for c in checks if c.gate is None for limit in c.limits
    }


def _uncounted(chk: Check, client: Identity, counted: set[tuple[Identity, bytes]]) -> Check | None:
    """``chk`` without the limits that ``counted`` (client, spec) pairs name: what its
    gate's fallback counts against ``client`` that no other check of the call does;
    None if that is nothing (the common case of a policy counting the address and the
    user: no check is made to be thrown away)."""
    kept = [n for n, limit in enumerate(chk.limits) if (client, limit.encoded_spec) not in counted]
    if not kept:
        return None
    if len(kept) == len(chk.limits):
        return chk
    costs = tuple(chk.costs[n] for n in kept) if chk.costs else ()
    return replace(chk, limits=tuple(chk.limits[n] for n in kept), costs=costs)
