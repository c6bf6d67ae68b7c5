"""Redis' own CPU, read from ``INFO``: what a row's calls cost the server, whoever the client.

``INFO cpu`` gives the server process's CPU time (``used_cpu_user`` +
``used_cpu_sys``): the commands, Lua, parsing the protocol, and the system
calls that read requests and write replies. ``INFO commandstats`` gives the
time inside commands only. A peer that sends two cheap commands and a check that
sends one script compare fairly only on the first: reading and answering a
request costs the server several microseconds whatever the command.

:class:`Meter` takes both around each timed round of each row of
:func:`benchmarks.kit.interleave` (it is an ``enter``), so the rows are metered
in the same interleaved rounds as they are timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from benchmarks.kit import Scenario

# The meter's own commands, never counted as a row's.
_OWN = {"info", "config|resetstat"}


def cpu_times_us(client: redis.Redis) -> tuple[float, float]:
    """The server's CPU time so far, user and system, in microseconds."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) * 1e6, float(info["used_cpu_sys"]) * 1e6


def cpu_us(client: redis.Redis) -> float:
    """The server's CPU time so far (user + system), in microseconds."""
    return sum(cpu_times_us(client))


def commands_us(client: redis.Redis) -> float:
    """Microseconds spent inside commands so far, every command but ``INFO``."""
    stats = client.info("commandstats")
    return sum(
        float(entry["usec"])
        for name, entry in stats.items()
        if name.removeprefix("cmdstat_") not in _OWN
    )


@dataclass
class Cost:
    """Redis' CPU over a row's timed calls."""

    calls: int = 0
    cpu_us: float = 0.0  # user + system, the whole server
    commands_us: float = 0.0  # inside commands (Lua and what it calls included)

    @property
    def cpu_per_call(self) -> float:
        return self.cpu_us / self.calls

    @property
    def commands_per_call(self) -> float:
        return self.commands_us / self.calls


class Meter:
    """``enter`` of :func:`~benchmarks.kit.interleave`: Redis' CPU around each timed round.

    The warm-up (a round that times nothing: the row's ``calls`` do not grow) is
    not counted. ``costs`` holds a :class:`Cost` per row name.
    """

    def __init__(self, stats: redis.Redis) -> None:
        self.stats = stats
        self.costs: dict[str, Cost] = {}

    @contextmanager
    def __call__(self, scenario: Scenario) -> Iterator[None]:
        calls = scenario.calls
        # commandstats outside the CPU window, so its reading costs the window nothing.
        commands = commands_us(self.stats)
        cpu = cpu_us(self.stats)
        yield
        cpu = cpu_us(self.stats) - cpu
        commands = commands_us(self.stats) - commands
        if scenario.calls > calls:
            cost = self.costs.setdefault(scenario.name, Cost())
            cost.calls += scenario.calls - calls
            cost.cpu_us += cpu
            cost.commands_us += commands
