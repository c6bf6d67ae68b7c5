"""The blocklist's cost per request: :func:`django_ratelimits.blocklist.refusal`, which
``RateLimitMiddleware`` calls for every request, with 0, 10, 1,000 and 10,000 blocked
networks.

The networks are random (seeded): half IPv4 (/16 to /32), half IPv6 (/32 to /128),
none holding the clients, which are in 192.0.2.0/24 and 2001:db8::/32. Each count
has its own ``PolicyRegistry``, loaded from the database while it held those rows
(the load is timed too: each worker pays it once per edit) and passed to the call.
Rows per count: an IPv4 client and an IPv6 client, not blocked (what every request
pays); with the most networks, also a blocked client (its 403 built, and its one log
line a minute). The requests are built before the timing with their client address
already worked out, as the middleware's policies need it anyway; the rows are timed
in the same interleaved rounds as a PING row.
"""

from __future__ import annotations

import ipaddress
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchmarks.kit import (
    CELLS_HEAD,
    CELLS_RULE,
    Scenario,
    cells,
    counting_client,
    interleave,
    ping,
)
from devtools.redis_harness import RedisServer

if TYPE_CHECKING:
    from django_ratelimits.policies import PolicyRegistry

ENTRY_COUNTS = (0, 10, 1000, 10_000)
CLIENTS_V4 = ipaddress.IPv4Network("192.0.2.0/24")
CLIENTS_V6 = ipaddress.IPv6Network("2001:db8::/32")
BLOCKED_CLIENT = "198.18.0.1"  # the blocked row's client: its /32 is added to the most


@dataclass
class Row:
    scenario: Scenario
    entries: int
    version: int
    blocked: bool = False


@dataclass
class Report:
    floor: Scenario
    rows: list[Row] = field(default_factory=list)
    load_ms: dict[int, float] = field(default_factory=dict)  # entries -> registry load
    rounds: int = 0
    per_round: int = 0

    def row(self, entries: int, version: int, blocked: bool = False) -> Row:
        return next(
            r for r in self.rows if (r.entries, r.version, r.blocked) == (entries, version, blocked)
        )


def networks(n: int, seed: int = 12) -> list[str]:
    """``n`` random networks, half of each version, none near the benchmark's clients."""
    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < n:
        network: ipaddress.IPv4Network | ipaddress.IPv6Network
        if len(found) % 2 == 0:
            prefix = rng.choice([16, 20, 24, 28, 32])
            network = ipaddress.IPv4Network((rng.getrandbits(prefix) << (32 - prefix), prefix))
            if network.overlaps(CLIENTS_V4) or network.network_address.is_private:
                continue
        else:
            prefix = rng.choice([32, 48, 56, 64, 128])
            network = ipaddress.IPv6Network((rng.getrandbits(prefix) << (128 - prefix), prefix))
            if network.overlaps(CLIENTS_V6) or network.subnet_of(_MAPPED):
                continue
        found.append(str(network))
    return found


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _registry(texts: list[str]) -> tuple[PolicyRegistry, float]:
    """A registry loaded while the database held the blocked networks ``texts``; ms it took."""
    from django_ratelimits.models import BlockedNetwork
    from django_ratelimits.policies import PolicyRegistry

    BlockedNetwork.objects.all().delete()
    BlockedNetwork.objects.bulk_create(BlockedNetwork(network=text) for text in texts)
    registry = PolicyRegistry()
    started = time.perf_counter()
    registry.refresh()  # bulk_create sends no signal, but the delete changed the stamp
    elapsed = (time.perf_counter() - started) * 1000
    assert len(registry.blocklist) == len(texts), "every network was loaded"
    return registry, elapsed


def _caller(registry: PolicyRegistry, addresses: list[str]) -> Callable[[], bool]:
    from django.test import RequestFactory

    from django_ratelimits.blocklist import refusal
    from django_ratelimits.identity import client_address

    factory = RequestFactory()
    requests = [factory.get("/api/items", REMOTE_ADDR=a) for a in addresses]
    for request in requests:
        client_address(request)  # worked out once, as the policies of a request need it too
    cycle = itertools.cycle(requests)
    return lambda: refusal(next(cycle), registry) is None


def run(server: RedisServer, quick: bool = False) -> Report:
    """Needs Django set up (:func:`benchmarks.site.setup`)."""
    from django_ratelimits.models import BlockedNetwork

    rounds, per_round = (2, 200) if quick else (5, 2000)
    report = Report(ping(counting_client(server)), rounds=rounds, per_round=per_round)
    v4 = [str(CLIENTS_V4[i % 250 + 1]) for i in range(per_round)]
    v6 = [str(CLIENTS_V6[i + 1]) for i in range(per_round)]
    most = max(ENTRY_COUNTS)
    for n in ENTRY_COUNTS:
        texts = networks(n)
        if n == most:
            texts[-1] = f"{BLOCKED_CLIENT}/32"
        registry, report.load_ms[n] = _registry(texts)
        for version, addresses in ((4, v4), (6, v6)):
            name = f"{n:,} blocked networks, an IPv{version} client not blocked"
            report.rows.append(Row(Scenario(name, _caller(registry, addresses)), n, version))
        if n == most:
            name = f"{n:,} blocked networks, a blocked client (403)"
            call = _caller(registry, [BLOCKED_CLIENT])
            report.rows.append(Row(Scenario(name, call), n, 4, blocked=True))
    BlockedNetwork.objects.all().delete()
    stats = server.client(decode_responses=True)
    interleave([report.floor, *(r.scenario for r in report.rows)], rounds, per_round, stats)
    return report


def render(report: Report) -> str:
    base = {v: report.row(0, v).scenario.median_us for v in (4, 6)}
    lines = [
        "## Blocked networks",
        "",
        "`blocklist.refusal(request, registry)`, what `RateLimitMiddleware` asks before"
        f" anything else, in process; {report.rounds} interleaved rounds of"
        f" {report.per_round:,} calls per row. *more than 0 networks*: the row's median minus"
        " that of the same client's row with none. No row sends anything to Redis.",
        "",
        f"| blocked networks, client | {CELLS_HEAD} | more than 0 networks, µs |",
        f"|---|{CELLS_RULE}|--:|",
        f"| {report.floor.name} | {cells(report.floor, report.floor)} | |",
    ]
    for row in report.rows:
        s = row.scenario
        more = row.entries and not row.blocked
        extra = f"{s.median_us - base[row.version]:+.2f}" if more else ""
        lines.append(f"| {s.name} | {cells(s, report.floor)} | {extra} |")
    loads = ", ".join(f"{n:,}: {ms:.1f} ms" for n, ms in report.load_ms.items())
    lines += [
        "",
        f"Loading the registry (policies and blocked networks, once per worker per edit): {loads}.",
    ]
    return "\n".join(lines) + "\n"
