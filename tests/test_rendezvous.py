"""[place]'s index over a tie of many replicas: read in the adapter's rendezvous order
(``lorafleet._rendezvous``, whose properties are in properties/test_weights.py) or weighed replica by
replica, the same answer."""

from __future__ import annotations

import pytest
from rules.helpers import ties_go_by_weight

from lorafleet import ReadListing, ReplicaAdded

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
    ties_go_by_weight(s, ids, [f"adapter-{i}" for i in range(40)] + ["é", "a" * 300])
