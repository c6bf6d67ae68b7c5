"""Login views for the failed-login tests: Django's, admin's, an async one, a JSON one and
DRF's token view."""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.auth import aauthenticate, alogin, authenticate, login
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authtoken.views import obtain_auth_token


def hello(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"hello": "world"})


@csrf_exempt
async def async_login(request: HttpRequest) -> HttpResponse:
    """Signs in with Django's async authentication (``aauthenticate``, ``alogin``)."""
    user = await aauthenticate(
        request, username=request.POST.get("username"), password=request.POST.get("password")
    )
    if user is None:
        return HttpResponse("wrong", status=401)
    await alogin(request, user)
    return HttpResponse("welcome")


@csrf_exempt
def json_login(request: HttpRequest) -> HttpResponse:
    """Passes the decoded JSON values to ``authenticate()`` as they are, numbers included."""
    body = json.loads(request.body)
    user = authenticate(request, username=body.get("username"), password=body.get("password"))
    if user is None:
        return HttpResponse("wrong", status=401)
    login(request, user)
    return HttpResponse("welcome")


class KeyBackend:
    """Signs in no one: a backend whose credential is an ``api_key`` (what a user model
    whose ``USERNAME_FIELD`` is ``api_key`` logs in with)."""

    def authenticate(self, request: HttpRequest, api_key: str | None = None, **_: str) -> None:
        return None

    def get_user(self, user_id: int) -> None:
        return None


@csrf_exempt
def key_login(request: HttpRequest) -> HttpResponse:
    """Tries the ``api_key`` and ``password`` posted; Django's ``user_login_failed`` then
    hands over both masked."""
    user = authenticate(
        request, api_key=request.POST.get("api_key"), password=request.POST.get("password")
    )
    return HttpResponse("wrong", status=401) if user is None else HttpResponse("welcome")


urlpatterns = [
    path("accounts/login/", LoginView.as_view(template_name="admin/login.html")),
    path("admin/", admin.site.urls),
    path("async-login", async_login),
    path("api-token-auth/", obtain_auth_token),
    path("api/hello", hello),
    path("json-login", json_login),
    path("key-login", key_login),
]
