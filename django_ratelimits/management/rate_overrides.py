"""``manage.py ratelimits override | overrides | unoverride``: identity overrides
(an identity's own rates for a while, ``docs/tiers.md``) from the terminal.

::

    manage.py ratelimits override ip:203.0.113.7 api 10000/h --for 1d --reason "load test"
    manage.py ratelimits override header:KEY '*' 50/s --for 7d --reason "partner"
    manage.py ratelimits overrides [--expired]
    manage.py ratelimits unoverride ip:203.0.113.7 [api]

``*`` as the policy means every policy that counts that kind of identity. The
rows are the ones admin edits, checked by the same rules (a malformed rate or
a policy that never counts that kind exits with status 1 and the reason).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.utils import timezone

from django_ratelimits.engine import Identity
from django_ratelimits.engine.keys import label
from django_ratelimits.management.output import Data, in_effect, row_named, shown_names, table
from django_ratelimits.models import (
    Policy,
    RateOverride,
    epoch_seconds,
    expiry_in,
    instant,
    spec_fields,
)
from django_ratelimits.offenders.identities import counted_overrides, override_who
from django_ratelimits.offenders.text import span
from django_ratelimits.policies import get_registry

Report = tuple[Data, str]
EVERY = "*"


def add_arguments(
    add: Callable[[str, str], argparse.ArgumentParser], duration: Callable[[str], int]
) -> None:
    create = add("override", "give an identity its own rates under a policy, for a while")
    create.add_argument("ident", help="kind:value, e.g. ip:203.0.113.7 or header:KEY")
    create.add_argument("policy", help=f"a policy name, or {EVERY} for every policy")
    create.add_argument("rates", help="e.g. 10000/h or '10/s, 500/h'")
    create.add_argument("--for", dest="seconds", type=duration, required=True, metavar="DURATION")
    create.add_argument("--reason", required=True, help="why: shown in admin")
    listing = add("overrides", "the identity overrides not expired, and whether each is in force")
    listing.add_argument("--expired", action="store_true", help="the expired ones instead")
    remove = add("unoverride", "end an identity's overrides (under one policy, or all)")
    remove.add_argument("ident")
    remove.add_argument("policy", nargs="?", help="only under this policy")


def _policy(name: str | None) -> Policy | None:
    if name is None or name == EVERY:
        return None
    found = Policy.objects.filter(name=name).first()
    if found is None:
        # A policy a view declares (@ratelimit(rate=...)) is enforced before a worker's
        # refresh writes its row: write that row now, as the refresh would (the command
        # imported the URLconf, so code's policies are known here as on the site).
        declared = get_registry().declared(name)
        if declared is None:
            raise CommandError(f"no rate-limit policy is named {name!r}")
        found, _ = Policy.objects.get_or_create(name=name, defaults=spec_fields(declared))
    return found


def _row_data(row: RateOverride) -> Data:
    return {
        "identity": str(row),
        "policy": row.policy.name if row.policy else EVERY,
        "rates": row.rates,
        "expires_at": instant(row.expires_at).isoformat(),
        "reason": row.reason,
    }


def override(identity: Identity, options: dict[str, Any], who: str) -> Report:
    seconds = options["seconds"]
    row = RateOverride(
        policy=_policy(options["policy"]),
        identity_kind=identity.kind,
        identity_value=identity.value,
        rates=options["rates"],
        # On the clock overrides expire on, added to the instant (not the wall time).
        expires_at=expiry_in(seconds, get_registry().wall_clock()),
        reason=f"{options['reason']} ({who})"[:200],
    )
    try:
        row.full_clean()
    except ValidationError as exc:
        raise CommandError("; ".join(exc.messages)) from exc
    row.save()
    data = {"action": "override", **_row_data(row)}
    return data, (
        f"{label(identity)}: {row.rates} under {data['policy']} for {span(seconds)}; "
        f"{in_effect('every worker applies it within POLICY_REFRESH')} "
        f"(end it early with: ratelimits unoverride {label(identity)})."
    )


def overrides(options: dict[str, Any]) -> Report:
    """The overrides not expired (or the expired ones), each ``in_force`` as admin's list
    says it: not expired, and an identity a request can still be counted as (not an IP
    counted otherwise since, W012, nor a user deleted since: ``user:42 (no longer
    exists)`` in the table). One query for the rows' users."""
    now = timezone.now()
    query = RateOverride.objects.select_related("policy")
    query = (
        query.filter(expires_at__lte=now)
        if options["expired"]
        else query.filter(expires_at__gt=now)
    )
    rows = list(query)
    known, counted = counted_overrides(rows)
    clock = get_registry().wall_clock()  # what the workers judge an expiry by
    data = [
        _row_data(row) | {"in_force": epoch_seconds(row.expires_at) > clock and counted[row.pk]}
        for row in rows
    ]
    if not data:
        return {"overrides": []}, "No identity override to show."
    marks = shown_names(known)
    lines = table(
        ("identity", "policy", "rates", "in force", "expires", "reason"),
        [
            (
                row_named(d["identity"], override_who(row), marks),
                d["policy"],
                d["rates"],
                "yes" if d["in_force"] else "no",
                d["expires_at"],
                d["reason"],
            )
            for d, row in zip(data, rows, strict=True)
        ],
    )
    return {"overrides": data}, lines


def unoverride(identity: Identity, options: dict[str, Any]) -> Report:
    rows = RateOverride.objects.filter(
        identity_kind=identity.kind,
        identity_value=identity.value,
        expires_at__gt=timezone.now(),
    )
    if options["policy"] == EVERY:
        rows = rows.filter(policy=None)
    elif options["policy"] is not None:
        rows = rows.filter(policy=_policy(options["policy"]))
    ended, _ = rows.delete()  # post_delete for each row bumps the version stamp
    data = {"action": "unoverride", "identity": label(identity), "ended": ended}
    return data, f"{label(identity)}: {ended} override(s) ended."
