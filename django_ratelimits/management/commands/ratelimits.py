"""``manage.py ratelimits``: the offender dashboard's data and actions in a terminal.

::

    manage.py ratelimits offenders [--period 1h] [--order last|denials] [--kind ip]
                                   [--policy NAME] [--limit 50] [--offset 0]
    manage.py ratelimits show ip:203.0.113.7 [--hits 20]
    manage.py ratelimits reset ip:203.0.113.7 [--policy NAME] [--forget]
    manage.py ratelimits block ip:203.0.113.7 --for 1h
    manage.py ratelimits allow user:42 --for 30m
    manage.py ratelimits lift ip:203.0.113.7
    manage.py ratelimits status

Every subcommand takes ``--json`` for machine-readable output. An identity is
``kind:value`` as the dashboard shows it; an ``ip:`` value is grouped the way
the limiter counts it (``ip:2001:db8::7`` means its /64). When Redis fails the
command exits with status 1 and one line saying why, never a traceback.
``docs/operations.md`` describes each subcommand and its JSON.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from django_ratelimits.breaker import breaker
from django_ratelimits.conf import get_settings
from django_ratelimits.dashboard.services import identity_report, user_names
from django_ratelimits.engine import Engine, Identity, LimitResult, get_engine
from django_ratelimits.engine.keys import label
from django_ratelimits.engine.memory import memory_of, node_routes
from django_ratelimits.engine.offenders import Offender, OffenderReader
from django_ratelimits.exceptions import BackendError
from django_ratelimits.identity import UNKNOWN, group, parse_address
from django_ratelimits.policies import current
from django_ratelimits.spec import PolicySpec

Data = dict[str, Any]
Report = tuple[Data, str]

_DURATION = re.compile(r"([1-9][0-9]{0,7})([smhd])")
_UNITS = {"d": 86_400, "h": 3600, "m": 60, "s": 1}
_MAX_OVERRIDE = 365 * 86_400


class Command(BaseCommand):
    help = "Offenders, actions on them and Redis status, from the terminal."
    requires_system_checks: list[str] = []  # `status` is the diagnosis; `check` runs them

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument(
            "--json", action="store_true", dest="as_json", help="machine-readable output"
        )
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def add(name: str, text: str) -> argparse.ArgumentParser:
            return subcommands.add_parser(name, parents=[common], help=text, description=text)

        listing = add("offenders", "identities denied recently, like the dashboard's table")
        listing.add_argument(
            "--period", type=duration, default=3600, help="how far back: 5m, 1h, 24h (default 1h)"
        )
        listing.add_argument("--order", choices=("last", "denials"), default="last")
        listing.add_argument("--kind", help="only identities of this kind: ip, user, header...")
        listing.add_argument("--policy", help="only identities this policy denied")
        listing.add_argument("--limit", type=_count, default=50, help="rows (default 50)")
        listing.add_argument("--offset", type=_count, default=0, help="rows to skip")

        detail = add("show", "one identity: its denials, who was behind it, its quota left")
        detail.add_argument("ident", help="kind:value, e.g. ip:203.0.113.7 or user:42")
        detail.add_argument(
            "--hits", type=_count, default=20, help="newest metadata entries to show"
        )

        reset = add("reset", "clear an identity's counters (all policies, or one)")
        reset.add_argument("ident")
        reset.add_argument("--policy", help="only this policy's counters")
        reset.add_argument(
            "--forget",
            action="store_true",
            help="also drop its offender record, metadata list and index entries",
        )
        for name, text in (
            ("block", "deny every request of an identity for a while"),
            ("allow", "admit every request of an identity, uncounted, for a while"),
        ):
            override = add(name, text)
            override.add_argument("ident")
            override.add_argument(
                "--for", dest="seconds", type=duration, required=True, help="e.g. 30m, 1h, 7d"
            )
        add("lift", "end a block or allow-listing").add_argument("ident")
        add("status", "Redis, the key space, the policies and the offender index")

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand: Callable[[dict[str, Any]], Report] = SUBCOMMANDS[options["subcommand"]]
        try:
            data, text = subcommand(options)
        except BackendError as exc:
            raise CommandError(f"Redis failed: {exc}") from exc
        except (RedisError, RedisClusterException) as exc:
            raise CommandError(f"Redis failed: {type(exc).__name__}: {exc}") from exc
        except ImproperlyConfigured as exc:
            raise CommandError(f"the configuration is wrong: {exc}") from exc
        self.stdout.write(json.dumps(data, indent=2) if options["as_json"] else text)


# --------------------------------------------------------------------------- arguments


def duration(text: str) -> int:
    """``"90s"``, ``"5m"``, ``"1h"``, ``"7d"`` in seconds (at most 365 days)."""
    match = _DURATION.fullmatch(text.strip().lower())
    seconds = int(match[1]) * _UNITS[match[2]] if match else 0
    if not 0 < seconds <= _MAX_OVERRIDE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration from 1s to 365d, such as 90s, 5m, 1h or 7d"
        )
    return seconds


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 100000")
    return int(text)


def parse_identity(text: str) -> Identity:
    """``kind:value``; an ``ip`` value becomes the address group the limiter counts."""
    kind, colon, value = text.partition(":")
    if not colon or not value:
        raise CommandError(f"{text!r} is not an identity: write kind:value, e.g. ip:203.0.113.7")
    try:
        identity = Identity(kind, value)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    return Identity("ip", _address_group(value)) if kind == "ip" else identity


def _address_group(value: str) -> str:
    config = get_settings()
    address = parse_address(value)
    if address is None:
        try:
            address = ipaddress.ip_network(value.strip(), strict=False).network_address
        except ValueError:
            if value == UNKNOWN:
                return value
            raise CommandError(f"{value!r} is not an IP address or network") from None
    return group(address, config.ipv4_prefix, config.ipv6_prefix)


def _policy(name: str) -> PolicySpec:
    spec = current().get(name)
    if spec is None:
        known = ", ".join(s.name for s in current().all()) or "none"
        raise CommandError(f"no enabled policy is named {name!r} (enabled: {known})")
    return spec


# --------------------------------------------------------------------------- subcommands


def offenders(options: dict[str, Any]) -> Report:
    engine = get_engine()
    period, order, offset = options["period"], options["order"], options["offset"]
    reader = OffenderReader(engine)
    page = reader.page(
        period=period,
        order=order,
        offset=offset,
        limit=options["limit"],
        kind=options["kind"],
        policy=options["policy"],
    )
    details = reader.details(page.offenders, hits=0, now_ms=page.now_ms)
    rows = [_offender(o, d.override) for o, d in zip(page.offenders, details, strict=True)]
    names = user_names(o.label for o in page.offenders)
    data = {
        "period": period,
        "order": order,
        "offset": offset,
        "total": page.total,
        "now_ms": page.now_ms,
        "offenders": rows,
        "usernames": names,
    }
    head = f"{page.total} identities denied in the last {span(period)}"
    if not rows:
        return data, f"{head}: none to show."
    table = _table(
        ("identity", "denials", "by policy", "last seen", "override"),
        [
            (
                _named(row["identity"], names),
                str(row["denials"]),
                _by_policy(row["by_policy"]),
                _ago(page.now_ms, row["last_ms"]),
                _override_text(row["override"]),
            )
            for row in rows
        ],
        right={1},
    )
    ordered = "last denial" if order == "last" else "denials"
    shown = f"rows {offset + 1}-{offset + len(rows)}, by {ordered}"
    return data, f"{head}; {shown}:\n{table}"


def show(options: dict[str, Any]) -> Report:
    identity = parse_identity(options["ident"])
    report = identity_report(identity)
    detail = report.detail
    quota = [_quota(r) for r in report.quotas]
    hits = detail.hits[: options["hits"]]
    names = user_names({label(identity), *(h.who for h in detail.hits)})
    data = {
        "identity": label(identity),
        "now_ms": report.now_ms,
        "offender": None if detail.offender is None else _offender(detail.offender, None),
        "override": _override_data(detail.override),
        "behind": [{"who": who, "hits": n} for who, n in detail.behind()],
        "hits_recorded": len(detail.hits),
        "hits": [
            {"who": h.who, "what": h.what, "at_ms": h.at_ms, "allowed": h.allowed} for h in hits
        ],
        "quota": quota,
        "usernames": names,
    }
    return data, _show_text(data, names)


def _show_text(data: Data, names: dict[str, str]) -> str:
    now_ms, record = data["now_ms"], data["offender"]
    lines = [_named(data["identity"], names)]
    if record is None:
        lines.append("  denials:  none recorded")
    else:
        lines.append(
            f"  denials:  {record['denials']} ({_by_policy(record['by_policy'])}), "
            f"first {_ago(now_ms, record['first_ms'])}, last {_ago(now_ms, record['last_ms'])}"
        )
    lines.append(f"  override: {_override_text(data['override']) or 'none'}")
    behind = ", ".join(f"{_named(b['who'], names)} x{b['hits']}" for b in data["behind"])
    lines.append(f"  behind:   {behind or 'nobody recorded'}")
    lines.append("  quota left:" if data["quota"] else "  quota left: no enabled policy counts it")
    for q in data["quota"]:
        lines.append(
            f"    {q['policy']} {q['rate']} ({q['algorithm']}): {q['remaining']} of "
            f"{q['capacity']}, whole again in {q['full_in']:.1f}s"
        )
    if data["hits"]:
        lines.append(f"  newest hits ({len(data['hits'])} of {data['hits_recorded']}):")
        lines.append(
            _table(
                ("when", "who", "what", "outcome"),
                [
                    (
                        _ago(now_ms, h["at_ms"]),
                        _named(h["who"], names),
                        h["what"],
                        "allowed" if h["allowed"] else "denied",
                    )
                    for h in data["hits"]
                ],
                indent="    ",
            )
        )
    return "\n".join(lines)


def reset(options: dict[str, Any]) -> Report:
    identity = parse_identity(options["ident"])
    specs = [_policy(options["policy"])] if options["policy"] else list(current().all())
    forget = options["forget"]
    get_engine().reset(identity, [limit for s in specs for limit in s.limits], forget=forget)
    names = [s.name for s in specs]
    data = {"action": "reset", "identity": label(identity), "policies": names, "forget": forget}
    text = f"{label(identity)}: counters reset under {', '.join(names) or 'no policy'}"
    if forget:
        text += "; its offender record, metadata list and index entries are gone"
    return data, text + "."


def _overriding(mode: str) -> Callable[[dict[str, Any]], Report]:
    def apply(options: dict[str, Any]) -> Report:
        identity, seconds = parse_identity(options["ident"]), options["seconds"]
        engine = get_engine()
        (engine.block if mode == "block" else engine.allow)(identity, seconds)
        data = {"action": mode, "identity": label(identity), "seconds": seconds}
        effect = "denied" if mode == "block" else "admitted uncounted"
        return data, (
            f"{label(identity)}: {mode}ed for {span(seconds)}; every check of it is {effect} "
            f"until then (end it early with: ratelimits lift {label(identity)})."
        )

    return apply


def lift(options: dict[str, Any]) -> Report:
    identity = parse_identity(options["ident"])
    engine = get_engine()
    before = engine.override(identity)
    engine.lift(identity)
    data: Data = {"action": "lift", "identity": label(identity), "lifted": _override_data(before)}
    if before is None:
        return data, f"{label(identity)}: no block or allow-listing was in force."
    return data, f"{label(identity)}: lifted ({_override_text(data['lifted'])})."


def status(options: dict[str, Any]) -> Report:
    config = get_settings()
    engine = get_engine()
    nodes = _nodes(engine)
    memory = memory_of(engine.client)
    pipe = engine.client.pipeline(transaction=False)
    for shard in range(engine.keys.shards):
        pipe.zcard(engine.keys.index(shard))
    indexed = sum(pipe.execute())
    data = {
        "redis": {
            "topology": "cluster" if isinstance(engine.client, RedisCluster) else "standalone",
            "nodes": nodes,
        },
        "key_prefix": config.key_prefix,
        "shards": engine.keys.shards,
        "policies": len(current().all()),
        "offenders_indexed": indexed,
        "breaker_open": breaker.is_open,
        "memory": [m.as_dict() for m in memory],
    }
    node_lines = [
        f"    {n['address']:<22} {n['role']:<8} Redis {n['version']:<8} PING {n['ping_ms']:.2f} ms"
        for n in nodes
    ]
    text = "\n".join(
        [
            f"Redis: reachable, {data['redis']['topology']}, {len(nodes)} node(s):",
            *node_lines,
            f"keys: prefix {config.key_prefix!r}, {engine.keys.shards} shards",
            f"enabled policies: {data['policies']}",
            f"offender index: {indexed} identities (all shards)",
            f"circuit breaker: {'open' if breaker.is_open else 'closed'} "
            "(in this process; every worker keeps its own)",
            "memory when full:",
            *(f"    {m.describe()}" for m in memory),
        ]
    )
    return data, text


SUBCOMMANDS: dict[str, Callable[[dict[str, Any]], Report]] = {
    "offenders": offenders,
    "show": show,
    "reset": reset,
    "block": _overriding("block"),
    "allow": _overriding("allow"),
    "lift": lift,
    "status": status,
}


# --------------------------------------------------------------------------- reads


def _quota(r: LimitResult) -> Data:
    """The quota left now under one limit of a policy that counts the identity."""
    return {
        "policy": r.limit.policy,
        "rate": str(r.limit.rate),
        "algorithm": r.limit.algorithm.value,
        "remaining": r.remaining,
        "capacity": r.limit.capacity,
        "full_in": round(r.reset_after, 3),
    }


def _nodes(engine: Engine) -> list[Data]:
    """Each node: address, role, version and the round-trip time of one PING."""
    client = engine.client
    nodes = []
    for address, role, route in node_routes(client):
        started = time.perf_counter()
        client.ping(**route)
        elapsed = time.perf_counter() - started
        try:
            version = str(client.info("server", **route).get("redis_version", "?"))
        except ResponseError:  # INFO refused (ACLs, a managed Redis): the rest still works
            version = "?"
        nodes.append(
            {
                "address": address,
                "role": role,
                "version": version,
                "ping_ms": round(elapsed * 1000, 3),
            }
        )
    return nodes


# --------------------------------------------------------------------------- text


def _offender(o: Offender, override: tuple[str, int] | None) -> Data:
    return {
        "identity": o.label,
        "ident": o.ident,
        "kind": o.kind,
        "denials": o.denials,
        "by_policy": dict(sorted(o.by_policy.items(), key=lambda kv: -kv[1])),
        "first_ms": o.first_ms,
        "last_ms": o.last_ms,
        "override": _override_data(override),
    }


def _override_data(override: tuple[str, int] | None) -> Data | None:
    return None if override is None else {"mode": override[0], "seconds_left": override[1]}


def _override_text(override: Data | None) -> str:
    return "" if override is None else f"{override['mode']}, {span(override['seconds_left'])} left"


def _named(ident: str, names: dict[str, str]) -> str:
    """``user:3 (alice)``; ``user:-`` is how metadata writes an anonymous client."""
    if ident == "user:-":
        return "anonymous"
    return f"{ident} ({names[ident]})" if ident in names else ident


def _by_policy(by_policy: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in by_policy.items())


def span(seconds: float) -> str:
    """``"45s"``, ``"5m"``, ``"1h 30m"``, ``"2d 3h"``: the largest unit and the next."""
    rest, amounts = max(0, round(seconds)), []
    for unit, size in _UNITS.items():
        amount, rest = divmod(rest, size)
        amounts.append((amount, unit))
    first = next((i for i, (amount, _) in enumerate(amounts) if amount), len(amounts) - 1)
    return " ".join(f"{a}{u}" for a, u in amounts[first : first + 2] if a) or "0s"


def _ago(now_ms: int, at_ms: int) -> str:
    return f"{span((now_ms - at_ms) / 1000)} ago"


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: frozenset[int] | set[int] = frozenset(),
    indent: str = "",
) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])
