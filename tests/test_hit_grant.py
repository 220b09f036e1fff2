"""A hit's ``Grant`` from ``request()``, which the core makes without attrs' ``__init__`` (see
``lorafleet._machine._new``), is the value ``Grant(...)`` makes: it stays so only while ``Grant`` has
these two fields and no hook of its own."""

from __future__ import annotations

import attrs
import pytest

from lorafleet import AdapterStateMachine, Grant, How


def test_a_hits_grant_from_request_is_the_value_grant_makes() -> None:
    assert [field.name for field in attrs.fields(Grant)] == ["ticket", "how"]
    assert not hasattr(Grant, "__attrs_post_init__")
    assert not hasattr(Grant, "__attrs_pre_init__")
    m = AdapterStateMachine()
    (listing,) = m.add_replica("r", model="m", limit=2)
    m.listing_received(listing.listing, ["a"])  # type: ignore[union-attr]
    (grant,) = m.request(1, replica="r", adapter="a", path="/adapters/a")
    made = Grant(ticket=1, how=How.HIT)
    assert type(grant) is Grant
    assert grant == made
    assert (hash(grant), repr(grant), attrs.asdict(grant)) == (hash(made), repr(made), attrs.asdict(made))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        grant.ticket = 2  # type: ignore[misc]


def test_the_machine_keeps_its_own_state_in_slots() -> None:
    """Every attribute ``__init__`` sets is a slot (the hit path reads them): none lands in the dict,
    which stays for what a caller sets on an instance."""
    m = AdapterStateMachine()
    assert vars(m) == {}
    m.handle = m.handle  # type: ignore[method-assign]
    assert list(vars(m)) == ["handle"]
