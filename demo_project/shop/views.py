"""The demo's views: a home page, a JSON API, a rate-limited login and a DRF endpoint."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.decorators import ratelimit
from django_ratelimits.models import Policy

ORDERS = [
    {"id": 1001, "item": "espresso beans, 1 kg", "total": "24.00"},
    {"id": 1002, "item": "burr grinder", "total": "189.00"},
    {"id": 1003, "item": "milk jug", "total": "12.50"},
]


def home(request: HttpRequest) -> HttpResponse:
    """What to try, with the policies as they are in the database now."""
    context = {
        "base": request.build_absolute_uri("/").rstrip("/"),
        "redis_port": urlsplit(settings.DEMO_REDIS_URL).port,
        "policies": Policy.objects.all(),
    }
    return render(request, "shop/home.html", context)


@require_GET
def orders(request: HttpRequest) -> JsonResponse:
    """Limited by the seeded "api" path policy and watched by "orders-watch" (shadow)."""
    return JsonResponse({"orders": ORDERS})


login = ratelimit("login", rate="5/m", key="ip", methods=["POST"])(
    LoginView.as_view(template_name="shop/login.html")
)
"""Django's login form; five POSTs a minute per client address (the "login" policy)."""


class Ping(APIView):
    """DRF: the "api" policy through ``PolicyThrottle`` rather than the middleware."""

    throttle_classes = [PolicyThrottle]
    throttle_scope = "api"
    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer]

    def get(self, request: Request) -> Response:
        name = request.user.get_username() if request.user.is_authenticated else None
        return Response({"pong": True, "user": name})
