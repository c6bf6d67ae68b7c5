"""An example project's views, limited as a project limits them: tests/kit tests them
with the kit alone, as the project's own tests would."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from django_ratelimits.decorators import ratelimit


def items(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"items": []})


@ratelimit("kit-login", rate="3/m", key="ip", methods=["POST"], algorithm="fixed_window")
def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("welcome")


urlpatterns = [
    path("api/items", items),
    path("login", login),
]
