"""Views naming policies, some of which do not exist (check E006:
tests/operations/test_checks_bypass.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.decorators import ratelimit


@ratelimit("serach")  # a typo: no policy, no rate= default
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@ratelimit("declared-in-code", rate="5/m")
def declared(request: HttpRequest) -> HttpResponse:
    return HttpResponse("declared")


@ratelimit("kept-in-admin")
def in_admin(request: HttpRequest) -> HttpResponse:
    return HttpResponse("admin")


class TypoApi(APIView):
    throttle_classes = [PolicyThrottle]
    throttle_scope = "typo-api"

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


class ReportThrottle(PolicyThrottle):
    policy = "typo-report"


@api_view(["GET"])
@throttle_classes([ReportThrottle])
def report(request: Request) -> Response:
    return Response({"ok": True})


nested = [path("search", search), path("report", report)]

urlpatterns = [
    path("nested/", include(nested)),
    path("declared", declared),
    path("admin-kept", in_admin),
    path("api", TypoApi.as_view()),
]
