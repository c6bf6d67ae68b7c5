"""Helpers for tests of projects that use django-ratelimits (docs/testing.md).

* :class:`FakeClock`: a clock that moves only when told to (importable anywhere,
  without Django set up);
* :func:`disable_ratelimits`, :func:`override_policies`, :func:`fake_clock`,
  :func:`reset_ratelimits`: context managers, also function decorators
  (:mod:`.kit`; they need Django set up, so they are imported on first use);
* :class:`RateLimitTestMixin`, :class:`RateLimitTestCase`,
  :class:`RateLimitTransactionTestCase`: the same for Django's test cases (:mod:`.cases`);
* pytest fixtures: ``pytest_plugins = ["django_ratelimits.testing.pytest_plugin"]``.

Nothing here is imported by the package itself: importing ``django_ratelimits``
or its middleware imports neither this module nor pytest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from django_ratelimits.testing.clock import FakeClock

if TYPE_CHECKING:
    from django_ratelimits.testing.cases import (
        RateLimitTestCase,
        RateLimitTestMixin,
        RateLimitTransactionTestCase,
    )
    from django_ratelimits.testing.kit import (
        disable_ratelimits,
        fake_clock,
        override_policies,
        reset_ratelimits,
    )

__all__ = [
    "FakeClock",
    "RateLimitTestCase",
    "RateLimitTestMixin",
    "RateLimitTransactionTestCase",
    "disable_ratelimits",
    "fake_clock",
    "override_policies",
    "reset_ratelimits",
]

_LAZY = {
    "disable_ratelimits": "kit",
    "fake_clock": "kit",
    "override_policies": "kit",
    "reset_ratelimits": "kit",
    "RateLimitTestMixin": "cases",
    "RateLimitTestCase": "cases",
    "RateLimitTransactionTestCase": "cases",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
