"""Views under stacked ``@ratelimit`` decorators, for tests/request/test_stacked_decorators.py.

No decorator here names a rate: the tests create the policies' rows, so that importing
this module declares nothing for the rest of the session.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_ratelimits.decorators import ratelimit


@ratelimit("st-outer")
@ratelimit("st-inner")
def stacked(request: HttpRequest) -> HttpResponse:
    return HttpResponse("stacked")


@ratelimit("st-outer")
def outer_only(request: HttpRequest) -> HttpResponse:
    return HttpResponse("outer only")


@ratelimit("st-soft", block=False)
@ratelimit("st-hard")
def soft_outside(request: HttpRequest) -> HttpResponse:
    return HttpResponse("soft outside")


urlpatterns = [
    path("stacked", stacked),
    path("outer", outer_only),
    path("soft-outside", soft_outside),
]
