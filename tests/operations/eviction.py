"""Redis servers of a test's own, set to an eviction policy: for the checks, the
``status`` command and the flood through gunicorn (``tests/load/test_flood.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.redis_harness import RedisServer


@contextmanager
def redis_with(workdir: Path, policy: str, maxmemory: str = "100mb") -> Iterator[RedisServer]:
    """A new redis-server with ``maxmemory-policy policy`` and ``maxmemory``, stopped
    when the block ends."""
    server = RedisServer(workdir, name=f"redis-{policy}").start()
    try:
        with server.client() as client:
            client.config_set("maxmemory-policy", policy)
            client.config_set("maxmemory", maxmemory)
        yield server
    finally:
        server.stop()


def blind_url(server: RedisServer) -> str:
    """The URL of a user of ``server`` that may run anything but INFO and CONFIG, like
    the limiter's user on a managed Redis or one restricted by ACLs."""
    with server.client() as client:
        client.acl_setuser(
            "blind",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            commands=["+@all", "-info", "-config"],
        )
    return f"redis://blind:pw@{server.host}:{server.port}/0"
