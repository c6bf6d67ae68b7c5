"""The example project's test set-up: its settings pointed at the harness' Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from tests.kit.project import project_settings


@pytest.fixture
def project(
    redis_client: redis.Redis | RedisCluster, request: pytest.FixtureRequest
) -> Iterator[redis.Redis | RedisCluster]:
    """The project on a clean Redis, standalone then cluster; yields that Redis' client."""
    target: object = request.getfixturevalue("redis_standalone").url
    if isinstance(redis_client, RedisCluster):
        target = {"URL": request.getfixturevalue("redis_cluster").url, "CLUSTER": True}
    with project_settings(target):
        yield redis_client
