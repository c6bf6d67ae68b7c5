"""The asyncio twin of :mod:`~django_ratelimits.engine.wire`: a check's command on an
asyncio client's connection, packed by :func:`~django_ratelimits.engine.wire.pack`.

:func:`aline` gives, like :func:`~django_ratelimits.engine.wire.line`:

* :class:`AOwn` for a client of a plain ``redis.asyncio.ConnectionPool`` (the
  engine's own asyncio clients, engine/aconnection.py): connections taken out of
  the pool once and kept between checks. Checking one out and back in takes the
  pool's asyncio lock twice: about 5 µs of client CPU per command timed alone, and
  12 µs per ``acheck`` here. The asyncio client is the package's own
  (engine/aconnection.py), so no other code shares its pool.
* :class:`APooled` for any other standalone pool (a blocking pool, whose waiters
  need connections back): a connection checked out of it per command.
* ``None`` for a cluster or a single-connection client: ``execute_command``.

asyncio connections belong to the event loop that made them, and so do the
engine's asyncio clients (one per running loop), so each client has its own line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from django_ratelimits.engine.wire import naming, sends_directly, watch

__all__ = ["AOwn", "APooled", "aline"]


def aline(client: object) -> AOwn | APooled | None:
    """How the engine sends a check's command to the asyncio ``client``."""
    if not isinstance(client, redis.asyncio.Redis) or not sends_directly(client):
        return None
    if type(client.connection_pool) is redis.asyncio.ConnectionPool:
        return AOwn(client.connection_pool)
    return APooled(client)


async def _sent(connection: AbstractConnection, packed: bytes) -> Any:
    """The raw reply to ``packed`` on ``connection``, under its retry policy."""

    async def attempt() -> Any:
        await connection.send_packed_command([packed], check_health=True)
        return await connection.read_response()

    async def failed(error: Exception, *_: Any) -> None:
        await connection.disconnect()

    return await connection.retry.call_with_retry(attempt, failed)


class APooled:
    """Each command on a connection checked out of ``client``'s pool and back in."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client

    async def send(self, packed: bytes) -> Any:
        """The raw reply to the command ``packed``."""
        pool = self.client.connection_pool
        connection = await pool.get_connection(*naming(type(pool)))
        try:
            return await _sent(connection, packed)
        finally:
            await pool.release(connection)


class AOwn:
    """Connections taken out of ``pool`` (a plain asyncio pool) once and kept between
    commands.

    Unlike the sync :class:`~django_ratelimits.engine.wire.Own`, it takes them from
    the pool: the pool is the package's own, so the connections it counts as in use
    keep nobody else out, and closing the client (``aclose()``) closes them with
    the others. Two tasks never share one (a task pops it from the idle list, and
    puts it back once its reply is read); there are never more than the commands
    sent at once. An idle connection that Redis closed or reset, or that holds bytes
    (a reply nobody read: idle, it has nothing to read), is connected anew before the
    command is written, whether the event loop has read Redis' end or the bytes into
    the connection's stream or they still wait in its socket: the loop reads a socket
    only when it polls, not while a task keeps it busy (Redis can close and restart
    meanwhile), so the socket is asked too, as the sync side asks it
    (:func:`~django_ratelimits.engine.wire.watch`: about 1 µs of client CPU per
    command here, 0.7 µs of it the poll). After anything but a reply or an error reply
    (a timeout, a dropped socket, the task cancelled while it waited) the connection
    is disconnected before it goes back, so no command ever reads another's reply.
    """

    def __init__(self, pool: redis.asyncio.ConnectionPool) -> None:
        self._pool = pool
        self._idle: list[AbstractConnection] = []
        # Each connection's stream, and the watch on the socket under it (made anew
        # with the stream when the connection connects anew).
        self._watches: dict[AbstractConnection, tuple[object, Callable[[], object]]] = {}

    async def send(self, packed: bytes) -> Any:
        """The raw reply to the command ``packed``."""
        idle = self._idle
        try:
            connection = idle.pop()
        except IndexError:
            connection = await self._pool.get_connection(*naming(type(self._pool)))
        try:
            reader = connection._reader
            # Closed by us, or by Redis (its end read, or a reset), or holding bytes
            # no command asked for (a reply nobody read, which the event loop read,
            # and decrypted over TLS, into the stream), or with anything in its socket
            # the loop has not read yet (Redis' end, or such a reply): connected anew.
            if (
                reader is None
                or reader._buffer  # type: ignore[attr-defined]  # asyncio's, since 3.4
                or reader.at_eof()
                or reader.exception() is not None
                or self._unread(connection, reader)
            ):
                await connection.disconnect()
                await connection.connect()
            return await _sent(connection, packed)
        except BaseException as error:
            if not isinstance(error, ResponseError):  # an error reply is read whole
                await connection.disconnect(nowait=True)
            raise
        finally:
            idle.append(connection)

    def _unread(self, connection: AbstractConnection, reader: object) -> object:
        """Whether the socket under ``connection``'s stream ``reader`` has anything the
        event loop has not read (over TLS, the raw socket: the loop decrypts what it
        reads, so nothing waits in an SSL layer)."""
        watched = self._watches.get(connection)
        if watched is None or watched[0] is not reader:
            sock = connection._writer.transport.get_extra_info("socket")  # type: ignore[union-attr]
            watched = self._watches[connection] = (reader, watch(sock))
        return watched[1]()
