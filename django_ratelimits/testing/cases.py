"""Django test cases whose tests each get fresh counters and a fake clock.

Like django-defender's ``DefenderTestCaseMixin`` / ``DefenderTestCase`` /
``DefenderTransactionTestCase`` (``defender.test``), which flush the Redis database
after each test, but without touching any key but the test's own: each test runs
under :func:`~.kit.reset_ratelimits` (a key prefix of its own, deleted after it) and
:func:`~.kit.fake_clock` (``self.ratelimits_clock``). Class attributes choose the rest:

* ``ratelimit_policies``: the policies every test of the class gets
  (:func:`~.kit.override_policies`); ``None`` (the default): the database's rows and
  the decorators' defaults, rows saved in a test seen at once;
* ``ratelimits_disabled = True``: nothing is limited (:func:`~.kit.disable_ratelimits`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django.test import TestCase, TransactionTestCase

from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.testing.clock import FakeClock
from django_ratelimits.testing.kit import (
    disable_ratelimits,
    fake_clock,
    override_policies,
    reset_ratelimits,
)

__all__ = ["RateLimitTestCase", "RateLimitTestMixin", "RateLimitTransactionTestCase"]

_Base: Any = TransactionTestCase if TYPE_CHECKING else object


class RateLimitTestMixin(_Base):
    """Put it before a Django test case class: ``class T(RateLimitTestMixin, TestCase)``."""

    ratelimit_policies: ClassVar[Sequence[PolicySpec | Mapping[str, Any]] | None] = None
    ratelimits_disabled: ClassVar[bool] = False
    ratelimits_clock: FakeClock

    def setUp(self) -> None:
        super().setUp()
        self.enterContext(reset_ratelimits())
        self.ratelimits_clock = self.enterContext(fake_clock())
        if self.ratelimit_policies is not None:
            self.enterContext(override_policies(*self.ratelimit_policies))
        if self.ratelimits_disabled:
            self.enterContext(disable_ratelimits())


class RateLimitTestCase(RateLimitTestMixin, TestCase):
    """Django's ``TestCase`` with :class:`RateLimitTestMixin`."""


class RateLimitTransactionTestCase(RateLimitTestMixin, TransactionTestCase):
    """Django's ``TransactionTestCase`` with :class:`RateLimitTestMixin`."""
