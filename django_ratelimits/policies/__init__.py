"""Policies: what to limit, from admin text to the request path.

======================  =============================================================
``spec``                :class:`PolicySpec`, ``Mode``, ``KeyKind``: a compiled policy,
                        model-free
``parse``               the parsing of a policy's admin text (rates, burst, paths,
                        methods, networks, key arguments)
``matching``            path patterns (RE2, linear time) and the prefix index
``labels``              what admin and the dashboard call each choice
``networks``            blocked networks: the admin's text checked, the lookup index
``registry``            the rows of the database, compiled and held in memory
======================  =============================================================

The model itself is :class:`django_ratelimits.models.Policy`, where Django
looks for it. The registry's entry points (``current``, ``acurrent``,
``get_registry``, ``PolicyRegistry``) are importable from here, loaded on first
use: the registry needs the models, and the model-free modules must import
before Django's app registry is ready (an ``AppConfig`` module may name a
``PolicySpec``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_ratelimits.policies.spec import KeyKind, Mode, PolicySpec

if TYPE_CHECKING:
    from django_ratelimits.policies.registry import (
        PolicyRegistry,
        acurrent,
        current,
        get_registry,
    )

__all__ = [
    "KeyKind",
    "Mode",
    "PolicyRegistry",
    "PolicySpec",
    "acurrent",
    "current",
    "get_registry",
]

_FROM_REGISTRY = frozenset({"PolicyRegistry", "acurrent", "current", "get_registry"})


def __getattr__(name: str) -> Any:
    if name in _FROM_REGISTRY:
        from django_ratelimits.policies import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
