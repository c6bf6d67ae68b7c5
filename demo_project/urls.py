"""URLs of the demo project."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from demo_project import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/hello", views.hello, name="api-hello"),
]
