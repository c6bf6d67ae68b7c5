"""Views the request-path tests call: plain, decorated, async, class-based."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path, re_path
from django.utils.decorators import method_decorator
from django.views import View

from django_ratelimits.decorators import ratelimit
from django_ratelimits.exceptions import RateLimited


def hello(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"hello": "world"})


@ratelimit("t-login", rate="3/m", key="ip", methods=["POST"])
def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("logged in")


@ratelimit("t-async", rate="2/m", key="ip")
async def async_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async ok")


@ratelimit("t-soft", rate="1/m", key="ip", block=False)
def soft(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"limited": request.ratelimit.blocked()})  # type: ignore[attr-defined]


@method_decorator(ratelimit("t-cbv", rate="2/m", key="user_or_ip"), name="dispatch")
class ClassView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("cbv ok")


def raises(request: HttpRequest) -> HttpResponse:
    raise RateLimited(retry_after=7)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/hello", hello),
    path("api/other", hello),
    path("login", login),
    path("async", async_view),
    path("soft", soft),
    path("cbv", ClassView.as_view()),
    path("raise", raises),
    # Word characters and hyphens ending in one: what tests/load/test_redos_server.py sends.
    re_path(r"^[\w-]+-$", hello),
]


def custom_429(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    """A project's own 429 page (RESPONSE_VIEW)."""
    return HttpResponse("slow down, friend", status=429)
