"""Views for the compat and DRF tests (``override_settings(ROOT_URLCONF=...)``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratelimits import compat
from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.decorators import ratelimit


@compat.ratelimit(key="ip", rate="2/h")
def compat_ip(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@compat.ratelimit(key="ip", rate="1/h", block=False)
def compat_soft(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"limited": request.limited})  # type: ignore[attr-defined]


@method_decorator(compat.ratelimit(key="ip", rate="2/h", method=compat.UNSAFE), name="dispatch")
class CompatClassView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("read")

    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("written")


class ScopedApi(APIView):
    throttle_classes = [PolicyThrottle]
    throttle_scope = "drf-api"

    def get(self, request: Request) -> Response:
        return Response({"ok": True})

    def post(self, request: Request) -> Response:
        return Response({"posted": True})


class SharedApi(ScopedApi):
    throttle_scope = "drf-shared"


class UnscopedApi(ScopedApi):
    throttle_scope = ""


class LoginThrottle(PolicyThrottle):
    policy = "drf-login"


@api_view(["GET", "POST"])
@throttle_classes([LoginThrottle])
def drf_login(request: Request) -> Response:
    return Response({"user": str(request.user)})


@ratelimit("drf-shared")
def shared_plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


urlpatterns = [
    path("drf/api", ScopedApi.as_view()),
    path("drf/shared", SharedApi.as_view()),
    path("drf/unscoped", UnscopedApi.as_view()),
    path("drf/login", drf_login),
    path("plain/shared", shared_plain),
    path("compat/ip", compat_ip),
    path("compat/soft", compat_soft),
    path("compat/cbv", CompatClassView.as_view()),
]
