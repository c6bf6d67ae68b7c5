"""A Django REST framework throttle that enforces a named policy.

::

    class OrderList(APIView):
        throttle_classes = [PolicyThrottle]
        throttle_scope = "api"            # the policy's name, as with ScopedRateThrottle

    class LoginThrottle(PolicyThrottle):
        policy = "login"                  # or name it on a subclass (for @api_view)

DRF views share quota with the middleware and ``@ratelimit``: it is the same
policy, counted by the same engine. When ``RateLimitMiddleware`` already
decided the policy for this request (its path matched), the throttle reuses
that verdict from ``request.ratelimit`` instead of asking Redis again. A view
without a policy name is not throttled; a name with no enabled policy is
allowed (an unknown name is logged as an error and is check E006).
``docs/drf.md`` has the details.
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from django_ratelimits.decide import Verdict, decide_policy

__all__ = ["PolicyThrottle"]


class PolicyThrottle(BaseThrottle):
    """Allow a request when the policy ``policy`` (else the view's ``throttle_scope``) does."""

    policy: str | None = None

    def __init__(self) -> None:
        self.verdict: Verdict | None = None
        self.names: set[str] = set()

    def get_policy(self, view: APIView) -> str | None:
        """The name of the policy to enforce on ``view``, or None for none."""
        return self.policy or getattr(view, "throttle_scope", None)

    def allow_request(self, request: Request, view: APIView) -> bool:
        name = self.get_policy(view)
        if not name:
            return True
        # request._request is what the middleware and decorators saw. A disabled
        # or unknown policy (logged) blocks nothing.
        verdict = decide_policy(request._request, name)
        self.verdict, self.names = verdict, {name}
        return not verdict.blocked({name})

    def wait(self) -> float | None:
        """Seconds until a retry can pass: what ``Retry-After`` says, never earlier."""
        return None if self.verdict is None else self.verdict.retry_after(self.names)
