"""bench/protocol.py's turn orders: each contender comes right after each other one equally often."""
from __future__ import annotations

import collections
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def protocol():
    sys.path.insert(0, str(BENCH))
    try:
        import protocol
        yield protocol
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_each_contender_follows_each_other_equally_often(protocol, n):
    orders = protocol.turn_orders(n)
    assert len(orders) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    follows = collections.Counter((order[i], order[i + 1]) for order in orders for i in range(n - 1))
    assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert len(set(follows.values())) == 1
