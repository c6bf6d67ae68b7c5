"""Views limited to GET by every entry point, for the HEAD tests
(tests/request/test_head_requests.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratelimits import compat
from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.decorators import ratelimit


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("page")


@ratelimit("head-decorated", rate="2/h", key="ip", methods=["GET"])
def decorated(request: HttpRequest) -> HttpResponse:
    return HttpResponse("decorated")


@compat.ratelimit(key="ip", rate="2/h", method="GET")
def compat_decorated(request: HttpRequest) -> HttpResponse:
    return HttpResponse("compat")


def compat_function(request: HttpRequest) -> HttpResponse:
    options = {"group": "head-fn", "key": "ip", "rate": "2/h", "method": "GET"}
    if compat.is_ratelimited(request, increment=True, **options):
        return HttpResponse("limited", status=429)
    return HttpResponse("counted")


class GetOnlyApi(APIView):
    throttle_classes = [PolicyThrottle]
    throttle_scope = "head-drf"

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("page", plain),
    path("decorated", decorated),
    path("compat", compat_decorated),
    path("compat-fn", compat_function),
    path("drf", GetOnlyApi.as_view()),
]
