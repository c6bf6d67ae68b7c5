"""A check's command sent the short way: packed here, written and read on a connection.

redis-py's ``execute_command`` costs a check more client CPU than its round trip: it
encodes the arguments one by one, looks up a response callback, and (redis-py 6 and
later) records operation metrics and retry bookkeeping on every command. Checking a
connection out of the pool and back in costs as much again: a lock, four
observability counters and an event (redis-py 8), and a non-blocking read to see
whether the connection holds stray data (about 7 µs of client CPU per command here).
A check's command is bytes, text and integers the engine built itself, and its reply
one bulk string read raw, so :func:`pack` packs the command and a :func:`line` writes
it and reads the reply:

* :class:`Own` for a client of a plain ``ConnectionPool`` (the engine's own clients,
  and django-redis' default): connections of the engine's own, made like the pool's
  and kept between checks;
* :class:`Pooled` for a standalone client of any other pool (a blocking pool, whose
  waiters need connections back; a sentinel pool, which follows the master), or of
  a pool whose credential provider may rotate credentials (redis-py re-authenticates
  a connection when it goes back to its pool): a connection checked out of that
  pool per command.

What ``execute_command`` guarantees still holds: the connection's retry policy
applies (the engine's own clients have none: a check sent twice could be counted
twice); a socket error drops the connection; an error reply raises
``ResponseError``; no command reads another's reply.

A cluster (routed per slot), a single-connection client (serialised on its lock)
and a pool with client-side caching (which answers some reads itself) have no line:
they keep ``execute_command``. An asyncio client has its own
(:mod:`~django_ratelimits.engine.awire`).
"""

from __future__ import annotations

import functools
import inspect
import os
import select
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
from redis import ConnectionPool, Redis
from redis.connection import AbstractConnection
from redis.exceptions import ResponseError

__all__ = ["Own", "Pooled", "line", "naming", "pack", "sends_directly", "watch"]


def pack(args: Sequence[str | bytes | int]) -> bytes:
    """``args`` as one RESP array of bulk strings: what Redis reads as a command."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if not isinstance(arg, bytes):  # most of a check's arguments are bytes already
            arg = arg.encode() if isinstance(arg, str) else b"%d" % arg
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def sends_directly(client: object) -> bool:
    """Whether a line (:func:`line`, or for an asyncio client ``awire.aline``) may talk to
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
def naming(pool_class: type[Any]) -> tuple[str, ...]:
    """What ``get_connection`` of a pool of ``pool_class`` is called with: nothing, or a
    command name where it is required (redis-py 5.0; 5.3 deprecated it and warns)."""
    parameter = inspect.signature(pool_class.get_connection).parameters.get("command_name")
    if parameter is None or parameter.default is not inspect.Parameter.empty:
        return ()
    return ("FCALL",)


def line(client: object) -> Own | Pooled | None:
    """How the engine sends a check's command to ``client`` (see the module's text)."""
    if not isinstance(client, Redis) or not sends_directly(client):
        return None
    pool = client.connection_pool
    # A credential provider may rotate credentials: redis-py re-authenticates its
    # connections when they go back to the pool, which kept ones never do.
    if type(pool) is ConnectionPool and pool.connection_kwargs.get("credential_provider") is None:
        return Own(pool)
    return Pooled(pool)


def _sent(connection: AbstractConnection, packed: bytes) -> Any:
    """The raw reply to ``packed`` on ``connection``, under its retry policy."""

    def attempt() -> Any:
        connection.send_packed_command([packed], check_health=True)
        return connection.read_response()

    def failed(error: Exception, *_: Any) -> None:
        connection.disconnect()

    return connection.retry.call_with_retry(attempt, failed)


class Pooled:
    """Each command on a connection checked out of ``pool`` and back in."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool

    def send(self, packed: bytes) -> Any:
        """The raw reply to the command ``packed``."""
        pool = self.pool
        connection = pool.get_connection(*naming(type(pool)))
        try:
            return _sent(connection, packed)
        finally:
            pool.release(connection)


def watch(sock: socket.socket) -> Callable[[], object]:
    """A test of whether ``sock`` has anything to read (or was closed), cheap enough
    to make before every command: one ``poll()`` (0.3 µs here), ``select()`` where
    there is none (Windows).

    A TLS socket (``rediss://``) is also asked whether its SSL layer holds decrypted
    bytes (0.2 µs): the rest of a TLS record a read took only a part of waits there,
    out of the kernel's sight."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        polled: Callable[[], object] = functools.partial(poller.poll, 0)
    else:
        polled = lambda: select.select([sock], [], [], 0)[0]  # noqa: E731
    if isinstance(sock, ssl.SSLSocket):
        pending = sock.pending
        return lambda: pending() or polled()
    return polled


class _Kept:
    """One of :class:`Own`'s connections, and the watch on its socket."""

    __slots__ = ("connection", "readable", "sock")

    def __init__(self, connection: AbstractConnection) -> None:
        self.connection = connection
        self.sock: socket.socket | None = None  # the socket ``readable`` watches
        self.readable: Callable[[], object] = bool  # set with ``sock``, before any use

    def ready(self) -> AbstractConnection:
        """The connection, connected and with nothing left to read.

        Idle, a connection has nothing to read: if its socket is readable (or, over
        TLS, its SSL layer holds decrypted bytes), Redis closed it (a restart, its
        ``timeout``) or it holds a reply nobody read. It is then connected anew,
        before the command is written, as the pool does when it hands a connection
        out."""
        connection = self.connection
        sock = connection._sock
        if sock is not None and sock is self.sock:  # connected, and watched
            if not self.readable():
                return connection
            connection.disconnect()
        connection.connect()  # a no-op on a connection connected on its own (a retry)
        self.sock = connection._sock
        self.readable = watch(self.sock)  # type: ignore[arg-type]
        return connection


class Own:
    """Connections of the engine's own to the Redis of ``pool`` (a plain pool), made
    with the pool's class and settings and kept between commands.

    They are not the pool's: whoever else uses the pool (a django-redis cache) finds
    its ``max_connections`` as free as before. The engine makes at most that many of
    its own, and sends through the pool while it holds them all.

    The idle ones wait in a list: ``pop`` and ``append`` are atomic, so two threads
    never share one, and there are never more than the most commands sent at once.
    A connection goes back to the list as it is once its reply, or an error reply,
    has been read; after anything else (a timeout, a dropped socket, an exception
    raised into the thread) it is disconnected first, and connects anew when next
    used. (Dropping it after an error reply too churned connections while a full
    Redis under ``noeviction`` refused every write, and some checks then passed:
    tests/load/test_flood.py.) A forked process starts with none of them: a
    connection made before the fork is the parent's.
    """

    def __init__(self, pool: ConnectionPool) -> None:
        self._pooled = Pooled(pool)  # while the engine holds as many as the pool may
        self._make = functools.partial(pool.connection_class, **pool.connection_kwargs)
        self._idle: list[_Kept] = []
        self._made = 0  # connections made and kept, idle or in use
        self._pid = os.getpid()
        self._lock = threading.Lock()  # for making one, and after a fork

    def send(self, packed: bytes) -> Any:
        """The raw reply to the command ``packed``."""
        if self._pid != os.getpid():
            self._forked()
        idle = self._idle
        try:
            kept: _Kept | None = idle.pop()
        except IndexError:
            kept = self._made_one()
        if kept is None:  # as many as the pool may hold, all in use
            return self._pooled.send(packed)
        try:
            return _sent(kept.ready(), packed)
        except BaseException as error:
            if not isinstance(error, ResponseError):  # an error reply is read whole
                kept.connection.disconnect()  # anything else may leave a reply unread
            raise
        finally:
            idle.append(kept)

    def _made_one(self) -> _Kept | None:
        with self._lock:
            if self._made >= self._pooled.pool.max_connections:
                return None
            self._made += 1
        return _Kept(self._make())

    def _forked(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._made, self._pid = [], 0, os.getpid()
