"""The way back from a block: the requests a block by staff never refuses.

Staff who block their own address (or user) must still be able to lift it
from admin. So a block or allow-listing set by staff does not decide:

- the login view of any admin site, for anyone: it is how a blocked admin
  gets back in;
- every other view of an admin site, for an active staff user who may lift
  blocks from the dashboard (:data:`VIEW_PERMISSION` and :data:`LIFT_PERMISSION`),
  who could lift the block anyway. ``LIFT_PERMISSION`` alone is not enough: the
  dashboard refuses (403) staff without ``VIEW_PERMISSION``.

Their rate limits still count these requests as any other's: a blocked
address gets no more login attempts than the login's policy gives anyone.
``docs/dashboard.md`` says so for staff. Which view a path is comes from
:mod:`django_ratelimits.resolved`. The answer is kept on the request: async
code asks :func:`away_back` first, off the event loop where the permission
check reads the database, and the planning that follows finds it there.
"""

from __future__ import annotations

from typing import Final

from asgiref.sync import sync_to_async
from django.http import HttpRequest

from django_ratelimits.resolved import resolved

__all__ = ["LIFT_PERMISSION", "VIEW_PERMISSION", "away_back", "way_back"]

VIEW_PERMISSION: Final = "django_ratelimits.view_offenders"
LIFT_PERMISSION: Final = "django_ratelimits.block_offenders"
_ANSWER: Final = "_ratelimits_way_back"


def way_back(request: HttpRequest) -> bool:
    """Whether a block or allow-listing must not decide ``request``."""
    answer: bool | None = getattr(request, _ANSWER, None)
    if answer is None:
        answer = _way_back(request)
        setattr(request, _ANSWER, answer)
    return answer


async def away_back(request: HttpRequest) -> bool:
    """:func:`way_back` for async code: the permission check runs in a thread."""
    if resolved(request).admin == "other" and getattr(request, _ANSWER, None) is None:
        setattr(request, _ANSWER, await sync_to_async(_way_back)(request))
    return way_back(request)


def _way_back(request: HttpRequest) -> bool:
    view = resolved(request).admin
    if view == "login":
        return True
    if view is None:
        return False
    user = getattr(request, "user", None)
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and user.has_perms((VIEW_PERMISSION, LIFT_PERMISSION))
    )
