"""The test kit cannot be on in production by accident: production code never imports
it (nor pytest), no setting turns on its clock, and a kit left on fails the checks."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_ratelimits.conf import get_settings
from django_ratelimits.engine import get_engine
from django_ratelimits.testing import disable_ratelimits, fake_clock, override_policies
from tests.operations.test_layout import fresh_python

PRODUCTION = """
import sys
import django
django.setup()  # apps.ready registers the system checks
import django_ratelimits.middleware, django_ratelimits.decorators, django_ratelimits.admin
import django_ratelimits.compat, django_ratelimits.contrib.drf, django_ratelimits.dashboard.urls
from django.core.checks import run_checks
run_checks()
kit = ("pytest", "_pytest", "django_ratelimits.testing")
print(sorted(m for m in sys.modules if m.startswith(kit)))
"""


def test_production_imports_neither_the_kit_nor_pytest() -> None:
    assert fresh_python(PRODUCTION) == "[]"


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize("key", ["CLOCK", "FAKE_CLOCK", "TEST_CLOCK", "TESTING", "TIME"])
def test_no_setting_turns_on_a_test_clock(key: str) -> None:
    changed = {**settings.DJANGO_RATELIMITS, key: True}
    with override_settings(DJANGO_RATELIMITS=changed), pytest.raises(ImproperlyConfigured) as error:
        get_settings()
    assert key in str(error.value)
    assert get_engine().clock is None  # the settings' engine reads Redis' TIME


def kit_errors() -> list[str]:
    return [m.msg for m in run_checks() if m.id == "django_ratelimits.E100"]


def test_a_kit_left_on_is_a_check_error() -> None:
    assert kit_errors() == []
    with disable_ratelimits():
        [message] = kit_errors()
        assert "disable_ratelimits" in message
    with fake_clock(), override_policies():
        [message] = kit_errors()
        assert "fake_clock, override_policies" in message
    # Entered and never left, as production code might by mistake:
    entered = disable_ratelimits()
    entered.__enter__()
    try:
        assert kit_errors()
    finally:
        entered.__exit__(None, None, None)
    assert kit_errors() == []


def test_the_kit_refuses_a_second_thread_while_one_has_it_on() -> None:
    """Two threads whose blocks overlap (a view or a task using the kit in a threaded
    worker) would each put back what it found: the second to leave restores the
    first's state, limiting off for good with nothing on for E100 to see (an attack
    review). The second thread is refused before it changes anything."""
    inside, leave = threading.Event(), threading.Event()
    refused: list[BaseException] = []

    def first() -> None:
        with disable_ratelimits():
            inside.set()
            leave.wait(10)

    def second() -> None:
        inside.wait(10)
        try:
            with disable_ratelimits():
                pass
        except RuntimeError as error:
            refused.append(error)
        finally:
            leave.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    [error] = refused
    assert "another thread has disable_ratelimits() on" in str(error)
    assert get_settings().enabled  # both left: limiting is on again
    assert kit_errors() == []
    with disable_ratelimits(), fake_clock():  # one thread may still nest them
        assert not get_settings().enabled
