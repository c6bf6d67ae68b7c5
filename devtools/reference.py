"""Pure-Python reference model of every algorithm and of the check script.

Each function mirrors its Lua twin operation for operation, including where
Lua computes in doubles (``float`` here), so the model and Redis must agree on
every decision, remaining count, retry time and reset time, to the microsecond.
Property tests drive both with the same requests and the same fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from django_ratelimits.engine import Algorithm, Check, Gate, Identity, KeySpace

Outcome = tuple[bool, int, int, int, Any]  # allowed, remaining, retry, reset, new state
SW_BUCKETS = 10


def fixed_window(
    state: Any, now: int, limit: int, window: int, capacity: int, cost: int
) -> Outcome:
    w = now // window
    n = state[1] if state is not None and state[0] == w else 0
    window_end = (w + 1) * window - now
    if n + cost <= limit:
        after = n + cost
        return True, limit - after, 0, window_end if after > 0 else 0, (w, after)
    return False, max(0, limit - n), window_end, window_end, None


def sliding_window(
    state: Any, now: int, limit: int, window: int, capacity: int, cost: int
) -> Outcome:
    step = window // SW_BUCKETS
    b = now // step
    live = {i: c for i, c in (state or {}).items() if i >= b - SW_BUCKETS}
    total = sum(live.values())
    newest = max((i for i, c in live.items() if c > 0), default=None)
    if total + cost <= limit:
        if cost > 0 and (newest is None or b > newest):
            newest = b
        reset = (newest + SW_BUCKETS + 1) * step - now if newest is not None else 0
        new = dict(live)
        new[b] = new.get(b, 0) + cost
        return True, limit - total - cost, 0, reset, new
    assert newest is not None
    reset = (newest + SW_BUCKETS + 1) * step - now
    need, freed, retry = total + cost - limit, 0, reset
    for i in sorted(live):
        freed += live[i]
        if freed >= need:
            retry = (i + SW_BUCKETS + 1) * step - now
            break
    return False, max(0, limit - total), retry, reset, None


def _swc_estimate(prev: int, cur: int, window: int, elapsed: int) -> int:
    return cur + math.floor(prev * ((window - elapsed) / window))


def _swc_first_fit(prev: int, cur: int, window: int, limit: int, cost: int, start: int) -> int:
    room = limit - cost - cur
    e = start
    if prev > 0:
        e = max(start, math.floor(window - float((room + 1) * window) / prev) + 1)
    while e < window and _swc_estimate(prev, cur, window, e) + cost > limit:
        e += 1
    return min(e, window)


def sliding_window_counter(
    state: Any, now: int, limit: int, window: int, capacity: int, cost: int
) -> Outcome:
    w = now // window
    cur = prev = 0
    if state is not None and state[0] == w:
        cur, prev = state[1], state[2]
    elif state is not None and state[0] == w - 1:
        prev = state[1]
    start = w * window
    elapsed = now - start
    est = _swc_estimate(prev, cur, window, elapsed)

    def reset_for(c: int) -> int:
        if c > 0:
            return start + 2 * window - now
        return start + window - now if prev > 0 else 0

    if est + cost <= limit:
        return True, limit - est - cost, 0, reset_for(cur + cost), (w, cur + cost, prev)
    if cur + cost <= limit:
        retry = start + _swc_first_fit(prev, cur, window, limit, cost, elapsed) - now
    else:
        retry = start + window + _swc_first_fit(cur, 0, window, limit, cost, 0) - now
    return False, max(0, limit - est), retry, reset_for(cur), None


def sliding_log(state: Any, now: int, limit: int, window: int, capacity: int, cost: int) -> Outcome:
    live = sorted(s for s in (state or []) if s > now - window)
    count = len(live)
    if count + cost <= limit:
        reset = window
        if cost == 0:
            reset = live[-1] + window - now if count else 0
        return True, limit - count - cost, 0, reset, live + [now] * cost
    reset = live[-1] + window - now
    retry = live[count + cost - limit - 1] + window - now
    return False, max(0, limit - count), retry, reset, None


def token_bucket(
    state: Any, now: int, limit: int, window: int, capacity: int, cost: int
) -> Outcome:
    cap = float(capacity)
    if state is None:
        tokens, ts = cap, now
    else:
        tokens, ts = state
        if now > ts:
            tokens = min(cap, tokens + float(now - ts) * limit / window)
    stamp = max(ts, now)
    need = min(cost, capacity)  # above the capacity: when full, leaving the bucket in debt
    if tokens >= need:
        left = tokens - cost
        reset = math.ceil((cap - left) * window / limit)
        return True, max(0, math.floor(left)), 0, reset, (left, stamp)
    retry = math.ceil((need - tokens) * window / limit)
    remaining = max(0, math.floor(tokens))
    return False, remaining, retry, math.ceil((cap - tokens) * window / limit), None


def gcra(state: Any, now: int, limit: int, window: int, capacity: int, cost: int) -> Outcome:
    interval = math.ceil(window / limit)
    tolerance = interval * capacity
    tat = max(state if state is not None else now, now)
    new_tat = tat + cost * interval
    # Above the capacity: only when the bucket is full, leaving it in debt.
    allow_at = tat if cost > capacity else new_tat - tolerance
    if now >= allow_at:
        remaining = max(0, math.floor((tolerance - (new_tat - now)) / interval))
        return True, remaining, 0, new_tat - now, new_tat
    remaining = max(0, math.floor((tolerance - (tat - now)) / interval))
    return False, remaining, allow_at - now, tat - now, None


def concurrency(state: Any, now: int, limit: int, lease: int, capacity: int, cost: int) -> Outcome:
    """The slots held (their lease ends), none ever released: only leases free them."""
    live = [end for end in (state or []) if end > now]
    take = min(cost, 1)
    if len(live) + take <= limit:
        reset = lease if live or take else 0
        return True, limit - len(live) - take, 0, reset, live + [now + lease] * take
    return False, max(0, limit - len(live)), 1_000_000, lease, None


MODELS: dict[Algorithm, Callable[..., Outcome]] = {
    Algorithm.FIXED_WINDOW: fixed_window,
    Algorithm.SLIDING_WINDOW: sliding_window,
    Algorithm.SLIDING_WINDOW_COUNTER: sliding_window_counter,
    Algorithm.SLIDING_LOG: sliding_log,
    Algorithm.TOKEN_BUCKET: token_bucket,
    Algorithm.GCRA: gcra,
    Algorithm.CONCURRENCY: concurrency,
}


Result = tuple[Identity, bool, int, int, int]  # who decided, allowed, remaining, retry, reset


class ReferenceEngine:
    """The check script's driver in Python: groups all or nothing, in order; a
    gated check counts against its client when its identity is over budget."""

    def __init__(self, keys: KeySpace) -> None:
        self.keys = keys
        self.state: dict[tuple[str, str], Any] = {}
        self.gates: dict[str, dict[bytes, int]] = {}

    def run(self, checks: Iterable[Check], now: int, cost: int, *, charge: bool) -> list[Result]:
        out: list[Result] = []
        checks = list(checks)
        # What the checks without a gate count: a gate's fallback leaves those out.
        counted = {(c.identity, limit.spec) for c in checks if c.gate is None for limit in c.limits}
        for chk in checks:
            # Each limit with what it charges: its own cost (a policy's), else the call's.
            who, limits = chk.identity, list(zip(chk.limits, chk.charges(cost), strict=True))
            if chk.gate is not None and not self._passes(chk, chk.gate, now, charge=charge):
                who = chk.gate.client
                limits = [(lim, c) for lim, c in limits if (who, lim.spec) not in counted]
            pending: list[tuple[tuple[str, str], Any]] = []
            all_allowed = True
            for limit, charged in limits:
                key = (self.keys.of(who).state, limit.spec)
                allowed, remaining, retry, reset, new = MODELS[limit.algorithm](
                    self.state.get(key),
                    now,
                    limit.rate.limit,
                    limit.rate.window_us,
                    limit.capacity,
                    charged,
                )
                out.append((who, allowed, remaining, retry, reset))
                all_allowed = all_allowed and allowed
                pending.append((key, new))
            if charge and all_allowed:
                self.state.update(pending)
        return out

    def _passes(self, chk: Check, gate: Gate, now: int, *, charge: bool) -> bool:
        """The identity budget: seen within the window, or room for one more."""
        key = self.keys.of(gate.client).gate(chk.identity.kind, gate.budget)
        member = self.keys.of(chk.identity).member
        cutoff = now - gate.budget.window_us
        held = self.gates.setdefault(key, {})
        passed = held.get(member, cutoff) > cutoff
        if not passed:
            live = {m: seen for m, seen in held.items() if seen > cutoff}
            if charge:
                held = self.gates[key] = live
            passed = len(live) < gate.budget.limit
        seen = held.get(member)
        # A passing member's time is renewed once it is an eighth of the window old.
        if passed and charge and (seen is None or (now - seen) * 8 >= gate.budget.window_us):
            held[member] = now
        return passed
