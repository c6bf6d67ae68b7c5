"""Which functions a policy that counts by "a callable" may call.

Admin text is not trusted to name code: a policy editor who could name any
importable function could make every request call it (``django.contrib.auth.logout``
logs the caller out). Code is trusted. So a policy may name only

* a function listed in ``DJANGO_RATELIMITS["KEY_FUNCTIONS"]``, or
* a function that code names with ``@ratelimit(..., key="callable:<path>")``
  (registered when the decorator runs, that is when its module is imported).

Admin refuses any other path without importing it. A row that names one anyway
(written before the list existed, or outside admin) is system check error
``E008``, and at request time counts by the client IP instead, with an error
logged (see :func:`django_ratelimits.identity.identities`).
"""

from __future__ import annotations

from django_ratelimits.conf import get_settings

__all__ = ["allowed", "is_allowed", "trust"]

_named_in_code: set[str] = set()


def trust(path: str) -> None:
    """Allow ``path``: code names it as a policy's key function."""
    _named_in_code.add(path)


def allowed() -> tuple[str, ...]:
    """Every path a policy may name: ``KEY_FUNCTIONS`` in order, then those code names."""
    listed = get_settings().key_functions
    return (*listed, *sorted(_named_in_code.difference(listed)))


def is_allowed(path: str) -> bool:
    return path in _named_in_code or path in get_settings().key_functions
