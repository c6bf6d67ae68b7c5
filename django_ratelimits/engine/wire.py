"""A check's command sent the short way: packed here, written and read on a pooled connection.

redis-py's ``execute_command`` costs a check more client CPU than its round trip: it
encodes the arguments one by one, looks up a response callback, and (redis-py 6 and
later) records operation metrics and retry bookkeeping on every command. A check's
command is bytes, text and integers the engine built itself, and its reply one bulk
string read raw, so :func:`send` packs the command and reads the reply itself.

What ``execute_command`` guarantees still holds: the connection comes from the
client's pool and goes back to it; the connection's retry policy applies (the
engine's own clients have none: a check sent twice could be counted twice); a
socket error drops the connection; an error reply raises ``ResponseError``.

Only a plain standalone client takes this way (:func:`sends_directly`), sync or
asyncio (:func:`asend`): a cluster routes per slot, a single-connection client
serialises on its lock, and a pool with client-side caching answers some reads
itself. They keep ``execute_command``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis import Redis

__all__ = ["asend", "pack", "send", "sends_directly"]


def pack(args: Sequence[str | bytes | int]) -> bytes:
    """``args`` as one RESP array of bulk strings: what Redis reads as a command."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if not isinstance(arg, bytes):  # most of a check's arguments are bytes already
            arg = arg.encode() if isinstance(arg, str) else b"%d" % arg
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def sends_directly(client: object) -> bool:
    """Whether :func:`send` (or, for an asyncio client, :func:`asend`) may talk to
    ``client``'s pool (see the module's text). Cluster clients are neither class."""
    if not isinstance(client, Redis | redis.asyncio.Redis):
        return False
    return (
        client.connection is None  # a sync single-connection client holds its one
        # an asyncio one (redis.asyncio.Redis) connects on first use: it says so
        and not getattr(client, "single_connection_client", False)
        and getattr(client.connection_pool, "cache", None) is None
    )


@functools.cache
def _naming(pool_class: type[Any]) -> tuple[str, ...]:
    """What ``get_connection`` of a pool of ``pool_class`` is called with: nothing, or a
    command name where it is required (redis-py 5.0; 5.3 deprecated it and warns)."""
    parameter = inspect.signature(pool_class.get_connection).parameters.get("command_name")
    if parameter is None or parameter.default is not inspect.Parameter.empty:
        return ()
    return ("FCALL",)


def send(client: Redis, packed: bytes) -> Any:
    """The raw reply to the command ``packed``, sent on a connection of ``client``'s pool."""
    pool = client.connection_pool
    connection = pool.get_connection(*_naming(type(pool)))

    def attempt() -> Any:
        connection.send_packed_command([packed], check_health=True)
        return connection.read_response()

    def failed(error: Exception, *_: Any) -> None:
        connection.disconnect()

    try:
        return connection.retry.call_with_retry(attempt, failed)
    finally:
        pool.release(connection)


async def asend(client: redis.asyncio.Redis, packed: bytes) -> Any:
    """:func:`send` for an asyncio client."""
    pool = client.connection_pool
    connection = await pool.get_connection(*_naming(type(pool)))

    async def attempt() -> Any:
        await connection.send_packed_command([packed], check_health=True)
        return await connection.read_response()

    async def failed(error: Exception, *_: Any) -> None:
        await connection.disconnect()

    try:
        return await connection.retry.call_with_retry(attempt, failed)
    finally:
        await pool.release(connection)
