"""The server settings, serving ``tests.load.inflight_views``."""

from __future__ import annotations

from tests.server_settings import *  # noqa: F403

ROOT_URLCONF = "tests.load.inflight_views"
