"""What one request costs under a policy: its ``cost``, or what its cost function says.

A policy's ``cost`` (admin, or ``@ratelimit(..., cost=5)``) is charged to each of
its limits per request, so an expensive endpoint spends more of the budget than a
cheap one. A cost *function* ``cost(request) -> int`` is code, never admin text:
only ``@ratelimit(..., cost=function)`` names one, for the policy it names (admin
cannot name a callable to run on every request; see :mod:`.key_functions` and
docs/security.md, finding 4).

What a cost function returns may depend on what the client sent, so it is
checked on every request, and no answer can raise a 500 or let the request
through uncounted by mistake:

* a whole number from 1 up is charged, lowered to :data:`~.policies.spec.MAX_COST`
  and, per limit, to what the limit holds (such a request takes the whole budget:
  it passes only when none of it is spent);
* 0 says the request is free under this policy: it is not counted by it;
* anything else (a float, a string, ``None``, ``True``, a negative number, an
  exception) charges the policy's own ``cost`` instead, and is logged once per
  policy and process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.http import HttpRequest

from django_ratelimits.engine import Limit
from django_ratelimits.policies.spec import MAX_COST, PolicySpec

__all__ = ["CostFunction", "charges", "cost_of", "has_function", "register"]

logger = logging.getLogger("django_ratelimits")

CostFunction = Callable[[HttpRequest], int]

_functions: dict[str, CostFunction] = {}
_reported: set[str] = set()


def register(policy: str, function: CostFunction) -> None:
    """Make ``function`` say what a request costs under ``policy`` (code only)."""
    known = _functions.get(policy)
    if known is not None and known is not function:
        raise ValueError(
            f"policy {policy!r} already has the cost function {known.__qualname__}: "
            "one policy, one cost function (name another policy for the other view)"
        )
    _functions[policy] = function


def has_function(policy: str) -> bool:
    """Whether code gave ``policy`` a cost function (which may read ``request.user``)."""
    return policy in _functions


def cost_of(request: HttpRequest, policy: PolicySpec) -> int:
    """What ``request`` costs under ``policy``: 0 (free) up to :data:`MAX_COST`."""
    function = _functions.get(policy.name)
    if function is None:
        return policy.cost
    try:
        value = function(request)
    except Exception:
        _report(policy, "raised an exception", exc_info=True)
        return policy.cost
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _report(policy, f"returned {value!r}, not a whole number from 0 up")
        return policy.cost
    return min(value, MAX_COST)


def charges(cost: int, limits: Sequence[Limit]) -> list[int]:
    """What a request of ``cost`` (at least 1) charges each of ``limits``: at most a
    window's budget (:attr:`~django_ratelimits.engine.Limit.most_cost`; a bucket whose
    burst is less takes it in debt)."""
    return [min(cost, limit.most_cost) for limit in limits]


def _report(policy: PolicySpec, problem: str, *, exc_info: bool = False) -> None:
    """Log, once per process and policy, that its cost function gave no cost."""
    if policy.name in _reported:
        return
    _reported.add(policy.name)
    logger.error(
        "the cost function of rate-limit policy %r %s: its requests cost the policy's "
        "cost (%d) instead",
        policy.name,
        problem,
        policy.cost,
        exc_info=exc_info,
    )
