"""Fixtures of the dashboard's browser tests (their helpers: ``tests.dashboard.browsing``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboard.browsing import tab


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A 1280 px wide tab on the live server."""
    with tab(browser, live_server.url) as desktop:
        yield desktop
