"""Drive lorafleet's state machine by hand: a cold load, a join, an eviction and a listing.

Run it with ``.venv/bin/python examples/walkthrough.py`` once ``python3 dev.py test`` or ``demo`` has
made the venv. Every line printed is an event the shell would report and the commands the machine
answers with: no network, no clock, the same output every time.
"""

from __future__ import annotations

from lorafleet import (
    AdapterStateMachine,
    Event,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    Released,
    ReplicaAdded,
    Requested,
    TimeAdvanced,
    UnloadFinished,
    UnloadOutcome,
)


def main() -> None:
    machine = AdapterStateMachine()

    def step(note: str, event: Event) -> None:
        commands = machine.handle(event)
        print(f"\n# {note}\n> {event}")
        for command in commands:
            print(f"< {command}")
        if not commands:
            print("< (nothing to do)")

    step(
        "a replica that holds at most 2 adapters: read what it holds first",
        ReplicaAdded(replica="gpu-0", model="llama", limit=2),
    )
    step("it holds nothing yet", ListingReceived(listing=1, adapters=()))
    step(
        "a request for a cold adapter starts a load",
        Requested(ticket=1, replica="gpu-0", adapter="sql", path="/adapters/sql"),
    )
    step(
        "a second request for it joins that load",
        Requested(ticket=2, replica="gpu-0", adapter="sql", path="/adapters/sql"),
    )
    step("the engine answers: both wake", LoadFinished(load=2, outcome=LoadOutcome.LOADED))
    step(
        "a third request is a hit", Requested(ticket=3, replica="gpu-0", adapter="sql", path="/adapters/sql")
    )
    for ticket in (1, 2, 3):
        machine.handle(Released(ticket=ticket))
    print("\n# all three released")
    step("another adapter fits", Requested(ticket=4, replica="gpu-0", adapter="chat", path="/adapters/chat"))
    step("loaded", LoadFinished(load=3, outcome=LoadOutcome.LOADED))
    step("done with it", Released(ticket=4))
    step(
        "a third adapter: its load goes out at once, taking the room of sql, the idle adapter used "
        "least recently (the one vLLM drops for it), which takes no request from now on",
        Requested(ticket=5, replica="gpu-0", adapter="code", path="/adapters/code"),
    )
    step(
        "loaded: sql's name is unloaded (vLLM dropped its weights for code already)",
        LoadFinished(load=4, outcome=LoadOutcome.LOADED),
    )
    step("the unload finished", UnloadFinished(unload=5, outcome=UnloadOutcome.UNLOADED))
    step("30 s later the listing is due again", TimeAdvanced(now=30.0))
    step(
        "another router loaded 'math' meanwhile",
        ListingReceived(listing=6, adapters=("chat", "code", "math")),
    )
    stats = machine.statistics()
    print("\n# what the machine now believes")
    for replica, held in stats.replicas.items():
        print(f"{replica} (limit {held.limit}): {dict(held.held)}  (adapter: requests running on it)")
    print(f"grants: {dict(stats.grants)}")
    print(f"loads: {dict(stats.loads)}  evictions: {dict(stats.evictions)}")
    print(f"next listing due at t={machine.next_due()}")


if __name__ == "__main__":
    main()
