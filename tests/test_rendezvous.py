"""[place]'s index over a tie of many replicas: the highest weight among the candidates
(``lorafleet._rendezvous``, whose properties are in properties/test_weights.py)."""

from __future__ import annotations

import pytest
from rules.helpers import ties_go_by_weight

from lorafleet import ReadListing, ReplicaAdded

from scenario import Scenario


@pytest.mark.parametrize(("met", "unmet"), [(60, 0), (20, 10), (17, 300)], ids=["all", "most", "few-of-many"])
def test_placement_gives_a_tie_to_the_highest_weight_among_the_candidates(met: int, unmet: int) -> None:
    """[place]'s index weighs a tie's replicas from their ids' hashes, kept with the group: the answer
    is the scan's, however many replicas are known and not in use."""
    ids = [f"r{i}" for i in range(met - 3)] + ["ré", "replica-a", "replica-b"]
    s = Scenario.with_replicas(*((replica, 2) for replica in ids))
    for i in range(unmet):
        (listing,) = s(ReplicaAdded(replica=f"unmet-{i}", model="base", limit=2))
        assert isinstance(listing, ReadListing)  # never answered: not in use, yet known
    ties_go_by_weight(s, ids, [f"adapter-{i}" for i in range(40)] + ["é", "a" * 300])
