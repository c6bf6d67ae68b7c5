"""Blocked networks at the door: a request from one is refused before any Redis call.

``RateLimitMiddleware`` asks :func:`refusal` (:func:`arefusal` on the async stack)
for every request (paths with no policy too), and ``@ratelimit`` asks again for
sites without the middleware. The client address is the identity module's
(``REMOTE_ADDR`` unless trusted proxies say otherwise), so a forged
``X-Forwarded-For`` cannot escape a block, and an IPv4-mapped IPv6 address is looked
up as its IPv4 address. The lookup is the registry's compiled index: no database
query, no Redis command. ``ENABLED: False`` turns the blocklist off with the rest of
the package.

The answer is ``403 Forbidden`` (problem details for API clients, the 429 page's
template otherwise), as rack-attack answers for its blocklists: the client is
not asked to come back later. ``BLOCKED_RESPONSE_VIEW`` replaces it, as
``RESPONSE_VIEW`` replaces the 429 (one that cannot be imported or raises is logged
and the 403 given: never a 500). The entry's reason is never shown.

Refusals are logged at most once per blocked network per :data:`LOG_EVERY`
seconds and per process, each line counting the refusals since the last one, so
a flood from a blocked network cannot flood the logs; the ``network_blocked``
signal is sent for every refusal, for a project's own counters. ``docs/blocklist.md``
describes it all.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Final

from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext as _

from django_ratelimits import signals
from django_ratelimits.conf import IPNetwork, get_settings
from django_ratelimits.errors import RateLimitsError
from django_ratelimits.identity import client_address
from django_ratelimits.policies.networks import BlockedEntry
from django_ratelimits.policies.registry import PolicyRegistry
from django_ratelimits.responses import custom_response, problem

__all__ = ["LOG_EVERY", "NetworkBlocked", "arefusal", "refusal"]

logger = logging.getLogger("django_ratelimits")

LOG_EVERY: Final = 60.0
"""Seconds between two log lines about the same blocked network, per process."""

_LOGGED_MAX: Final = 10_000


class NetworkBlocked(RateLimitsError):
    """What ``BLOCKED_RESPONSE_VIEW`` is called with: the entry that refused the request."""

    def __init__(self, entry: BlockedEntry) -> None:
        self.entry = entry
        super().__init__(f"requests from {entry.network} are blocked")


def refusal(request: HttpRequest, registry: PolicyRegistry) -> HttpResponseBase | None:
    """The 403 for a request from a blocked network, else None. No I/O."""
    entry = _blocked(request, registry)
    if entry is None:
        return None
    signals.network_blocked.send(sender=BlockedEntry, request=request, entry=entry)
    return forbidden(request, NetworkBlocked(entry))


async def arefusal(request: HttpRequest, registry: PolicyRegistry) -> HttpResponseBase | None:
    """:func:`refusal` for async code: its signal is sent with ``asend`` (on the event
    loop, ``send`` cannot run a project's async receiver)."""
    entry = _blocked(request, registry)
    if entry is None:
        return None
    await signals.network_blocked.asend(sender=BlockedEntry, request=request, entry=entry)
    return forbidden(request, NetworkBlocked(entry))


def _blocked(request: HttpRequest, registry: PolicyRegistry) -> BlockedEntry | None:
    """The entry that blocks the request's network (its refusal logged), else None."""
    if not get_settings().enabled:
        return None
    address = client_address(request)
    if address is None:
        return None
    entry = registry.blocked(address)
    if entry is not None:
        _note(request, entry)
    return entry


def forbidden(request: HttpRequest, exception: NetworkBlocked) -> HttpResponseBase:
    """The response to a blocked network's request: ``BLOCKED_RESPONSE_VIEW``'s, else 403."""
    view = get_settings().blocked_response_view
    custom = custom_response("BLOCKED_RESPONSE_VIEW", view, request, exception) if view else None
    if custom is not None:
        return custom
    detail = _("Requests from your network are not accepted.")
    return problem(request, 403, _("Forbidden"), detail)


clock: Callable[[], float] = time.monotonic
"""The time the log's bound is counted in; tests replace it."""

# Per blocked network: when its last line was logged (monotonic) and the refusals since.
_logged: dict[IPNetwork, tuple[float, int]] = {}
_lock = threading.Lock()


def _note(request: HttpRequest, entry: BlockedEntry) -> None:
    """Log the refusal, or count it towards the network's next line."""
    now = clock()
    with _lock:
        last, quiet = _logged.get(entry.network, (-math.inf, 0))
        if now - last < LOG_EVERY:
            _logged[entry.network] = (last, quiet + 1)
            return
        if len(_logged) >= _LOGGED_MAX:
            _logged.clear()
        _logged[entry.network] = (now, 0)
    logger.warning(
        "refused %s %r from %s: the network %s is blocked (%s)%s",
        request.method,
        request.path[:200],
        client_address(request),
        entry.network,
        entry.reason or "no reason given",
        f"; {quiet} more refused since the last such line" if quiet else "",
    )
