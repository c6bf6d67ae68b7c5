"""One address rotating API keys: what gets through and what it stores, with and
without an identity budget.

The policy counts ``X-Api-Key`` values, 5 per hour each (fixed window), with a
metadata entry per request. One client address sends ``--requests`` requests,
a new key value on each, against a fresh Redis; the same run without a budget
is the behaviour before budgets existed. Printed per run: requests admitted,
keys in Redis, ``used_memory`` growth, and that growth per request.

Run from the repository root (starts its own redis-server)::

    python -m devtools.rotation_attack --requests 1000 --budget 50/h
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from devtools.redis_harness import RedisServer, temporary_workdir
from django_ratelimits.engine import Algorithm, Check, Engine, Gate, Identity, Limit
from django_ratelimits.rates import Rate, parse_rate

CLIENT = Identity("ip", "203.0.113.9")
KEYS = Limit("keys", Rate(5, 3600), Algorithm.FIXED_WINDOW)


def attack(engine: Engine, requests: int, budget: Rate | None) -> str:
    client = engine.client
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    gate = Gate(CLIENT, budget) if budget else None
    admitted = 0
    for n in range(requests):
        check = Check(
            Identity("header", f"key-{n:08d}"), [KEYS], f"ip:{CLIENT.value}|GET /api", gate
        )
        admitted += engine.check([check]).allowed
    grown = int(client.info("memory")["used_memory"]) - before
    return (
        f"budget {budget or 'off'}: {admitted} of {requests} admitted, "
        f"{client.dbsize()} keys, {grown} bytes ({grown / requests:.0f} per request)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.rotation_attack", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--budget", default="50/h", help="the identity budget, e.g. 50/h")
    args = parser.parse_args(argv)
    with temporary_workdir() as workdir:
        server = RedisServer(workdir, name="rotation-attack").start()
        try:
            engine = Engine(server.client())
            for budget in (None, parse_rate(args.budget)):
                print(attack(engine, args.requests, budget))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
