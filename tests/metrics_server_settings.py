"""The server settings of ``tests/load/test_servers_metrics.py``: ``tests.server_settings``
with ``METRICS`` on, the scrape's token (``RATELIMITS_SERVER_METRICS_TOKEN``), and the
metrics view in the URLconf."""

from __future__ import annotations

import os

from tests.server_settings import *  # noqa: F403
from tests.server_settings import DJANGO_RATELIMITS

DJANGO_RATELIMITS = {
    **DJANGO_RATELIMITS,
    "METRICS": "prometheus",
    "METRICS_TOKEN": os.environ["RATELIMITS_SERVER_METRICS_TOKEN"],
}
ROOT_URLCONF = "tests.metrics_urls"
