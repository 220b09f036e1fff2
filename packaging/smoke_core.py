"""Smoke test of ``pip install lorafleet``, the core alone: the machine grants an adapter, nothing but
attrs came with it, and the ``lorafleet`` command names the extra a subcommand needs.

Run by packaging/check.py in a fresh venv; it raises (and exits non-zero) when anything is off.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

from lorafleet import (
    AdapterStateMachine,
    Command,
    Grant,
    How,
    IssueLoad,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadListing,
    Released,
    ReplicaAdded,
    Requested,
)

T = TypeVar("T")


def only(kind: type[T], commands: list[Command]) -> list[T]:
    return [c for c in commands if isinstance(c, kind)]


def drive_the_machine() -> None:
    """Add a replica, answer its listing, request a cold adapter, answer the load, get the grant."""
    m = AdapterStateMachine()
    [listing] = only(ReadListing, m.handle(ReplicaAdded(replica="r0", model="tiny", limit=2)))
    m.handle(ListingReceived(listing=listing.listing, adapters=()))
    cold = m.next_ticket
    commands = m.handle(Requested(ticket=cold, replica="r0", adapter="sql", path="/adapters/sql"))
    [load] = only(IssueLoad, commands)
    assert (load.replica, load.adapter, load.path) == ("r0", "sql", "/adapters/sql"), load
    grants = only(Grant, m.handle(LoadFinished(load=load.load, outcome=LoadOutcome.LOADED)))
    assert grants == [Grant(ticket=cold, how=How.LOADED)], grants
    m.handle(Released(ticket=cold))
    warm = m.next_ticket
    assert m.hit(warm, replica="r0", adapter="sql"), "a held adapter is a hit"
    m.handle(Released(ticket=warm))
    held = m.statistics().replicas["r0"].held
    assert dict(held) == {"sql": 0}, held
    print(f"core: ticket {cold} granted after load {load.load}, ticket {warm} a hit; r0 holds {dict(held)}")


def nothing_but_attrs() -> None:
    """The core's one dependency is attrs: a core-only install brings nothing else."""
    names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in importlib.metadata.distributions()}
    assert names == {"lorafleet", "attrs"}, f"a core-only install holds {sorted(names)}"


def the_command_names_the_extra() -> None:
    """``lorafleet`` runs without its extras: the help, and one line for a subcommand that needs one."""
    command = str(Path(sys.executable).parent / "lorafleet")
    shown = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown
    assert "demo" in shown.stdout, shown.stdout
    assert "simulate" in shown.stdout, shown.stdout
    demo = subprocess.run([command, "demo"], capture_output=True, text=True, timeout=60)
    assert demo.returncode == 2, demo
    assert demo.stderr.startswith("lorafleet demo needs "), demo.stderr
    assert demo.stderr.count("\n") == 1, demo.stderr
    assert "pip install 'lorafleet[standin," in demo.stderr, demo.stderr
    print(f"core: `lorafleet demo` says: {demo.stderr.strip()}")


if __name__ == "__main__":
    drive_the_machine()
    nothing_but_attrs()
    the_command_names_the_extra()
