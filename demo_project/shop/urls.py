"""URLs of the demo site: the shop's, then the base ones (admin, /api/hello)."""

from __future__ import annotations

from django.contrib.auth.views import LogoutView
from django.urls import path

from demo_project.shop import views
from demo_project.urls import urlpatterns as base_urlpatterns

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.login, name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("api/orders", views.orders, name="api-orders"),
    path("api/drf/ping", views.Ping.as_view(), name="api-drf-ping"),
    *base_urlpatterns,
]
