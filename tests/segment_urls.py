"""Views routed with the default <str:> converter, which takes a newline in a segment."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path


def export(request: HttpRequest, name: str) -> HttpResponse:
    return HttpResponse(f"export of {name!r}")


urlpatterns = [
    path("api/<str:name>/export", export),
    path("reports/<name>/", export),
]
