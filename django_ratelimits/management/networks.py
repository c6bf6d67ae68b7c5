"""The blocklist subcommands of ``manage.py ratelimits``::

    manage.py ratelimits block-network 203.0.113.0/24 --reason "scraper" [--for 1d]
    manage.py ratelimits unblock-network 203.0.113.0/24
    manage.py ratelimits networks [--all]

They edit :class:`~django_ratelimits.models.BlockedNetwork` rows, checked as admin
checks them (a malformed or too broad network exits with status 1 and the reason),
and every worker sees the edit within ``POLICY_REFRESH``. Entries made here have
no *created by* user (admin's list shows "-"); the reason is what the operator wrote.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from django_ratelimits.management.output import Data, in_effect, table
from django_ratelimits.models import BlockedNetwork, epoch_seconds, expiry_in, instant
from django_ratelimits.offenders.text import span
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.networks import parse_network

Report = tuple[Data, str]
Add = Callable[[str, str], argparse.ArgumentParser]


def add_arguments(add: Add, duration: Callable[[str], int]) -> None:
    """The three subcommands' arguments; ``add(name, help)`` makes a subparser."""
    block = add("block-network", "refuse every request from a network (403, before Redis)")
    block.add_argument("network", help="an address or CIDR: 203.0.113.0/24, 2001:db8::/32")
    block.add_argument("--reason", default="", help="why (for admins; never shown to clients)")
    block.add_argument(
        "--for",
        dest="seconds",
        type=duration,
        metavar="DURATION",
        help="how long: 90s, 30m, 1h, 7d, up to 365d (default: until unblocked)",
    )
    unblock = add("unblock-network", "remove a network's blocklist entries")
    unblock.add_argument("network")
    listing = add("networks", "the blocked networks in force")
    listing.add_argument(
        "--all", action="store_true", help="disabled and expired entries too (in admin: all)"
    )


def _network(text: str) -> str:
    try:
        return str(parse_network(text))
    except ValidationError as exc:
        raise CommandError(f"{text!r}: {' '.join(exc.messages)}") from exc


def block_network(options: dict[str, Any]) -> Report:
    seconds = options["seconds"]
    now = get_registry().wall_clock()  # the clock the workers' blocklist expires on
    expires = None if seconds is None else expiry_in(seconds, now)
    entry = BlockedNetwork(network=options["network"], reason=options["reason"], expires_at=expires)
    try:
        entry.full_clean()
    except ValidationError as exc:
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        raise CommandError(f"{options['network']!r}: {problems}") from exc
    entry.save()
    until = "until unblocked" if seconds is None else f"for {span(seconds)}"
    return entry_data(entry), (
        f"{entry.network}: blocked {until}; "
        f"{in_effect('every worker refuses it within POLICY_REFRESH')} "
        f"(end it early with: ratelimits unblock-network {entry.network})."
    )


def unblock_network(options: dict[str, Any]) -> Report:
    network = _network(options["network"])
    removed, _ = BlockedNetwork.objects.filter(network=network).delete()
    data = {"action": "unblock-network", "network": network, "removed": removed}
    if not removed:
        return data, f"{network}: no blocklist entry has this network (nothing removed)."
    return data, f"{network}: {removed} entr{'y' if removed == 1 else 'ies'} removed."


def networks(options: dict[str, Any]) -> Report:
    rows = BlockedNetwork.objects.all() if options["all"] else BlockedNetwork.objects.active()
    entries = [entry_data(row) for row in rows.select_related("created_by")]
    data = {"all": options["all"], "networks": entries}
    what = "blocklist entries" if options["all"] else "blocked networks in force"
    if not entries:
        return data, f"0 {what}."
    lines = table(
        ("network", "in force", "expires", "reason", "created by"),
        [
            (
                e["network"],
                "yes" if e["in_force"] else "no",
                e["expires_at"] or "never",
                " ".join(e["reason"].split())[:60],
                e["created_by"] or "-",
            )
            for e in entries
        ],
    )
    return data, f"{len(entries)} {what}:\n{lines}"


def entry_data(entry: BlockedNetwork) -> Data:
    """The entry as the command shows it: its times with their UTC offset (with
    ``USE_TZ = False``, that of ``TIME_ZONE``), in force as the workers judge it."""
    now = get_registry().wall_clock()
    expires = entry.expires_at
    return {
        "network": entry.network,
        "reason": entry.reason,
        "enabled": entry.enabled,
        "in_force": entry.enabled and (expires is None or epoch_seconds(expires) > now),
        "expires_at": None if expires is None else instant(expires).isoformat("T", "seconds"),
        "created_by": None if entry.created_by is None else entry.created_by.get_username(),
        "created_at": instant(entry.created_at).isoformat("T", "seconds"),
    }


SUBCOMMANDS: dict[str, Callable[[dict[str, Any]], Report]] = {
    "block-network": block_network,
    "unblock-network": unblock_network,
    "networks": networks,
}
