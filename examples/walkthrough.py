"""Drive lorafleet's state machine by hand: a cold load, a join, an eviction and a listing.

Run it with ``python3 dev.py demo``. Every line printed is an event the shell would report and the
commands the machine answers with: no network, no clock, the same output every time.
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
        "a replica that holds at most 2 adapters: read what it holds first", ReplicaAdded("gpu-0", "llama", 2)
    )
    step("it holds nothing yet", ListingReceived(1, ()))
    step("a request for a cold adapter starts a load", Requested(1, "gpu-0", "sql", "/adapters/sql"))
    step("a second request for it joins that load", Requested(2, "gpu-0", "sql", "/adapters/sql"))
    step("the engine answers: both wake", LoadFinished(2, LoadOutcome.LOADED))
    step("a third request is a hit", Requested(3, "gpu-0", "sql", "/adapters/sql"))
    for ticket in (1, 2, 3):
        machine.handle(Released(ticket))
    print("\n# all three released")
    step("another adapter fits", Requested(4, "gpu-0", "chat", "/adapters/chat"))
    step("loaded", LoadFinished(3, LoadOutcome.LOADED))
    step("done with it", Released(4))
    step(
        "a third adapter: sql is least recently used, so it goes",
        Requested(5, "gpu-0", "code", "/adapters/code"),
    )
    step("the unload finished; now the load goes out", UnloadFinished(4, UnloadOutcome.UNLOADED))
    step("loaded", LoadFinished(5, LoadOutcome.LOADED))
    step("30 s later the listing is due again", TimeAdvanced(30.0))
    step("another router loaded 'math' meanwhile", ListingReceived(6, ("chat", "code", "math")))
    stats = machine.statistics()
    print("\n# what the machine now believes")
    for replica, held in stats.replicas.items():
        print(f"{replica} (limit {held.limit}): {dict(held.held)}  (adapter: requests running on it)")
    print(f"grants: {dict(stats.grants)}")
    print(f"loads: {dict(stats.loads)}  evictions: {dict(stats.evictions)}")
    print(f"next listing due at t={machine.next_due()}")


if __name__ == "__main__":
    main()
