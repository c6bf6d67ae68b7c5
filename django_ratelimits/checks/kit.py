"""E100: a part of the test kit (:mod:`django_ratelimits.testing`) is on.

The kit has no setting: a test turns it on in code and it undoes itself when the
test ends. Code that turned one on outside a test (``disable_ratelimits().__enter__()``
at import time, say) would limit nothing, or read time from a clock that never moves,
in production: this check fails every command that runs checks (``check``,
``runserver``, ``migrate``) while one is on. It never imports the kit: a process that
did not import it has nothing on.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.checks import CheckMessage, Error, register

from django_ratelimits.checks.common import TAG
from django_ratelimits.engine import active_test_clock


@register(TAG)
def check_test_kit_off(**kwargs: Any) -> list[CheckMessage]:
    kit = sys.modules.get("django_ratelimits.testing.kit")
    on = list(kit.active()) if kit is not None else []
    if active_test_clock() is not None and "fake_clock" not in on:
        on.append("fake_clock")
    if not on:
        return []
    return [
        Error(
            f"The rate-limit test kit is on outside a test: {', '.join(sorted(set(on)))}. "
            "Rate limiting does not work as configured while it is.",
            hint="Use django_ratelimits.testing only in tests, with 'with' or as a decorator, "
            "so that it is undone when the test ends.",
            id="django_ratelimits.E100",
        )
    ]
