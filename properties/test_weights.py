"""The rendezvous weight ([place]): SPEC §3.12's test values, and what the index may take for granted of it
(tests/test_rendezvous.py: the index gives a tie to the highest weight)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lorafleet._rendezvous import Lanes, fnv, mix, name_hash, weight

import profiles  # noqa: F401 - registers and loads the Hypothesis profiles

MASK = (1 << 64) - 1

names = st.text(min_size=1, max_size=24)


def test_the_weight_is_splitmix64_of_the_names_fnv_1a() -> None:
    # The published FNV-1a 64-bit test values.
    assert fnv(b"") == 0xCBF29CE484222325
    assert fnv(b"a") == 0xAF63DC4C8601EC8C
    assert fnv(b"foobar") == 0x85944171F73967E8
    # SplitMix64 from the seed 0: its first two outputs.
    assert mix(0) == 0xE220A8397B1DCDAF
    assert mix(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    # SPEC §3.12's whole weights.
    assert weight("sql", "r1") == 0x0B45F20915F747D1 == mix(fnv(b"sql") ^ fnv(b"r1"))
    assert weight("é", "ré") == 0x2637C88DE7E17CC3 == mix(fnv("é".encode()) ^ fnv("ré".encode()))


def unmix(z: int) -> int:
    """``mix``'s inverse: each xorshift undone by shifting again, each product by the inverse factor."""

    def unshift(z: int, shift: int) -> int:
        return z ^ (z >> shift) ^ (z >> 2 * shift)  # shifts of 22 and more: a third is past 64 bits

    z = unshift(z, 31)
    z = unshift(z * pow(0x94D049BB133111EB, -1, 1 << 64) & MASK, 27)
    z = unshift(z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64) & MASK, 30)
    return (z - 0x9E3779B97F4A7C15) & MASK


@given(x=st.integers(0, MASK))
def test_mix_has_an_inverse_so_distinct_ids_weigh_distinct(x: int) -> None:
    """SPEC: no two replicas tie on the weight for one adapter while their ids' FNV-1a differ."""
    assert 0 <= mix(x) <= MASK
    assert unmix(mix(x)) == x


@given(adapter=names, replica=names)
def test_a_weight_is_the_mix_of_the_two_names_hashes(adapter: str, replica: str) -> None:
    assert weight(adapter, replica) == mix(name_hash(adapter) ^ name_hash(replica))
    assert name_hash(replica) == fnv(replica.encode())


def test_ties_among_ids_that_differ_in_their_last_bytes_spread() -> None:
    """What the mixing is for: among r0 ... r99, each is first for some of 2,000 adapters, and none for
    more than three times its share (bench/weights.py measures 1,000 replicas over 200,000 adapters)."""
    replicas = [f"r{i}" for i in range(100)]
    firsts = dict.fromkeys(replicas, 0)
    for i in range(2_000):
        firsts[max(replicas, key=lambda replica: weight(f"adapter-{i}", replica))] += 1
    assert min(firsts.values()) >= 1
    assert max(firsts.values()) <= 60


@given(
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=80),
    adapter=names,
    members=st.sets(st.integers(0, 30)),
    turned_away=st.sets(st.integers(0, 30)),
)
def test_lanes_weigh_as_weight_does_and_offer_the_heaviest_first(
    ops: list[tuple[bool, int]], adapter: str, members: set[int], turned_away: set[int]
) -> None:
    """``Lanes``, after any adds and discards (lanes freed and taken again): each lane's weight is
    ``weight``'s, and ``first`` offers a mask's members heaviest first, or gives up (None)."""
    lanes: Lanes[int] = Lanes()
    present: dict[int, str] = {}
    for add, item in ops:
        name = f"r{item}"
        if add:
            lanes.add(item, name)
            present[item] = name
        else:
            lanes.discard(item, name)
            present.pop(item, None)
    lanes.check(present)
    inside = [item for item in members if item in present]
    offered: list[int] = []

    def accept(item: int) -> bool:
        offered.append(item)
        return item not in turned_away

    chosen = lanes.first(lanes.weights(adapter), lanes.mask(inside), accept, 4)
    by_weight = sorted(inside, key=lambda item: weight(adapter, present[item]), reverse=True)
    assert offered == by_weight[: len(offered)]
    taken = [item for item in by_weight if item not in turned_away]
    if chosen is not None:
        assert chosen == taken[0]
    else:
        assert len(offered) == 4 or offered == by_weight  # gave up, or none was taken
