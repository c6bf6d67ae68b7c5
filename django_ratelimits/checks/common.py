"""What every system check shares: the tags, and the settings or None."""

from __future__ import annotations

from typing import Final

from django.core.exceptions import ImproperlyConfigured

from django_ratelimits.conf import RateLimitSettings, get_settings

__all__ = ["REDIS_TAG", "TAG", "valid_settings"]

TAG: Final = "ratelimits"
REDIS_TAG: Final = "ratelimits_redis"


def valid_settings() -> RateLimitSettings | None:
    """The validated settings, or None when they are invalid (E002 says why)."""
    try:
        return get_settings()
    except ImproperlyConfigured:
        return None
