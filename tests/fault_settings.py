"""Settings of the servers the reliability tests start: ``tests.server_settings``, plus

* ``RATELIMITS_SERVER_CLUSTER=1``: ``RATELIMITS_SERVER_REDIS`` is a node of a Redis Cluster;
* every ``rate_limited`` and ``backend_failed`` signal written to the server's
  output as one line (``signal rate_limited policy=...``), so a test can see
  that the signals a project connects to were sent, from another process.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from django_ratelimits import signals
from tests.server_settings import *  # noqa: F403
from tests.server_settings import DJANGO_RATELIMITS, LOGGING

if os.environ.get("RATELIMITS_SERVER_CLUSTER") == "1":
    DJANGO_RATELIMITS = {
        **DJANGO_RATELIMITS,
        "REDIS": {"URL": os.environ["RATELIMITS_SERVER_REDIS"], "CLUSTER": True},
    }

LOGGING = {
    **LOGGING,
    "loggers": {
        **LOGGING["loggers"],  # type: ignore[dict-item]
        "tests.signals": {"handlers": ["stderr"], "level": "INFO"},
    },
}

_log = logging.getLogger("tests.signals")


def _rate_limited(*, policy: Any, shadow: bool, **kwargs: Any) -> None:
    _log.info("signal rate_limited policy=%s shadow=%s", policy.name, shadow)


def _backend_failed(*, policies: Any, fail_closed: bool, error: Any, **kwargs: Any) -> None:
    names = ",".join(p.name for p in policies)
    _log.info(
        "signal backend_failed policies=%s fail_closed=%s error=%s", names, fail_closed, error
    )


signals.rate_limited.connect(_rate_limited)
signals.backend_failed.connect(_backend_failed)
