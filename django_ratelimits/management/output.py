"""What ``manage.py ratelimits`` prints: the JSON shapes of offenders, overrides and
quotas, and the plain-text tables and lines made of them.

Times are the terminal's short texts (``5m``, ``1h 30m``, ``12s ago``) from
:mod:`django_ratelimits.offenders.text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_ratelimits.conf import get_settings
from django_ratelimits.engine import LimitResult
from django_ratelimits.engine.hits import ANONYMOUS, DENIED, SHADOW, Hit
from django_ratelimits.engine.offenders import Offender
from django_ratelimits.engine.overrides import Override
from django_ratelimits.offenders.text import span
from django_ratelimits.offenders.users import Users

Data = dict[str, Any]

SWITCHED_OFF = (
    'limiting is switched off (DJANGO_RATELIMITS["ENABLED"] is False): no request is '
    "refused or counted until it is on"
)


def in_effect(effect: str) -> str:
    """``effect``, what an action does to requests; while ``ENABLED`` is False, that it
    does nothing yet (the row or key is kept, and applies once limiting is on)."""
    return effect if get_settings().enabled else SWITCHED_OFF


def offender_data(offender: Offender, override: Override | None) -> Data:
    return {
        "identity": offender.label,
        "ident": offender.ident,
        "kind": offender.kind,
        "denials": offender.denials,
        "by_policy": dict(sorted(offender.by_policy.items(), key=lambda kv: -kv[1])),
        "first_ms": offender.first_ms,
        "last_ms": offender.last_ms,
        "override": override_data(override),
    }


OUTCOMES = {DENIED: "denied", SHADOW: "would have been denied"}


def hit_data(hit: Hit) -> Data:
    """One recorded request: ``outcome`` is ``allowed``, ``denied`` or ``would have
    been denied`` (only shadow-mode policies refused it: it was let through);
    ``address`` is the client address the hit keeps beside its hash (``HASH_IPS``), or
    ``""``."""
    return {
        "who": hit.who,
        "address": hit.address,
        "what": hit.what,
        "at_ms": hit.at_ms,
        "allowed": hit.allowed,
        "outcome": OUTCOMES.get(hit.outcome, "allowed"),
        "policies": {name: OUTCOMES.get(status, "allowed") for name, status in hit.policies},
    }


def override_data(override: Override | None) -> Data | None:
    if override is None:
        return None
    return {"mode": override.state, "seconds_left": override.seconds, "ban_level": override.level}


def quota_data(result: LimitResult) -> Data:
    """The quota left now under one limit of a policy that counts the identity."""
    return {
        "policy": result.limit.policy,
        "rate": str(result.limit.rate),
        "algorithm": result.limit.algorithm.value,
        "remaining": result.remaining,
        "capacity": result.limit.capacity,
        "full_in": round(result.reset_after, 3),
    }


def override_text(override: Data | None) -> str:
    if override is None:
        return ""
    mode = f"banned (level {override['ban_level']})" if override["ban_level"] else override["mode"]
    return f"{mode}, {span(override['seconds_left'])} left"


def shown_names(known: Users) -> dict[str, str]:
    """What :func:`named` puts after each ``user:<pk>`` ``known`` tells of: its username,
    or that no user has its id any more (a user deleted since the limiter counted it)."""
    return known.names | dict.fromkeys(known.gone, "no longer exists")


def row_named(row_label: str, who: str, names: dict[str, str]) -> str:
    """A row's identity: its label, after it the name ``names`` gives ``who``, how hit
    entries name the identity (``user:- (dash)``: a row's identity is never anonymous)."""
    return f"{row_label} ({names[who]})" if who in names else row_label


def named(who: str, names: dict[str, str]) -> str:
    """``user:3 (alice)``; else ``user:-``, how hit entries write an anonymous client, is
    ``anonymous`` (``names`` may name the label ``user:-`` of the user whose id is ``-``)."""
    if who in names:
        return f"{who} ({names[who]})"
    return "anonymous" if who == ANONYMOUS else who


def by_policy(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def ago(now_ms: int, at_ms: int) -> str:
    return f"{span((now_ms - at_ms) / 1000)} ago"


def show_text(data: Data, names: dict[str, str]) -> str:
    """``ratelimits show``'s lines, from its JSON ``data``."""
    now_ms, record = data["now_ms"], data["offender"]
    lines = [named(data["identity"], names)]
    if record is None:
        lines.append("  denials:  none recorded")
    else:
        lines.append(
            f"  denials:  {record['denials']} ({by_policy(record['by_policy'])}), "
            f"first {ago(now_ms, record['first_ms'])}, last {ago(now_ms, record['last_ms'])}"
        )
    shadow = data["would_deny"]
    if shadow is not None:
        lines.append(
            f"  would have been denied (shadow mode, which refuses nothing): {shadow['denials']} "
            f"({by_policy(shadow['by_policy'])}), last {ago(now_ms, shadow['last_ms'])}"
        )
    lines.append(f"  override: {override_text(data['override']) or 'none'}")
    behind = ", ".join(f"{named(b['who'], names)} x{b['hits']}" for b in data["behind"])
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
            table(
                ("when", "who", "what", "outcome", "policies"),
                [
                    (
                        ago(now_ms, h["at_ms"]),
                        named(h["who"], names),
                        h["what"],
                        h["outcome"],
                        ", ".join(h["policies"]),
                    )
                    for h in data["hits"]
                ],
                indent="    ",
            )
        )
    return "\n".join(lines)


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: frozenset[int] | set[int] = frozenset(),
    indent: str = "",
) -> str:
    """Columns padded to their widest cell; those in ``right`` aligned right."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])
