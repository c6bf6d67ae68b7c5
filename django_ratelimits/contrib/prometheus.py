"""The Prometheus exposition view of the limiter's metrics (``docs/metrics.md``).

::

    # urls.py
    path("ratelimits/metrics", include("django_ratelimits.contrib.prometheus")),
    # or: path("ratelimits/metrics", metrics_view),

With ``DJANGO_RATELIMITS["METRICS"] = "prometheus"`` it answers the text a
Prometheus server scrapes (all processes' values under gunicorn's
multiprocess mode), to whoever may see it: a request that carries
``Authorization: Bearer <METRICS_TOKEN>`` (when that token is set), or an
active staff user's. Anyone else gets 403: policy names and their denial
rates say what a site guards, and are not for the internet. With metrics off
it is a 404.
"""

from __future__ import annotations

import hmac

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from django_ratelimits.conf import get_settings
from django_ratelimits.metrics import observer
from django_ratelimits.metrics.prometheus import PrometheusMetrics

__all__ = ["may_scrape", "metrics_view", "urlpatterns"]


def may_scrape(request: HttpRequest) -> bool:
    """Whether ``request`` may read the metrics: the bearer token, or an active staff user."""
    token = get_settings().metrics_token
    if token is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # As bytes: compare_digest refuses str with non-ASCII characters, which a
        # client may send.
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return True
    user = getattr(request, "user", None)
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    metrics = observer()
    if not isinstance(metrics, PrometheusMetrics):
        raise Http404("metrics are off")
    if not may_scrape(request):
        return HttpResponseForbidden()
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(metrics.exposed()), content_type=content_type)


urlpatterns = [path("", metrics_view, name="ratelimits-metrics")]
