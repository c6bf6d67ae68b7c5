"""pytest fixtures for tests of a project's limits (docs/testing.md).

Opt in from the project's root ``conftest.py``::

    pytest_plugins = ["django_ratelimits.testing.pytest_plugin"]

It is not registered by an entry point: installing django-ratelimits adds nothing to
the test runs of projects that do not ask for it. Fixtures (each undone when the
test ends):

``ratelimits_reset``
    counters from zero, under a key prefix of the test's own (deleted after it);
    policy rows saved in the test seen at once. Yields the prefix.
``ratelimits_clock``
    the shared engine on a :class:`~django_ratelimits.testing.FakeClock` (with
    ``ratelimits_reset``): ``ratelimits_clock.advance(60)`` moves every window.
``ratelimits_policies``
    a function: ``ratelimits_policies({"name": "api", "rate": "5/m", "path": "^/api/"},
    ...)`` makes exactly those policies apply for the rest of the test (with
    ``ratelimits_reset``), in memory: no database needed, no ``POLICY_REFRESH`` wait.
``ratelimits_disabled``
    nothing is limited.

The kit needs Django set up (pytest-django does it), so this module imports it
only when a fixture is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from django_ratelimits.policies.spec import PolicySpec
    from django_ratelimits.testing.clock import FakeClock

__all__ = ["ratelimits_clock", "ratelimits_disabled", "ratelimits_policies", "ratelimits_reset"]


@pytest.fixture
def ratelimits_reset() -> Iterator[str]:
    from django_ratelimits.testing.kit import reset_ratelimits

    with reset_ratelimits() as prefix:
        yield prefix


@pytest.fixture
def ratelimits_clock(ratelimits_reset: str) -> Iterator[FakeClock]:
    from django_ratelimits.testing.kit import fake_clock

    with fake_clock() as clock:
        yield clock


@pytest.fixture
def ratelimits_policies(
    ratelimits_reset: str,
) -> Iterator[Callable[..., tuple[PolicySpec, ...]]]:
    from django_ratelimits.testing.kit import override_policies

    with ExitStack() as stack:

        def apply(*policies: PolicySpec | Mapping[str, Any]) -> tuple[PolicySpec, ...]:
            return stack.enter_context(override_policies(*policies))

        yield apply


@pytest.fixture
def ratelimits_disabled() -> Iterator[None]:
    from django_ratelimits.testing.kit import disable_ratelimits

    with disable_ratelimits():
        yield
