"""The machine's own state lives in slots: the hit path reads them."""

from __future__ import annotations

from lorafleet import AdapterStateMachine


def test_the_machine_keeps_its_own_state_in_slots() -> None:
    """Every attribute ``__init__`` sets is a slot (the hit path reads them): none lands in the dict,
    which stays for what a caller sets on an instance."""
    m = AdapterStateMachine()
    assert vars(m) == {}
    m.handle = m.handle  # type: ignore[method-assign]
    assert list(vars(m)) == ["handle"]
