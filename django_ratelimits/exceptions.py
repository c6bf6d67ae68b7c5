"""Every error a project may catch, under one public name.

Each is defined by the layer that raises it (see ``docs/development.md``,
"Layers"); this module only gathers them, and nothing inside the package
imports it.

* :class:`RateLimitsError`: the base of them all.
* :class:`RateParseError`: a malformed rate string (:mod:`django_ratelimits.rates`).
* :class:`BackendError`: Redis could not answer (:mod:`django_ratelimits.engine`).
* :class:`RateLimited`: raise it from a view to answer 429 (:mod:`django_ratelimits.decide`).
"""

from __future__ import annotations

from django_ratelimits.decide import RateLimited
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.errors import RateLimitsError, RateParseError

__all__ = ["BackendError", "RateLimited", "RateLimitsError", "RateParseError"]
