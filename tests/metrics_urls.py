"""``tests.urls`` and the metrics view (``tests/request/test_metrics.py``, the metrics server)."""

from __future__ import annotations

from django.urls import include, path

from tests.urls import urlpatterns as site

urlpatterns = [
    *site,
    path("ratelimits/metrics", include("django_ratelimits.contrib.prometheus")),
]
