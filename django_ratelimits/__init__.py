"""Redis-backed rate limiting for Django, with policies edited in admin."""

from __future__ import annotations

__version__ = "0.1.0"
