"""The example project's limits, tested with the kit's Django test cases, as a project
that uses ``manage.py test`` would (pytest only runs them here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import AsyncClient, Client, TestCase

from devtools.redis_harness import RedisServer
from django_ratelimits.testing import RateLimitTestCase, RateLimitTestMixin, override_policies
from tests.kit.project import project_settings


class OnTheHarnessRedis:
    """Stands in for the project's test settings, which name its Redis."""

    @pytest.fixture(autouse=True)
    def _project(self, redis_standalone: RedisServer) -> Iterator[None]:
        with project_settings(redis_standalone.url):
            yield


class LoginTests(OnTheHarnessRedis, RateLimitTestCase):
    def test_three_posts_a_minute(self) -> None:
        client = Client()
        statuses = [client.post("/login").status_code for _ in range(4)]
        self.assertEqual(statuses, [200, 200, 200, 429])
        self.ratelimits_clock.advance(60)
        self.assertEqual(client.post("/login").status_code, 200)

    def test_each_test_starts_from_zero(self) -> None:
        response = Client().post("/login")
        self.assertEqual(response["RateLimit"], '"kit-login";r=2;t=60')


class ApiTests(OnTheHarnessRedis, RateLimitTestMixin, TestCase):
    ratelimit_policies = [{"name": "kit-api", "rate": "2/m", "path": "^/api/"}]

    def test_the_class_policies_apply(self) -> None:
        client = Client()
        statuses = [client.get("/api/items").status_code for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])

    def test_and_only_they(self) -> None:
        client = Client()
        self.assertEqual([client.post("/login").status_code for _ in range(5)], [200] * 5)


class UnlimitedTests(OnTheHarnessRedis, RateLimitTestCase):
    ratelimits_disabled = True

    def test_nothing_is_limited(self) -> None:
        client = Client()
        self.assertEqual([client.post("/login").status_code for _ in range(5)], [200] * 5)


class AsyncTests(OnTheHarnessRedis, RateLimitTestCase):
    async def test_an_async_test_nests_a_part_with_with(self) -> None:
        """Django runs an async test on an event loop in another thread while the test's
        thread, which entered the class's parts in setUp, waits: the kit's guard against
        two threads lets it nest (docs/testing.md: "in an async test use `with`")."""
        with override_policies({"name": "kit-async", "rate": "1/m", "path": "^/api/"}):
            statuses = [(await AsyncClient().get("/api/items")).status_code for _ in range(2)]
        self.assertEqual(statuses, [200, 429])
