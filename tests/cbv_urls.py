"""An async class-based view decorated as docs/request-path.md shows
(``method_decorator(ratelimit(...), name="dispatch")``). Its policy, keyed by user,
is the test's own database row: a code default declared here would join the registry
of every later test (the quota of a user that ``manage.py ratelimits show`` lists)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_ratelimits.decorators import ratelimit


@method_decorator(ratelimit("t-acbv"), name="dispatch")
class AsyncClassView(View):
    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("async cbv ok")


urlpatterns = [path("acbv", AsyncClassView.as_view())]
