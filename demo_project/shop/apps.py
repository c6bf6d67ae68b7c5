"""The shop app of the demo. Its ready() logs every denial, shadow ones included."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.http import HttpRequest

from django_ratelimits.engine import LimitResult
from django_ratelimits.policies.spec import PolicySpec

logger = logging.getLogger("demo_project.shop")


class ShopConfig(AppConfig):
    name = "demo_project.shop"
    label = "shop"
    verbose_name = "Demo shop"

    def ready(self) -> None:
        from django_ratelimits.signals import rate_limited

        rate_limited.connect(log_denial, dispatch_uid="demo_project.shop.log_denial")


def log_denial(
    *, request: HttpRequest, policy: PolicySpec, result: LimitResult, shadow: bool, **kwargs: Any
) -> None:
    """One console line per denied policy: who hit which limit where. A staff block's
    refusal is logged by django_ratelimits itself ("blocked by staff until ...")."""
    if result.blocked:
        return
    logger.info(
        "%s %s %s: %s %s over %s %s (retry in %.1f s)",
        "shadow-denied" if shadow else "denied",
        request.method,
        request.path,
        result.identity.kind,
        result.identity.value,
        policy.name,
        result.limit.rate,
        result.retry_after,
    )
