"""[place]'s index over a tie of many replicas: the highest weight among the candidates
(``lorafleet._rendezvous``, whose properties are in properties/test_weights.py)."""

from __future__ import annotations

import random

import pytest
from rules.helpers import ties_go_by_weight

from lorafleet import (
    Command,
    IssueLoad,
    IssueUnload,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    UnloadFinished,
    UnloadOutcome,
)

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


@pytest.mark.parametrize("seed", range(6))
def test_the_index_answers_as_the_scan_while_ties_split_and_merge(seed: int) -> None:
    """A fleet of 40 replicas just listed (one tie, weighed in lanes) taking loads, evictions and
    releases in a random order: after every step the index's answer is the scan's (a load the caller
    reports, 0, sends placement down the scan), and ``check_invariants`` finds each large tie's lanes
    as its members ("_masks")."""
    rng = random.Random(seed)
    ids = [f"r{i}" for i in range(40)]
    s = Scenario.with_replicas(*((replica, 2) for replica in ids))
    running: list[int] = []
    out: list[Command] = []
    for step in range(150):
        if running and rng.random() < 0.4:
            out += s(Released(ticket=running.pop(rng.randrange(len(running)))))
        else:
            name = f"a{rng.randrange(60)}"
            placed = s.machine.place(name)
            if placed.replica is not None:
                ticket, commands = s.request(placed.replica, name)
                running.append(ticket)
                out += commands
        while out:  # the engine answers at once
            command = out.pop(0)
            if isinstance(command, IssueLoad):
                out += s(LoadFinished(load=command.load, outcome=LoadOutcome.LOADED))
            elif isinstance(command, IssueUnload):
                out += s(UnloadFinished(unload=command.unload, outcome=UnloadOutcome.UNLOADED))
        for name in (f"a{rng.randrange(60)}", f"new-{step}"):
            assert s.machine.place(name) == s.machine.place(name, load={"r0": 0}), (seed, step, name)
