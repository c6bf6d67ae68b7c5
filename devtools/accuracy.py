"""How far each algorithm strays from the exact sliding log, on three traces.

``python -m devtools.accuracy`` prints the table in docs/algorithms.md. It runs
the reference model, which the property tests hold identical to the Redis
scripts; ``tests/engine/test_accuracy.py`` replays the same traces through Redis.

For a limit of L per window W, two figures per algorithm and trace:

* ``admitted``: requests admitted, against the sliding log's count;
* ``worst window``: the most requests admitted inside any span of length W,
  as a multiple of L. The sliding log never exceeds 1.00 by definition.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from devtools.reference import MODELS
from django_ratelimits.engine import RATE_ALGORITHMS, Algorithm

LIMIT = 100
WINDOW_US = 60_000_000
START_US = 1_800_000_000_000_000  # on a window boundary


def steady(seed: int = 1) -> list[int]:
    """Poisson arrivals at 1.5 times the limit, for 20 windows."""
    rnd, t, out = random.Random(seed), START_US, []
    while t < START_US + 20 * WINDOW_US:
        t += max(1, int(rnd.expovariate(1.5 * LIMIT / WINDOW_US)))
        out.append(t)
    return out


def bursty(seed: int = 2) -> list[int]:
    """Bursts of 1-300 requests 1 ms apart, separated by 0-90 s of silence."""
    rnd, t, out = random.Random(seed), START_US, []
    for _ in range(150):
        t += rnd.randint(0, 90_000_000)
        burst = rnd.randint(1, 300)
        out += [t + k * 1000 for k in range(burst)]
        t += burst * 1000
    return out


def boundary(step_us: int = 100_000) -> list[int]:
    """The limit in the last second of a window, then a request every step for two windows."""
    edge = START_US + WINDOW_US
    burst = [edge - 1_000_000 + k * 1000 for k in range(LIMIT)]
    return burst + list(range(edge, edge + 2 * WINDOW_US, step_us))


TRACES: dict[str, Callable[[], list[int]]] = {
    "steady 1.5x": steady,
    "bursty": bursty,
    "boundary attack": boundary,
}

Decide = Callable[[int], bool]


def model_decider(algorithm: Algorithm) -> Decide:
    """A decide(now_us) function backed by the reference model."""
    fn, state = MODELS[algorithm], [None]

    def decide(now: int) -> bool:
        allowed, _, _, _, new = fn(state[0], now, LIMIT, WINDOW_US, LIMIT, 1)
        if allowed:
            state[0] = new
        return allowed

    return decide


def measure(decide: Decide, trace: Sequence[int]) -> tuple[int, float]:
    """(requests admitted, most admitted in any window / limit)."""
    admitted = [t for t in trace if decide(t)]
    worst, first = 0, 0
    for last, t in enumerate(admitted):
        while admitted[first] <= t - WINDOW_US:
            first += 1
        worst = max(worst, last - first + 1)
    return len(admitted), worst / LIMIT


def table() -> str:
    heads = " | ".join(f"{name}: admitted, worst window" for name in TRACES)
    rows = [f"| algorithm | {heads} |"]
    rows.append("|---" * (len(TRACES) + 1) + "|")
    for algorithm in RATE_ALGORITHMS:
        cells = []
        for make in TRACES.values():
            n, worst = measure(model_decider(algorithm), make())
            exact, _ = measure(model_decider(Algorithm.SLIDING_LOG), make())
            cells.append(f"{n} ({(n - exact) / exact:+.1%}), {worst:.2f}x")
        rows.append(f"| {algorithm.value} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(f"limit {LIMIT} per {WINDOW_US // 1_000_000} s\n")
    print(table())
