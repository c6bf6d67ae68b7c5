"""Policies: what to limit, from admin text to the request path.

======================  =============================================================
``spec``                :class:`PolicySpec`, ``Mode``, ``KeyKind``: a compiled policy,
                        model-free
``parse``               the parsing of a policy's admin text (rates, burst, paths,
                        methods, networks, key arguments)
``matching``            path patterns (RE2, linear time) and the prefix index
``labels``              what admin and the dashboard call each choice
``registry``            the rows of the database, compiled and held in memory
======================  =============================================================

The model itself is :class:`django_ratelimits.models.Policy`, where Django
looks for it. The registry's entry points are importable from here.
"""

from __future__ import annotations

from django_ratelimits.policies.registry import (
    PolicyRegistry,
    acurrent,
    current,
    get_registry,
)
from django_ratelimits.policies.spec import KeyKind, Mode, PolicySpec

__all__ = [
    "KeyKind",
    "Mode",
    "PolicyRegistry",
    "PolicySpec",
    "acurrent",
    "current",
    "get_registry",
]
