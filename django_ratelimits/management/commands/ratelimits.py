"""``manage.py ratelimits``: the offender dashboard's data and actions in a terminal.

::

    manage.py ratelimits offenders [--period 1h] [--order last|denials] [--kind ip]
                                   [--policy NAME] [--limit 50] [--offset 0]
    manage.py ratelimits show ip:203.0.113.7 [--hits 20]
    manage.py ratelimits show username:admin
    manage.py ratelimits reset ip:203.0.113.7 [--policy NAME] [--keep-record]
    manage.py ratelimits reset username:admin --policy login-failures
    manage.py ratelimits block ip:203.0.113.7 --for 1h
    manage.py ratelimits allow user:42 --for 30m
    manage.py ratelimits lift ip:203.0.113.7
    manage.py ratelimits forget ip:203.0.113.7
    manage.py ratelimits status
    manage.py ratelimits block-network 203.0.113.0/24 --reason "scraper" [--for 1d]
    manage.py ratelimits unblock-network 203.0.113.0/24
    manage.py ratelimits networks [--all]
    manage.py ratelimits override ip:203.0.113.7 api 10000/h --for 1d --reason "..."
    manage.py ratelimits overrides [--expired]
    manage.py ratelimits unoverride ip:203.0.113.7 [api]

Every subcommand takes ``--json`` for machine-readable output. An identity is
``kind:value`` as the dashboard shows it, checked as the dashboard checks it
(:mod:`django_ratelimits.offenders.identities`): an ``ip:`` value is grouped the
way the limiter counts it (``ip:2001:db8::7`` means its /64), a ``user:`` is
named by id or username and must exist (``show``, ``reset``, ``lift``, ``forget``
and ``unoverride`` also take the id of a user deleted since), a ``username:`` (a username tried at
login, see ``docs/logins.md``) is normalised as failed-login policies count it
(``username:Admin`` is ``username:admin``); one that no request could be counted
as exits with status 1 and the reason. When Redis fails the command exits with
status 1 and one line saying why, never a traceback. ``ROOT_URLCONF`` is imported
first, so that the policies views declare with ``@ratelimit`` are known here as on the
site (no system check does it: the command runs none). A block or allow-listing
is noted as set by ``<login name> (manage.py)`` on the active-blocks page.
``docs/operations.md`` describes each subcommand and its JSON.

The offender subcommands go through the offenders service
(:mod:`django_ratelimits.offenders`), as the dashboard does; this module parses
arguments and builds each subcommand's JSON and text, with the shapes and
tables of :mod:`django_ratelimits.management.output`. The blocklist subcommands
live in :mod:`django_ratelimits.management.networks`.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    no_translations,
)
from django.urls import get_resolver
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from django_ratelimits.breaker import breaker
from django_ratelimits.conf import get_settings
from django_ratelimits.engine import Engine, Identity, get_engine
from django_ratelimits.engine.controls import MAX_OVERRIDE
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import read_as
from django_ratelimits.engine.keys import label
from django_ratelimits.engine.memory import memory_of, node_routes
from django_ratelimits.engine.overrides import BLOCKED_POLICY
from django_ratelimits.engine.topology import cluster_enabled
from django_ratelimits.management import networks, rate_overrides
from django_ratelimits.management.output import (
    Data,
    ago,
    by_policy,
    hit_data,
    in_effect,
    offender_data,
    override_data,
    override_text,
    quota_data,
    row_named,
    show_text,
    shown_names,
    table,
)
from django_ratelimits.offenders import (
    RECORDED_KINDS,
    Offenders,
    Query,
    UnknownPolicy,
    parse_identity,
    users,
)
from django_ratelimits.offenders.text import parse_span, span
from django_ratelimits.policies import PolicyRegistry, current

Report = tuple[Data, str]


class Command(BaseCommand):
    help = "Offenders, actions on them, overrides, blocked networks and Redis status."
    requires_system_checks: list[str] = []  # `status` is the diagnosis; `check` runs them

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument(
            "--json", action="store_true", dest="as_json", help="machine-readable output"
        )
        # Django's own options, taken after the subcommand too (`ratelimits status
        # --settings mysite.prod`: Django reads --settings and --pythonpath wherever they
        # stand, and argparse refused them there). SUPPRESS: one given before the
        # subcommand is not overwritten by a default.
        for flag in ("--traceback", "--no-color", "--force-color"):
            common.add_argument(
                flag, action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
            )
        for option in ("--settings", "--pythonpath"):
            common.add_argument(option, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        common.add_argument(
            "-v",
            "--verbosity",
            type=int,
            choices=[0, 1, 2, 3],
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def add(name: str, text: str) -> argparse.ArgumentParser:
            return subcommands.add_parser(name, parents=[common], help=text, description=text)

        listing = add("offenders", "identities denied recently, like the dashboard's table")
        listing.add_argument(
            "--period", type=duration, default=3600, help="how far back: 5m, 1h, 24h (default 1h)"
        )
        listing.add_argument("--order", choices=("last", "denials"), default="last")
        listing.add_argument("--kind", choices=RECORDED_KINDS, help="only identities of this kind")
        listing.add_argument(
            "--policy",
            help=f"only identities this policy denied (a policy's name, or {BLOCKED_POLICY} "
            "for blocks)",
        )
        listing.add_argument(
            "--shadow",
            action="store_true",
            help="identities shadow-mode policies would have denied (they refuse nothing) instead",
        )
        listing.add_argument("--limit", type=_count, default=50, help="rows (default 50)")
        listing.add_argument("--offset", type=_count, default=0, help="rows to skip")

        detail = add("show", "one identity: its denials, who was behind it, its quota left")
        detail.add_argument(
            "ident", help="kind:value, e.g. ip:203.0.113.7, user:42 or username:admin"
        )
        detail.add_argument(
            "--hits", type=_count, default=20, help="newest metadata entries to show"
        )

        reset = add("reset", "clear an identity's counters (all policies, or one)")
        reset.add_argument("ident")
        reset.add_argument("--policy", help="only this policy's counters")
        # Like the dashboard's reset, the record goes by default: the identity leaves the
        # offenders list. --forget was the opt-in before that; it stays, and does nothing.
        record = reset.add_mutually_exclusive_group()
        record.add_argument(
            "--keep-record",
            dest="forget",
            action="store_false",
            help="keep its offender record, metadata list and index entries (as history)",
        )
        record.add_argument(
            "--forget",
            dest="forget",
            action="store_true",
            help="the default (drop the offender record too); accepted for compatibility",
        )
        reset.set_defaults(forget=True)
        for name, text in (
            ("block", "deny every request of an identity for a while"),
            ("allow", "admit every request of an identity, uncounted, for a while"),
        ):
            override = add(name, text)
            override.add_argument("ident")
            override.add_argument(
                "--for",
                dest="seconds",
                type=duration,
                required=True,
                metavar="DURATION",
                help="how long: a number and s, m, h or d, from 1s to 365d (90s, 30m, 1h, 7d)",
            )
        add("lift", "end a block or allow-listing").add_argument("ident")
        add(
            "forget",
            "erase everything Redis holds of an identity, and the hit entries of others naming it",
        ).add_argument("ident")
        add("status", "Redis, the key space, the policies and the offender index")
        networks.add_arguments(add, duration)
        rate_overrides.add_arguments(add, duration)

    # The command speaks English whatever LANGUAGE_CODE is, as Django's own commands and
    # system checks do (their output is not translated): its sentences are English, and
    # the texts it shares with the dashboard (why an identity or a policy is refused)
    # would otherwise come in the site's language in the middle of them.
    @no_translations
    def handle(self, *args: Any, **options: Any) -> None:
        subcommand: Callable[[dict[str, Any]], Report] = SUBCOMMANDS[options["subcommand"]]
        self.declare_view_policies()
        try:
            data, text = subcommand(options)
        except BackendError as exc:
            raise CommandError(f"Redis failed: {exc}") from exc
        except (RedisError, RedisClusterException) as exc:
            raise CommandError(f"Redis failed: {type(exc).__name__}: {exc}") from exc
        except ImproperlyConfigured as exc:
            raise CommandError(f"the configuration is wrong: {exc}") from exc
        except UnknownPolicy as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(data, indent=2) if options["as_json"] else text)

    def declare_view_policies(self) -> None:
        """Import ``ROOT_URLCONF``, as a request to the site does, so that the policies
        its views declare with ``@ratelimit`` are known here as there: no system check
        imported it (this command runs none). One that fails to import is a warning
        (the site is broken; the command still works, without those policies)."""
        if not getattr(settings, "ROOT_URLCONF", None):
            return
        try:
            get_resolver().url_patterns  # noqa: B018  (imports the URLconf modules)
        except Exception as exc:
            self.stderr.write(
                f"warning: ROOT_URLCONF could not be imported ({type(exc).__name__}: {exc}): "
                "the policies its views declare with @ratelimit are unknown here"
            )


# --------------------------------------------------------------------------- arguments


def duration(text: str) -> int:
    """``"90s"``, ``"5m"``, ``"1h"``, ``"7d"`` in seconds (at most 365 days)."""
    try:
        seconds = parse_span(text)
    except ValueError:
        seconds = 0
    if not 0 < seconds <= MAX_OVERRIDE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration from 1s to 365d, such as 90s, 5m, 1h or 7d"
        )
    return seconds


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 100000")
    return int(text)


def _who() -> str:
    """Who sets a block from the terminal, as the active-blocks page shows it."""
    try:
        return f"{getpass.getuser()} (manage.py)"
    except (OSError, KeyError):  # no login name in this environment
        return "manage.py"


def _identity(text: str, *, former_users: bool = True) -> Identity:
    """The identity ``text`` names. ``user:`` and the id of a deleted user is the one it
    was counted as (its data must stay erasable), unless ``former_users`` is false:
    blocking, allow-listing or giving rates to a user that is gone is refused."""
    try:
        return parse_identity(text, former_users=former_users)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


# --------------------------------------------------------------------------- subcommands


def offenders(options: dict[str, Any]) -> Report:
    period, order, offset = options["period"], options["order"], options["offset"]
    query = Query(
        period=period,
        order=order,
        kind=options["kind"],
        policy=options["policy"],
        offset=offset,
        limit=options["limit"],
        hits=0,
        shadow=options["shadow"],
    )
    listing = Offenders(get_engine).listing(query)
    rows = [offender_data(row.offender, row.override) for row in listing.rows]
    known = users(row.who for row in listing.rows)
    names = shown_names(known)
    data = {
        "period": period,
        "order": order,
        "shadow": query.shadow,
        "offset": offset,
        "total": listing.total,
        "now_ms": listing.now_ms,
        "offenders": rows,
        "usernames": known.names,
        "deleted_users": sorted(known.gone),
    }
    denied = "shadow policies would have denied" if query.shadow else "denied"
    total = len(rows) if listing.total is None else listing.total  # None: a user's lookup
    identities = f"{total} {'identity' if total == 1 else 'identities'}"
    head = f"{identities} {denied} in the last {span(period)}"
    if not rows:
        return data, f"{head}: none to show."
    lines = table(
        (
            "identity",
            "would-be denials" if query.shadow else "denials",
            "by policy",
            "last seen",
            "override",
        ),
        [
            (
                row_named(row["identity"], listed.who, names),
                str(row["denials"]),
                by_policy(row["by_policy"]),
                ago(listing.now_ms, row["last_ms"]),
                override_text(row["override"]),
            )
            for row, listed in zip(rows, listing.rows, strict=True)
        ],
        right={1},
    )
    ordered = "last denial" if order == "last" else "denials"
    shown = f"rows {offset + 1}-{offset + len(rows)}, by {ordered}"
    return data, f"{head}; {shown}:\n{lines}"


def show(options: dict[str, Any]) -> Report:
    identity = _identity(options["ident"])
    report = Offenders(get_engine).inspect(identity)
    detail = report.detail
    hits = detail.hits[: options["hits"]]
    own = read_as(identity)  # its label may end as a cut id does
    known = users({own, *(h.who for h in detail.hits)})
    names = shown_names(known)
    if own in names:  # a user's list names IPs only: its label is no one else's there
        names[label(identity)] = names[own]
    data = {
        "identity": label(identity),
        "now_ms": report.now_ms,
        "offender": None if detail.offender is None else offender_data(detail.offender, None),
        "would_deny": None if detail.shadow is None else offender_data(detail.shadow, None),
        "override": override_data(detail.override),
        "behind": [{"who": who, "hits": n} for who, n in detail.behind()],
        "hits_recorded": len(detail.hits),
        "hits": [hit_data(h) for h in hits],
        "quota": [quota_data(r) for r in report.quotas],
        "usernames": known.names,
        "deleted_users": sorted(known.gone),
    }
    return data, show_text(data, names)


def reset(options: dict[str, Any]) -> Report:
    identity, forget = _identity(options["ident"]), options["forget"]
    names = list(Offenders(get_engine).reset(identity, options["policy"], forget=forget))
    data = {"action": "reset", "identity": label(identity), "policies": names, "forget": forget}
    text = f"{label(identity)}: counters reset under {', '.join(names) or 'no policy'}"
    if forget:
        text += "; its offender record, metadata list and index entries are gone"
    else:
        text += "; its offender record is kept"
    return data, text + "."


def _overriding(mode: str) -> Callable[[dict[str, Any]], Report]:
    def apply(options: dict[str, Any]) -> Report:
        identity = _identity(options["ident"], former_users=False)
        seconds = options["seconds"]
        service = Offenders(get_engine)
        (service.block if mode == "block" else service.allow)(identity, seconds, by=_who())
        idle = not current().counting(identity.kind)
        data = {"action": mode, "identity": label(identity), "seconds": seconds, "idle": idle}
        effect = "denied" if mode == "block" else "admitted uncounted"
        text = (
            f"{label(identity)}: {mode}ed for {span(seconds)}; "
            f"{in_effect(f'every check of it is {effect} until then')} "
            f"(end it early with: ratelimits lift {label(identity)})."
        )
        if idle:
            text += (
                f" No enabled policy counts {identity.kind} identities: no policy applies "
                "this until one does."
            )
        return data, text

    return apply


def lift(options: dict[str, Any]) -> Report:
    identity = _identity(options["ident"])
    before = Offenders(get_engine).lift(identity)
    data: Data = {"action": "lift", "identity": label(identity), "lifted": override_data(before)}
    if before is None:
        return data, f"{label(identity)}: no block or allow-listing was in force."
    return data, f"{label(identity)}: lifted ({override_text(data['lifted'])})."


def forget(options: dict[str, Any]) -> Report:
    identity = _identity(options["ident"])
    erased = Offenders(get_engine).forget(identity)
    others = [label(other) for other in erased.others]
    data = {
        "action": "forget",
        "identity": label(identity),
        "keys_deleted": erased.keys,
        "entries_dropped": erased.entries,
        "lists_cleaned": others,
    }
    lists = "identity's list" if len(others) == 1 else "identities' lists"
    text = (
        f"{label(identity)}: forgotten; {erased.keys} key(s) deleted, {erased.entries} hit "
        f"entr{'y' if erased.entries == 1 else 'ies'} naming it dropped from "
        f"{len(others)} other {lists}."
    )
    return data, text


def status(options: dict[str, Any]) -> Report:
    config = get_settings()
    engine = get_engine()
    nodes = _nodes(engine)
    memory = memory_of(engine.client)
    topology = _topology(engine)
    registry = current()
    indexed: int | None = None  # a cluster node asked as standalone: MOVED for most shards
    if topology != MISCONFIGURED_CLUSTER:
        pipe = engine.client.pipeline(transaction=False)
        for shard in range(engine.keys.shards):
            pipe.zcard(engine.keys.index(shard))
        indexed = sum(pipe.execute())
    data = {
        "redis": {
            "topology": topology,
            "nodes": nodes,
        },
        "enabled": config.enabled,
        "key_prefix": config.key_prefix,
        "shards": engine.keys.shards,
        "policies": len(registry.all()),
        "policies_loaded": registry.loaded,
        "database_error": registry.failure,
        "offenders_indexed": indexed,
        "breaker_open": breaker.is_open,
        "metrics": config.metrics,
        "memory": [m.as_dict() for m in memory],
    }
    node_lines = [
        f"    {n['address']:<22} {n['role']:<8} Redis {n['version']:<8} PING {n['ping_ms']:.2f} ms"
        for n in nodes
    ]
    switch = "on" if config.enabled else 'OFF (DJANGO_RATELIMITS["ENABLED"] is False)'
    index = (
        f"{indexed} identities (all shards)"
        if indexed is not None
        else "not read (most shards live on other nodes)"
    )
    text = "\n".join(
        [
            f"limiting: {switch}",
            f"Redis: reachable, {topology}, {len(nodes)} node(s):",
            *node_lines,
            *([MISCONFIGURED_TEXT] if topology == MISCONFIGURED_CLUSTER else []),
            f"keys: prefix {config.key_prefix!r}, {engine.keys.shards} shards",
            f"enabled policies: {_policies_line(registry)}",
            f"offender index: {index}",
            f"circuit breaker: {'open' if breaker.is_open else 'closed'} "
            "(in this process; every worker keeps its own)",
            f"metrics: {config.metrics or 'off'} (docs/metrics.md)",
            "memory when full:",
            *(f"    {m.describe()}" for m in memory),
        ]
    )
    return data, text


def _policies_line(registry: PolicyRegistry) -> str:
    """How many policies apply, and whether the database could be read for them."""
    count = len(registry.all())
    if registry.failure is None:
        return str(count)
    if not registry.loaded:
        return (
            f"{count} (code defaults only: the database could not be read, "
            f"{registry.failure}; database policies and blocked networks do not apply)"
        )
    return (
        f"{count} (kept from an earlier read: the database could not be read, {registry.failure})"
    )


SUBCOMMANDS: dict[str, Callable[[dict[str, Any]], Report]] = {
    "offenders": offenders,
    "show": show,
    "reset": reset,
    "block": _overriding("block"),
    "allow": _overriding("allow"),
    "lift": lift,
    "forget": forget,
    "status": status,
    **networks.SUBCOMMANDS,
    "override": lambda options: rate_overrides.override(
        _identity(options["ident"], former_users=False), options, _who()
    ),
    "overrides": rate_overrides.overrides,
    "unoverride": lambda options: rate_overrides.unoverride(_identity(options["ident"]), options),
}


# --------------------------------------------------------------------------- status


MISCONFIGURED_CLUSTER = "cluster node as standalone"
MISCONFIGURED_TEXT = (
    "    DJANGO_RATELIMITS['REDIS'] lacks CLUSTER: True: the keys other nodes serve get "
    "MOVED, and their checks fail open (check E011)"
)


def _topology(engine: Engine) -> str:
    """``cluster``, ``standalone``, or :data:`MISCONFIGURED_CLUSTER` for a standalone
    client of a cluster node (``DJANGO_RATELIMITS['REDIS']`` lacks ``CLUSTER: True``)."""
    client = engine.client
    if isinstance(client, RedisCluster):
        return "cluster"
    return MISCONFIGURED_CLUSTER if cluster_enabled(client) else "standalone"


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
