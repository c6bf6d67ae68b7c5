"""The benchmarks' rounds take turns: no row always runs first or last."""

from __future__ import annotations

from benchmarks.kit import in_turn


def test_rows_take_turns_at_either_end_of_a_round() -> None:
    rows = ["ping", "ours", "peer"]
    orders = [list(in_turn(rows, turn)) for turn in range(5)]
    assert all(sorted(order) == sorted(rows) for order in orders)  # every row, every round
    assert {order[0] for order in orders} == {"ping", "peer"}  # the ends trade places
    assert {order[-1] for order in orders} == {"ping", "peer"}
    assert orders[0] == rows and orders[1] == rows[::-1] and orders[2] == rows
