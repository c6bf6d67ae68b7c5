"""Metrics through a real gunicorn with two worker processes in prometheus-client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): requests spread over both workers, and
a scrape, whichever worker answers it, shows their sum (docs/metrics.md).

One policy, ``api``: ``^/api/hello``, 5/h per address, sliding log (no window rolls
over while the test runs, however slow the machine). Each of many new addresses sends
7 requests: 5 allowed, 2 denied.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.redis_harness import RedisServer, reserved_port
from tests.load.live import (
    Reply,
    Site,
    assert_no_server_error,
    gunicorn,
    new_source,
    prepare,
    serve,
)

pytestmark = pytest.mark.slow

LIMIT, SENT = 5, 7
POLICY: dict[str, object] = {
    "name": "api",
    "rates": f"{LIMIT}/h",
    "algorithm": "sliding_log",
    "path": r"^/api/hello",
}
WORKERS = 2
ROUNDS = 20  # at most, of 8 addresses each, until both workers answered some
SCRAPE = "/ratelimits/metrics"
METRICS_TOKEN = "scrape-token-of-the-metrics-server-tests"


@pytest.fixture
def site(redis_standalone: RedisServer, tmp_path: Path) -> Iterator[Site]:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with redis_standalone.client() as client:
        client.flushall()
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = prepare(
        tmp_path,
        redis_standalone.url,
        [POLICY],
        DJANGO_SETTINGS_MODULE="tests.metrics_server_settings",
        PROMETHEUS_MULTIPROC_DIR=str(shared),
        RATELIMITS_SERVER_METRICS_TOKEN=METRICS_TOKEN,
    )
    port = reserved_port()
    argv = [*gunicorn(port, tmp_path, WORKERS), "--config", "python:tests.load.gunicorn_metrics"]
    with serve("gunicorn", argv, env, tmp_path, port, WORKERS) as served:
        yield served
    assert_no_server_error(served)


def one_client(site: Site) -> list[Reply]:
    source = new_source()
    return [site.get("/api/hello", source=source) for _ in range(SENT)]


def scrape(site: Site) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """The worker that answered, and every sample it showed."""
    reply = site.get(SCRAPE, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert reply.status == 200, reply.body[:300]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.body.decode())
        for s in family.samples
    }
    return reply.worker, samples


def test_a_scrape_sums_every_worker_s_counts(site: Site) -> None:
    replies: list[Reply] = []
    with ThreadPoolExecutor(8) as pool:
        for _ in range(ROUNDS):
            for sent in pool.map(lambda _: one_client(site), range(8)):
                replies += sent
            if len({r.worker for r in replies}) == WORKERS:
                break
    assert len({r.worker for r in replies}) == WORKERS, "one worker answered every request"
    clients = len(replies) // SENT
    assert [r.status for r in replies].count(200) == LIMIT * clients
    assert [r.status for r in replies].count(429) == (SENT - LIMIT) * clients

    # Any worker's scrape shows both workers' counts: scraped until both answered one.
    seen: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < WORKERS and time.monotonic() < deadline:
        worker, samples = scrape(site)
        seen[worker] = samples
    assert len(seen) == WORKERS
    for samples in seen.values():
        decided = {
            dict(labels)["outcome"]: value
            for (name, labels), value in samples.items()
            if name == "django_ratelimits_decisions_total" and dict(labels)["policy"] == "api"
        }
        assert decided == {"allowed": LIMIT * clients, "denied": (SENT - LIMIT) * clients}
        # Each request was decided by one engine call, or refused by a worker's cache.
        calls = samples[("django_ratelimits_engine_call_seconds_count", ())]
        cached = samples.get(
            ("django_ratelimits_denial_cache_refusals_total", (("policy", "api"),)), 0.0
        )
        assert calls + cached == len(replies)
        assert samples[("django_ratelimits_near_limit_total", (("policy", "api"),))] == clients
        assert samples[("django_ratelimits_breaker_open", ())] == 0
        assert samples[("django_ratelimits_policies_unread", ())] == 0


def test_a_dead_worker_s_counts_stay_and_its_live_gauge_goes(site: Site, tmp_path: Path) -> None:
    replies = one_client(site)
    worker = replies[0].worker
    files = {p.name for p in (tmp_path / "prometheus").iterdir()}
    gauge = f"gauge_livesum_{worker}.db"
    assert {gauge, f"counter_{worker}.db", f"histogram_{worker}.db"} <= files
    os.kill(int(worker), signal.SIGKILL)  # the master calls child_exit, starts another
    deadline = time.monotonic() + 30
    while (tmp_path / "prometheus" / gauge).exists():
        assert time.monotonic() < deadline, "child_exit did not remove the dead worker's gauge"
        time.sleep(0.05)
    _, samples = scrape(site)
    decided = {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "django_ratelimits_decisions_total"
    }
    assert decided == {"allowed": LIMIT, "denied": SENT - LIMIT}
