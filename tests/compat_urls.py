"""Views for the compat and DRF tests (``override_settings(ROOT_URLCONF=...)``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_ratelimits import compat


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


urlpatterns = [
    path("compat/ip", compat_ip),
    path("compat/soft", compat_soft),
    path("compat/cbv", CompatClassView.as_view()),
]
