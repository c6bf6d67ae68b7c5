"""A module that no setting lists and that records being imported: admin must
refuse a key function in it without importing it."""

from __future__ import annotations

from django.http import HttpRequest

from tests.key_functions import CALLED, IMPORTED

IMPORTED.append(__name__)


def log_everyone_out(request: HttpRequest) -> str:
    CALLED.append(request.path)
    return "x"
