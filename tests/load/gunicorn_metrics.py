"""The gunicorn configuration of the metrics server tests, as docs/metrics.md tells a
project to write its own: a worker that exits takes its live gauges with it."""

from __future__ import annotations

from typing import Any

from prometheus_client import multiprocess


def child_exit(server: Any, worker: Any) -> None:
    multiprocess.mark_process_dead(worker.pid)
