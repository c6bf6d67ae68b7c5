"""The Prometheus observer: counters, a histogram and two gauges (``pip install
django-ratelimits[prometheus]``; ``docs/metrics.md`` lists them and the queries).

Under gunicorn with several workers, set ``PROMETHEUS_MULTIPROC_DIR`` for the
server (an empty directory, before it starts): each worker then writes its
values to files there and :meth:`PrometheusMetrics.exposed` sums them at
scrape time, whichever worker answers.
"""

from __future__ import annotations

import os
import threading
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from django_ratelimits.breaker import breaker
from django_ratelimits.metrics import Outcome
from django_ratelimits.policies.registry import get_registry

__all__ = ["ENGINE_BUCKETS", "PREFIX", "PrometheusMetrics", "default_metrics", "multiprocess_dir"]

PREFIX: Final = "django_ratelimits"
ENGINE_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
)  # fmt: skip
"""Seconds: 0.1 ms (a local Redis) to 50 ms (a distant one), then the 0.25 s default
``SOCKET_TIMEOUT``, so that calls that timed out stand apart."""


def multiprocess_dir() -> str | None:
    """The directory of prometheus-client's multiprocess mode, None when it is off."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class PrometheusMetrics:
    """An :class:`~django_ratelimits.metrics.Observer` writing to ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.decisions = _Labelled(
            Counter(
                f"{PREFIX}_decisions",
                "Requests each policy decided, by outcome.",
                ["policy", "outcome"],
                registry=registry,
            )
        )
        self.near_limits = _Labelled(
            Counter(
                f"{PREFIX}_near_limit",
                "Requests a policy allowed with less than 10% of a limit's quota left.",
                ["policy"],
                registry=registry,
            )
        )
        self.cache_refusals = _Labelled(
            Counter(
                f"{PREFIX}_denial_cache_refusals",
                "Requests a policy denied from the worker's denial cache, without Redis "
                "(also counted as denied).",
                ["policy"],
                registry=registry,
            )
        )
        self.engine_calls = Histogram(
            f"{PREFIX}_engine_call_seconds",
            "Time of each engine call (one round trip to Redis), failed ones included.",
            buckets=ENGINE_BUCKETS,
            registry=registry,
        )
        self.breaker_open = Gauge(
            f"{PREFIX}_breaker_open",
            "Processes whose circuit breaker is open (1 per process; summed over live "
            "processes in multiprocess mode).",
            multiprocess_mode="livesum",
            registry=registry,
        )
        self._open = breaker.is_open
        self.breaker_open.set(int(self._open))
        self.policies_unreadable = Gauge(
            f"{PREFIX}_policies_unread",
            "Processes whose last refresh of the policies could not read the database "
            "(1 per process; summed over live processes in multiprocess mode).",
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.policies_unread(get_registry().failure is not None)

    def decided(self, policy: str, outcome: Outcome) -> None:
        self.decisions.inc(policy, outcome)

    def near_limit(self, policy: str) -> None:
        self.near_limits.inc(policy)

    def cache_refused(self, policy: str) -> None:
        self.cache_refusals.inc(policy)

    def engine_call(self, seconds: float) -> None:
        self.engine_calls.observe(seconds)

    def breaker(self, is_open: bool) -> None:
        if is_open is not self._open:
            self._open = is_open
            self.breaker_open.set(int(is_open))

    def policies_unread(self, failed: bool) -> None:
        # Told once a refresh (POLICY_REFRESH), not per request: no state kept to skip it.
        self.policies_unreadable.set(int(failed))

    def exposed(self) -> CollectorRegistry:
        """What a scrape shows: every process's values in multiprocess mode (a new
        registry reading the directory), else this registry."""
        if multiprocess_dir() is None:
            return self.registry
        summed = CollectorRegistry()
        MultiProcessCollector(summed)
        return summed


class _Labelled:
    """A counter with labels, its children kept by label values: a dict lookup per
    increment instead of ``labels()``'s checks and lock. Bounded as the series are,
    by policy names (from the database and the code) times outcomes."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self._children: dict[tuple[str, ...], Counter] = {}

    def inc(self, *labels: str) -> None:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self.counter.labels(*labels)
        child.inc()


_default: PrometheusMetrics | None = None
_lock = threading.Lock()


def default_metrics() -> PrometheusMetrics:
    """The process's metrics in prometheus-client's default registry, made once (a
    metric's name can be registered there only once)."""
    global _default
    with _lock:
        if _default is None:
            _default = PrometheusMetrics(REGISTRY)
        return _default
