"""Instructions the request path's Python runs per request, counted by callgrind.

::

    python -m benchmarks.request_instructions                 # 200 requests a window
    python -m benchmarks.request_instructions --requests 500  # more a window
    python -m benchmarks.request_instructions --quick         # a few requests: does it run

A request here is a ``GET`` of a trivial view through Django's ``WSGIHandler``
(``benchmarks.settings``, the demo's middleware stack, as :mod:`benchmarks.request`'s
rows). Its time follows whatever else the machine runs; the instructions it runs do
not. So the module runs itself again on the same interpreter under ``valgrind
--tool=callgrind`` (Debian: ``apt-get install valgrind``) with ``PYTHONHASHSEED=0``
(the same hashes, so the same dict and set layouts, from run to run), and counts
the user-space instructions of this process: Django's, the middleware's, the
engine's and redis-py's Python, and the interpreter running them. The imports and
Django's set-up (the migrations) run uninstrumented (``--instr-atstart=no``: about
six times faster under valgrind), then ``callgrind_control --instr=on``; nothing
before it is counted. Redis runs
natively in a process of its own (valgrind does not follow children): its work is
not counted (:mod:`benchmarks.instructions` counts it), nor the kernel's, nor the
wait for its answer. Rows, each from client addresses and users of its own (every
request allowed):

* no rate limiting: the floor of a request;
* ``RateLimitMiddleware``, 1 policy of 1 limit by IP (:data:`benchmarks.request.ONE_LIMIT`),
  the engine's answer replayed from memory (:func:`benchmarks.request.replaying`):
  the middleware's Python without the engine call;
* 10 policies (:func:`benchmarks.site.policy_rows`, of which ``api`` applies: 2
  identities x 3 rates + metadata), the engine's answer replayed;
* the same 10 policies, the engine called: its Python and redis-py's added.

Each row warms up (``WARMUP`` requests: caches filled, first calls' imports and
compilations done), collects and freezes the garbage (``gc.freeze()``: the objects
of the set-up are not traversed again), then counts twice ``REQUESTS`` requests
between two ``callgrind_control --dump`` of this process, minus an empty window
(two dumps with nothing between: what a dump's own call costs), and reports the
smaller of the two windows: what depends on the wall clock (the registry's
``POLICY_REFRESH``, a collection of the oldest generation) can land in one.

Not part of ``make bench`` (valgrind is not in every set-up, and Python under
callgrind runs about 50 times slower: a run takes minutes); docs that quote the
request path's instructions name this command.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import request, site
from benchmarks.instructions import callgrind_total
from devtools.redis_harness import RedisServer, temporary_workdir

if TYPE_CHECKING:
    from django_ratelimits.engine import Decision
    from django_ratelimits.policies import PolicyRegistry

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 200  # counted per window
WARMUP = 800
QUICK = 3, 10  # (requests a window, warm-up) of --quick
# Paths, client addresses and users each row cycles over (benchmarks.request's rows'
# count): no identity nears a limit, and every path is cached after the warm-up.
IDENTITIES = 700
# Set (to callgrind's output file) in the process valgrind runs.
INSIDE = "RATELIMITS_REQUEST_CALLGRIND_OUT"

FLOOR = "no rate limiting"
ONE_REPLAYED = f"{request.ONE_LIMIT_ROW}, {request.REPLAYED}"
TEN = f"RateLimitMiddleware, {request.HEADLINE} policies"
TEN_REPLAYED = f"{TEN}, {request.REPLAYED}"
TEN_CALLED = f"{TEN}, the engine called (its Python and redis-py's; not Redis')"


def _control(*command: str) -> None:
    """``callgrind_control <command> <this process>``."""
    subprocess.run(["callgrind_control", *command, str(os.getpid())], check=True,
                   capture_output=True)  # fmt: skip


class Dumps:
    """``callgrind_control --dump`` of this process, and the instructions each counted."""

    def __init__(self, out: Path) -> None:
        self.out, self.count = out, 0

    def dump(self) -> Path:
        """Dump (and zero) the counters; the file that holds what they counted."""
        _control("--dump")
        self.count += 1
        return Path(f"{self.out}.{self.count}")

    def counted(self) -> int:
        """Dump, and read the total (after the dump: the reading counts in the next)."""
        written = self.dump()
        deadline = time.monotonic() + 120
        while True:
            try:
                return callgrind_total(written)
            except (OSError, RuntimeError):  # not written yet, or not whole
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def per_request(self, call: Callable[[], bool], requests: int, warmup: int) -> int:
        """Instructions per ``call()``: the smaller of two windows of ``requests``."""
        if not all([call() for _ in range(warmup)]):
            raise RuntimeError("a warm-up request was refused: the rows count allowed ones")
        gc.collect()
        gc.freeze()
        self.dump()
        empty = self.counted()
        windows = []
        for _ in range(2):
            gc.collect()
            gc.freeze()
            self.dump()
            for _ in range(requests):
                call()
            windows.append((self.counted() - empty) // requests)
        return min(windows)


def measure(dumps: Dumps, requests: int, warmup: int) -> list[tuple[str, int]]:
    """(row, instructions per request); Django set up (:func:`benchmarks.site.setup`)."""
    from django_ratelimits.engine import Check, Identity, get_engine

    bare, limited = request.handlers()
    one = request.loaded_registry([request.ONE_LIMIT])
    ten = request.loaded_registry(site.policy_rows(request.HEADLINE))
    one_spec, ten_spec = one.get("api"), ten.get("api")
    assert one_spec is not None and ten_spec is not None
    engine = get_engine()
    # What the engine answered each policy set's requests (allowed), replayed.
    one_answer = engine.check([Check(Identity("ip", "10.99.0.1"), one_spec.limits)])
    ten_answer = engine.check(request.engine_requests(ten_spec, 99, 1)[0])

    def caller(handler: site.WSGICall, tag: int, user: bool) -> Callable[[], bool]:
        paths = request.path_cycle("/api/items", IDENTITIES)
        return request.caller(handler, paths, tag, IDENTITIES, user)

    rows: list[tuple[str, Callable[[], bool], PolicyRegistry | None, Decision | None]] = [
        (FLOOR, caller(bare, 1, True), None, None),
        (ONE_REPLAYED, caller(limited, 2, False), one, one_answer),
        (TEN_REPLAYED, caller(limited, 3, True), ten, ten_answer),
        (TEN_CALLED, caller(limited, 4, True), ten, None),
    ]
    out = []
    for name, call, registry, answer in rows:
        with contextlib.ExitStack() as stack:
            if registry is not None:
                stack.enter_context(request.serving(registry))
            if answer is not None:
                stack.enter_context(request.replaying(answer))
            out.append((name, dumps.per_request(call, requests, warmup)))
    return out


def counted_rows(out: Path, requests: int, warmup: int) -> list[tuple[str, int]]:
    """The rows, in the process valgrind runs (``out``: callgrind's output file)."""
    with temporary_workdir("ratelimits-request-callgrind-") as workdir:
        server = RedisServer(workdir, name="request-instructions").start()
        try:
            site.setup(server, workdir)
            _control("--instr=on")  # valgrind ran Python uninstrumented until now
            return measure(Dumps(out), requests, warmup)
        finally:
            server.stop()


def render(rows: list[tuple[str, int]], requests: int, warmup: int) -> str:
    import django
    import redis

    floor = dict(rows)[FLOOR]
    lines = [
        f"Python {platform.python_version()}, Django {django.get_version()},"
        f" redis-py {redis.__version__}; per request, the smaller of two windows of"
        f" {requests:,} requests after {warmup:,} of warm-up.",
        "",
        "| request | instructions per request | over the floor |",
        "|---|--:|--:|",
    ]
    for name, count in rows:
        over = "" if name == FLOOR else f"{count - floor:,}"
        lines.append(f"| {name} | {count:,} | {over} |")
    return "\n".join(lines)


def under_callgrind(argv: list[str]) -> int:
    """Run this module again, with ``argv``, under callgrind; its exit status."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    with temporary_workdir("ratelimits-callgrind-") as workdir:
        out, log = workdir / "callgrind.out", workdir / "valgrind.log"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=yes",
                   f"--callgrind-out-file={out}", f"--log-file={log}",
                   sys.executable, "-m", "benchmarks.request_instructions", *argv]  # fmt: skip
        environment = {**os.environ, "PYTHONHASHSEED": "0", INSIDE: str(out)}
        done = subprocess.run(command, cwd=ROOT, env=environment)
        if done.returncode != 0 and log.exists():
            print(log.read_text()[-3000:], file=sys.stderr)
        return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.request_instructions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, help=f"a window (default {REQUESTS})")
    parser.add_argument("--warmup", type=int, help=f"requests before, a row (default {WARMUP})")
    parser.add_argument("--quick", action="store_true", help="a few requests: does it run")
    arguments = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(arguments)
    out = os.environ.get(INSIDE)
    if out is None:
        return under_callgrind(arguments)
    requests, warmup = QUICK if args.quick else (REQUESTS, WARMUP)
    requests, warmup = args.requests or requests, args.warmup or warmup
    print(render(counted_rows(Path(out), requests, warmup), requests, warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
