"""``LOGGING`` of the server processes that tests and benchmarks start.

On stderr (the tests keep it in a file per server): server errors and the warnings of
django_ratelimits. ``tests/server_settings.py`` and ``benchmarks/settings.py`` use it.
"""

from __future__ import annotations

SERVER_LOGGING: dict[str, object] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django": {"handlers": ["stderr"], "level": "ERROR"},
        "django_ratelimits": {"handlers": ["stderr"], "level": "WARNING"},
    },
}
