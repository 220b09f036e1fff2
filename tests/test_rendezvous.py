"""[place]'s index over a tie of many replicas: read in the adapter's rendezvous order
(``lorafleet._rendezvous``, whose properties are in properties/test_weights.py) or weighed replica by
replica, the same answer."""

from __future__ import annotations

import pytest

from lorafleet import Placed, Placement, ReadListing, ReplicaAdded
from lorafleet._rendezvous import weight

from scenario import Scenario


@pytest.mark.parametrize(("met", "unmet"), [(60, 0), (20, 10), (17, 300)], ids=["all", "most", "few-of-many"])
def test_placement_reads_the_order_or_weighs_the_tied_alike(met: int, unmet: int) -> None:
    """[place]'s index reads a large tie in the adapter's order (``Orders.first``) and weighs a small
    one replica by replica: either way the highest weight among the candidates."""
    ids = [f"r{i}" for i in range(met - 3)] + ["ré", "replica-a", "replica-b"]
    s = Scenario.with_replicas(*((replica, 2) for replica in ids))
    for i in range(unmet):
        (listing,) = s(ReplicaAdded(replica=f"unmet-{i}", model="base", limit=2))
        assert isinstance(listing, ReadListing)  # never answered: not in use, yet known
    for name in [f"adapter-{i}" for i in range(40)] + ["é", "a" * 300]:
        by_weight = sorted(ids, key=lambda replica: weight(name, replica), reverse=True)
        assert s.machine.place(name) == Placement(replica=by_weight[0], placed=Placed.FREE)
        skip = set(by_weight[:5])
        assert s.machine.place(name, exclude=skip) == Placement(replica=by_weight[5], placed=Placed.FREE)
