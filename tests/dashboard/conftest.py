"""Fixtures of the dashboard's browser tests (their helpers: ``tests.dashboard.browsing``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from tests.dashboard.browsing import tab


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A 1280 px wide tab on the live server."""
    with tab(browser, live_server.url) as desktop:
        yield desktop


@pytest.fixture
def redis_down(site_redis: Any) -> Iterator[None]:
    """The site's Redis setting pointed at a port where nothing answers."""
    with override_settings(
        DJANGO_RATELIMITS={"REDIS": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.2}
    ):
        yield
