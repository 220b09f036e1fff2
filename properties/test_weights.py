"""The rendezvous weight ([place]) and ``Orders``, which reads an adapter's order from tables: the same
order as hashing every replica and sorting (tests/test_rendezvous.py: both of placement's paths)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lorafleet._rendezvous import Orders, fnv, weight

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles

OFFSET = 0xCBF29CE484222325
PRIME = 0x100000001B3
MASK = (1 << 64) - 1

names = st.text(min_size=1, max_size=24)


def test_the_weight_is_fnv_1a_64_of_adapter_zero_byte_replica() -> None:
    # The published FNV-1a 64-bit test values.
    assert fnv(OFFSET, b"") == 0xCBF29CE484222325
    assert fnv(OFFSET, b"a") == 0xAF63DC4C8601EC8C
    assert fnv(OFFSET, b"foobar") == 0x85944171F73967E8
    assert weight("sql", "r1") == fnv(OFFSET, b"sql\x00r1")
    assert weight("é", "ré") == fnv(OFFSET, "é\0ré".encode())


@given(state=st.integers(0, MASK), data=st.binary(max_size=40))
def test_fnv_from_any_state_is_a_multiple_plus_what_its_low_byte_adds(state: int, data: bytes) -> None:
    """What ``Orders`` stands on: fnv(s, r) = s * P**n + C_r(s & 255), C_r(l) = fnv(l, r) - l * P**n."""
    power = pow(PRIME, len(data), 1 << 64)
    low = state & 255
    assert fnv(state, data) == (state * power + fnv(low, data) - low * power) & MASK


@given(replicas=st.lists(names, unique=True, max_size=40), adapters=st.lists(names, min_size=1, max_size=3))
def test_orders_give_every_replica_highest_weight_first(replicas: list[str], adapters: list[str]) -> None:
    """Taking ``first`` among those left, again and again, reads out the whole order."""
    orders = Orders((replica, replica) for replica in replicas)
    for adapter in adapters:
        expected = sorted(replicas, key=lambda replica: weight(adapter, replica), reverse=True)
        for _ in range(2):  # again, from the tables built the first time
            left = set(replicas)
            order = []
            while (replica := orders.first(adapter, left, lambda _: True)) is not None:
                order.append(replica)
                left.remove(replica)
            assert order == expected


def test_orders_of_no_replicas_have_no_first() -> None:
    assert Orders[str]([]).first("a", {"a"}, lambda _: True) is None


@given(
    replicas=st.lists(names, unique=True, max_size=80),
    adapter=names,
    taken=st.sets(st.integers(0, 79)),
)
def test_first_is_the_first_of_the_order_that_is_taken(
    replicas: list[str], adapter: str, taken: set[int]
) -> None:
    orders = Orders((replica, i) for i, replica in enumerate(replicas))
    by_weight = sorted(range(len(replicas)), key=lambda i: weight(adapter, replicas[i]), reverse=True)
    expected = next((i for i in by_weight if i in taken and i % 3), None)
    assert orders.first(adapter, taken, lambda i: i % 3 != 0) == expected
