"""Where code names a policy: ``@ratelimit`` views and DRF ``PolicyThrottle`` classes.

Check E006 compares these names with the policies that exist. Decorators are
only known once the views are imported, so :func:`references` imports the
URLconf (as Django's own URL checks do) and walks every pattern; throttles are
found on the DRF views it reaches and in ``DEFAULT_THROTTLE_CLASSES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver

from django_ratelimits.resolved import VIEW_POLICIES

__all__ = ["Reference", "references"]


class Reference(NamedTuple):
    """Policy ``name``, named by ``where`` (a view's or a throttle's dotted name)."""

    where: str
    name: str


def references() -> list[Reference]:
    """Every place the URLconf's views and the default throttles name a policy, once each."""
    found: dict[Reference, None] = {}
    if getattr(settings, "ROOT_URLCONF", None):
        for callback in _callbacks(get_resolver().url_patterns):
            view = getattr(callback, "view_class", callback)
            found.update(dict.fromkeys(Reference(_dotted(view), n) for n in _names(callback)))
            found.update(dict.fromkeys(_throttle_references(view)))
    found.update(dict.fromkeys(_throttle_references(None)))
    return list(found)


def _callbacks(patterns: Iterable[URLPattern | URLResolver]) -> Iterator[Callable[..., Any]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _callbacks(pattern.url_patterns)
        else:
            yield pattern.callback


def _names(callback: Callable[..., Any]) -> tuple[str, ...]:
    names = getattr(callback, VIEW_POLICIES, ())
    return tuple(names) if isinstance(names, tuple | list) else ()


def _dotted(thing: object) -> str:
    name = getattr(thing, "__qualname__", "") or type(thing).__qualname__
    renamed = getattr(thing, "__name__", "")
    if renamed and name.rpartition(".")[2] != renamed:  # DRF's @api_view renames its class
        name = renamed
    return f"{getattr(thing, '__module__', '?')}.{name}"


def _throttle_references(view: object | None) -> Iterator[Reference]:
    """The policies the ``PolicyThrottle`` classes of a DRF ``view`` name (with no view:
    the ones ``DEFAULT_THROTTLE_CLASSES`` name by their own ``policy``)."""
    try:
        from rest_framework.settings import api_settings

        from django_ratelimits.contrib.drf import PolicyThrottle
    except ImportError:  # DRF is not installed
        return
    if view is None:
        classes = api_settings.DEFAULT_THROTTLE_CLASSES
    else:
        classes = getattr(view, "throttle_classes", ())
    for throttle in classes:
        if not (isinstance(throttle, type) and issubclass(throttle, PolicyThrottle)):
            continue
        try:
            name = throttle().get_policy(cast(Any, view)) if view is not None else throttle.policy
        except Exception:  # a project's get_policy that needs a real request: not judged
            continue
        if name:
            where = _dotted(throttle) + ("" if view is None else f" on {_dotted(view)}")
            yield Reference(where, name)
