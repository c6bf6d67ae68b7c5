"""A policy declared in code: ``@ratelimit``'s defaults, or a test's policies.

:func:`declared` turns the arguments code writes (a rate as text, ``key="header:X"``,
methods in any case, networks as text) into a :class:`~.spec.PolicySpec`, checking
them as admin would: a mistake raises ``ValueError`` when the code runs, not at the
first request.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError

from django_ratelimits import key_functions
from django_ratelimits.engine import Algorithm, Ban
from django_ratelimits.policies.parse import (
    check_key_arg,
    check_log_size,
    check_login_key,
    parse_cidrs,
    parse_identity_budget,
    parse_lease,
    policy_rates,
)
from django_ratelimits.policies.spec import (
    MAX_COST,
    Counts,
    KeyKind,
    Mode,
    PolicySpec,
    Recording,
    cost_problem,
)

__all__ = ["declared"]


def declared(
    name: str,
    *,
    rate: str,
    key: str = "ip",
    methods: Iterable[str] = (),
    algorithm: Algorithm | str = Algorithm.SLIDING_WINDOW,
    burst: int | None = None,
    lease: int | None = None,
    mode: Mode | str = Mode.ENFORCE,
    identity_budget: str = "",
    record_metadata: Recording | str = Recording.DENIALS,
    fail_closed: bool = False,
    exempt_staff: bool = False,
    exempt_superusers: bool = False,
    allow_cidrs: Iterable[str] = (),
    path: str = "",
    priority: int = 0,
    description: str = "",
    cost: int = 1,
    ban: Ban | None = None,
) -> PolicySpec:
    """The policy ``name`` with these fields (every field of a policy in admin, by its
    field name; ``key`` is ``"ip"``, ``"user"``, ``"header:<name>"``,
    ``"callable:<dotted.path>"``...). A callable named here is trusted: code, unlike
    admin text, may name any function (see :mod:`django_ratelimits.key_functions`).
    ``ban`` is parsed by the caller, who reports a bad one (check E010)."""
    kind, _, arg = key.partition(":")
    if kind == KeyKind.CALLABLE:
        key_functions.trust(arg)
    try:
        check_key_arg(kind, arg, False)
        check_login_key(Counts.REQUESTS, kind)  # a declared policy counts requests
        rates = policy_rates(algorithm, rate, parse_lease(algorithm, lease))
        check_log_size(algorithm, rates)
    except ValidationError as exc:  # admin's wording, raised as code's mistake
        raise ValueError(f"policy {name!r}: {' '.join(exc.messages)}") from None
    spec = PolicySpec(
        name,
        rates,
        Algorithm(algorithm),
        burst,
        Mode(mode),
        KeyKind(kind),
        arg,
        path=path,
        methods=frozenset(m.upper() for m in methods),
        exempt_staff=exempt_staff,
        exempt_superusers=exempt_superusers,
        allow_cidrs=parse_cidrs("\n".join(allow_cidrs)),
        fail_closed=fail_closed,
        record_metadata=Recording(record_metadata),
        priority=priority,
        description=description,
        identity_budget=parse_identity_budget(identity_budget),
        cost=cost,
        ban=ban,
    )
    if cost_problem(cost, spec.limits) == "cost_capacity":
        raise ValueError(
            f"policy {name!r}: a request costing {cost} could never pass {rate} "
            f"(a cost is 1 to {MAX_COST}, and at most what each rate allows)"
        )
    return spec
