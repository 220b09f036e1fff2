"""Write the conformance vectors: vectors/hand/ from the rule scenarios, vectors/hypothesis/ by search.

    .venv/bin/python vectors/generate.py            # rewrite both folders (about a minute)

hand/: every scenario of tests/rules/ (filed by rule, named for it; test_spec_points.py answers the
points SPEC once left open) but the edges of NOT_VECTORS, and
every case of the usage-error table, run on a recording machine: each is a story someone wrote to show
one rule.

hypothesis/: Hypothesis generates programs (request, answer this call this way, another router loads,
time passes, other routers' requests run on an engine, a read of it fails, a request placed by the
machine, another router decides for this one..., and at last a setting away from its default),
derandomised and without a database, so the same Hypothesis gives the same programs. Each step of a
program's run gets a tag (what event, what outcome, which commands it gave). For each tag, and each
pair of tags seen together, the first program that shows them is shrunk (actions removed, numbers
lowered) while it still does, and its run is written out. A change in a rule then shows as a diff
of exactly the runs it changes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import re
import shutil
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from lorafleet import (
    AdapterStateMachine,
    Assign,
    Command,
    Event,
    Fail,
    Grant,
    IssueUnload,
    ListingReceived,
    LoadFinished,
    Placed,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    Statistics,
    UnloadFinished,
    UsageError,
)
from lorafleet.vectors import replay

from recorder import Recorder

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "properties"))  # the simulated world, which the properties share

from world import Way, World  # noqa: E402

# Rule identifiers (SPEC.md) of each hand-written scenario, by the start of its test's name.
RULES_BY_NAME = [
    ("hit", ["hit", "release"]),
    ("join", ["join", "load-outcome"]),
    ("wait_unload", ["wait-unload", "evict", "unload-outcome"]),
    ("cold", ["cold"]),
    ("evict", ["evict", "cold"]),
    ("load_outcome", ["load-outcome"]),
    ("load", ["load", "place"]),
    ("settle", ["settle", "evict"]),
    ("unload_outcome", ["unload-outcome", "evict"]),
    ("release", ["release"]),
    ("cancel", ["cancel"]),
    ("listing", ["listing"]),
    ("time", ["time", "reading"]),
    ("forget", ["forget"]),
    ("replicas", ["replicas"]),
    ("view", ["view"]),
    ("place_base", ["place-base", "load"]),
    ("place", ["place"]),
    ("health", ["health", "place"]),
    ("blame", ["blame", "health"]),
    ("cap", ["cap", "cold"]),
    ("refuse", ["refuse", "load-outcome"]),
    ("forgive", ["forgive", "refuse"]),
    ("renew", ["renew", "wait-unload"]),
    ("dismiss", ["dismiss"]),
    ("demand", ["demand"]),
    ("refusal", ["refuse"]),
    ("pin", ["pin", "cold"]),
    ("warm", ["warm", "pin"]),
    ("statistics", ["statistics"]),
    ("reading", ["reading", "read"]),
    ("read_failed", ["read-failed", "reading", "read"]),
    ("read", ["read"]),
    ("route", ["route", "place"]),
    ("share", ["share", "cold", "evict"]),
    ("standby", ["standby", "time"]),
    ("the_same_events", ["order"]),
    ("fault_1", ["seed-1", "listing"]),
    ("fault_2", ["seed-2", "evict", "listing"]),
    ("fault_3", ["seed-3", "listing", "join"]),
    ("fault_4", ["seed-4", "evict", "listing"]),
    ("fault_5", ["seed-5", "replicas"]),
    ("fault_6", ["seed-6", "forget"]),
    ("fault_7", ["seed-7", "cancel"]),
]
# place_hit() is place() then hit() in one call, a shortcut of the reference, not a step of its own;
# so is the holder search it keeps for the Routed that follows (recorded, those two tests would be
# plain routed requests).
# The edges of the rules (tests/test_rules_edges.py before the tests were filed by rule) were never
# recorded, and stay out: filing the tests by rule leaves the vectors as they were.
NOT_VECTORS = {
    "test_place_hit_grants_a_hit_where_place_would_and_changes_nothing_otherwise",
    "test_place_routed_after_place_hit_searches_for_holders_once",
    "test_place_routed_searches_again_where_something_moved_after_place_hit",
    "test_listing_drops_an_adapter_held_before_it_started_that_went_idle_while_it_was_out",
    "test_listing_keeps_an_adapter_that_became_held_after_it_started_even_once_idle",
    "test_listing_does_not_bring_back_an_adapter_whose_unload_ended_while_it_was_out",
    "test_listing_does_not_bring_back_an_adapter_the_engine_said_it_lacks_while_it_was_out",
    "test_listing_additions_go_first_in_name_order_whatever_order_the_engine_lists_them",
    "test_replicas_removed_fail_their_waiters_in_ticket_order_whatever_each_waits_on",
    "test_a_removed_replicas_late_answers_are_counted_and_do_nothing_else",
    "test_a_removed_replica_is_kept_until_its_last_call_is_answered",
    "test_a_listing_asked_before_a_removal_is_ignored_after_the_replica_is_added_back",
    "test_hit_moves_the_ticket_the_lru_order_and_the_counts_as_a_requested_hit_does",
    "test_hit_is_only_for_a_held_adapter_not_one_being_loaded",
    "test_hit_after_a_cancel_counts_once_and_its_release_is_its_own",
    "test_a_worker_failure_is_the_adapters_fault_only_when_its_words_say_the_adapter_is_wrong",
    "test_an_unload_answered_not_found_by_any_vllm_is_a_success",
    "test_a_load_that_got_no_answer_is_the_replicas_fault",
}
EXTRA_RULES = {
    "limit": "limit",
    "time": "time",
    "advance": "time",
    "listing_is_read": "time",
    "refusal_is_forgotten": "forgive",
}


def hand_vectors() -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "tests"))
    import test_usage_errors

    import scenario

    made: list[Recorder] = []

    def recorder(**config: Any) -> AdapterStateMachine:
        made.append(Recorder(**config))
        return made[-1]

    scenario.MACHINE = recorder
    vectors = []
    files = sorted((ROOT / "tests" / "rules").glob("test_*.py"))
    for module in (importlib.import_module(f"rules.{path.stem}") for path in files):
        for name, test in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("test_") or test.__module__ != module.__name__ or name in NOT_VECTORS:
                continue
            made.clear()
            test()
            short = name.removeprefix("test_")
            rules = next(r for prefix, r in RULES_BY_NAME if short.startswith(prefix))
            rules = rules + [rule for word, rule in EXTRA_RULES.items() if word in short]
            rules = rules + getattr(module, "RULES", {}).get(name, [])
            doc = inspect.getdoc(test) or short.replace("_", " ")
            vectors.append(made[0].vector(short.replace("_", "-"), doc, rules))
    for index, (error, words, call) in enumerate(test_usage_errors.CASES):
        made.clear()
        s = test_usage_errors.scenario()
        with contextlib.suppress(error):
            call(s.machine)
        try:
            json.dumps(made[0].steps, allow_nan=False)
        except ValueError:
            continue  # NaN has no JSON form: a case for the Python tests only
        vector = made[0].vector(
            f"usage-{index:02d}-{re.sub(r'(?<!^)(?=[A-Z])', '-', error.__name__).lower()}",
            f"A call that breaks the contract ({words}) raises {error.__name__} and changes nothing.",
            ["usage"],
        )
        if replay(json.loads(json.dumps(vector))):
            continue  # a mistake only Python's types can make (a str for an enum): not in the contract
        vectors.append(vector)
    return vectors


# -- the search ---------------------------------------------------------------------------------

REPLICAS = ("r0", "r1")
ADAPTERS = ("a0", "a1", "a2", "bad")
KINDS = (
    "request",
    "request",
    "release",
    "cancel",
    "answer",
    "answer",
    "other",
    "restart",
    "tick",
    "forget",
    "remove",
    "add",
    "limit",
)
# Kinds added later: surveyed in programs of their own, after those of KINDS (see _survey), on a
# machine that reads its engines ([read]); "busy" ([load]) last of all.
LATER_KINDS = ("report", "unread", "route", "busy")
STAND = "stand"
"""Another router decides for this one, or no more ([standby]): surveyed last, so that the programs
drawn before it came stay as they were."""
Program = list[tuple[str, int, int]]
WARM: Program = [
    step
    for a, b in ((0, 0), (0, 1), (1, 2))
    for step in (("request", a, b), ("answer", 0, 0), ("release", 0, 0))
]
"""r0 holds a0 and a1, r1 holds a2, all idle: where a reading can spare a victim, a story too long
for random programs to tell often (none in 10,000 without it)."""
MARKERS = ("cap", "read")
"""A program's opening steps that set its machine: a cap of 0 over each limit ([cap]), reads ([read])."""
SETTINGS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("half_life", (1, 2, 3)),
    ("backoff", (60.0, 1.0, 20.0)),
    ("max_backoff", (10.0, 45.0, 1.0)),
    ("refusal", (30.0, 60.0, 1.0)),
    ("overflow", (0, 1, 3)),
    ("concurrency", (1, 2, 3)),
    ("headroom", (1, 2, 0)),
    ("routers", (2, 3, 4)),
    ("listing_interval", (60.0, 45.0, 90.0)),
)
"""What an opening ``("set", a, b)`` step sets: setting ``a``, to its value ``b`` (never the default).
A program that sets one runs beside a shadow machine with that setting at its default; the first step
where the two differ is tagged, so that a port that ignores the setting fails that vector."""


def programs(kinds: tuple[str, ...]) -> st.SearchStrategy[Program]:
    return st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, 3), st.integers(0, 3)), max_size=24)


class Run:
    """One program played against a recording machine, a simulated engine per replica and a shell."""

    def __init__(self, program: Program) -> None:
        markers = {kind for kind, _, _ in program[:2] if kind in MARKERS}
        self.capped = "cap" in markers
        self.reading = "read" in markers
        config: dict[str, Any] = {"headroom": 0} if self.capped else {}
        if self.reading:
            config["read_engine"] = True
        drawn: dict[str, Any] = {}
        for kind, a, b in program:
            if kind == "set":
                name, values = SETTINGS[a % len(SETTINGS)]
                drawn[name] = values[b % len(values)]
        config.update(drawn)
        self.machine = Recorder(**config)
        # A shadow per drawn setting, made with that setting at its default (what a port that ignored
        # it would be): fed the same events until its commands differ ([place], [health], [share]...).
        self.shadows = {
            name: AdapterStateMachine(**{k: v for k, v in config.items() if k != name}) for name in drawn
        }
        self.shown: set[str] = set()
        self.world = World(dict.fromkeys(REPLICAS, "m"))
        self.waiting: list[int] = []
        self.granted: list[tuple[int, str, str]] = []
        self.requests: dict[int, tuple[str, str]] = {}
        self.active = set(REPLICAS)
        self.ticket = 0
        self.now = 0.0
        self.tags: list[str] = []
        for replica, limit in zip(REPLICAS, (2, 1), strict=True):
            self.send(partial(self.machine.add_replica, replica, model="m", limit=limit), "setup")
        for op in self.world.pending():
            self.send(partial(self.machine.handle, self.world.answer(op).event), "setup")
        for kind, a, b in program:
            if kind not in MARKERS and kind != "set":
                self.act(kind, a, b)

    def send(self, call: Callable[[], list[Command]], tag: str) -> None:
        before = AdapterStateMachine.statistics(self.machine)
        named = self.named()
        handled = len(self.machine.handled)
        commands = call()
        after = AdapterStateMachine.statistics(self.machine)
        if self.shadows:
            step = f"{tag}->{'+'.join(sorted({type(c).__name__ for c in commands})) or 'nothing'}"
            self.shadow(self.machine.handled[handled:], commands, after, step)
        kinds = sorted({type(c).__name__ for c in commands})
        if tag != "setup":
            self.tags.append(f"{tag}->{'+'.join(kinds) or 'nothing'}")
            assigned = {c.ticket: c.replica for c in commands if isinstance(c, Assign)}
            failed_on = {
                assigned.get(c.ticket, self.requests[c.ticket][0]) for c in commands if isinstance(c, Fail)
            }
            if tag == "replicas removed" and len(failed_on) > 1:
                self.tags.append("replicas removed with waiters on several")
            for rid, rep in after.replicas.items():
                old = before.replicas.get(rid)
                if old is not None and tag.startswith("listing"):
                    if rep.held.keys() - old.held.keys():
                        self.tags.append("listing adds adapters")
                    if old.held.keys() - rep.held.keys():
                        self.tags.append("listing drops adapters")
                if len(rep.held) + len(rep.loading) > rep.limit:
                    self.tags.append("over the limit")
            self.tag_readings(tag, commands, named, before)
            self.tag_settling(tag, commands, before)
        for command in commands:
            if isinstance(command, Assign):
                self.requests[command.ticket] = (command.replica, self.requests[command.ticket][1])
            elif isinstance(command, Grant):
                self.waiting.remove(command.ticket)
                request = self.requests[command.ticket]
                self.granted.append((command.ticket, *request))
            elif isinstance(command, Fail):
                self.waiting.remove(command.ticket)
        self.world.took(commands)

    def shadow(self, events: list[Event], commands: list[Command], after: Statistics, tag: str) -> None:
        """Feed ``events`` to each shadow; tag the first step where a setting decides the commands
        ("X decides: step"), and the first where it shows only in ``statistics`` or ``next_due``
        ("X shows: step"), and record those queries then, so that the vector shows the difference."""
        due = AdapterStateMachine.next_due(self.machine)
        differs = False
        for name, shadow in list(self.shadows.items()):
            try:
                theirs: list[Command] | None = [c for event in events for c in shadow.handle(event)]
            except UsageError:
                theirs = None  # it went another way before, where no command showed it
            if theirs != commands:
                self.tags.append(f"{name} decides: {tag}")
                del self.shadows[name]
                differs = True
            elif name not in self.shown and (shadow.statistics(), shadow.next_due()) != (after, due):
                self.tags.append(f"{name} shows: {tag}")
                self.shown.add(name)
                differs = True
        if differs:
            self.machine.statistics()
            self.machine.next_due()

    def named(self) -> dict[str, frozenset[str]]:
        """What each replica's reading stands at ([reading]), asked past the recorder: a tag, not a step."""
        return {rid: AdapterStateMachine.named(self.machine, rid) for rid in REPLICAS}

    def tag_readings(
        self, tag: str, commands: list[Command], named: dict[str, frozenset[str]], before: Statistics
    ) -> None:
        """Tags for what a reading changed: the steps where [reading] and [read-failed] decide."""
        now = self.named()
        for rid, names in named.items():
            if not names or rid not in before.replicas:
                continue
            idle = {name for name, using in before.replicas[rid].held.items() if using == 0}
            if tag == "reading failed" and names and not now.get(rid):
                self.tags.append("reading failed ends a reading")
            if tag == "reading received" and idle & (names - now.get(rid, frozenset())):
                self.tags.append("reading received frees an adapter")
            if any(isinstance(c, IssueUnload) and c.replica == rid for c in commands) and idle & names:
                self.tags.append("evicts beside an adapter a reading names")

    def tag_settling(self, tag: str, commands: list[Command], before: Statistics) -> None:
        """Tags for the steps where [settle] and [load] decide."""
        unloads = any(isinstance(c, IssueUnload) for c in commands)
        if tag == "load loaded" and unloads:
            self.tags.append("a landed load unloads the excess")
        if tag == "load loaded" and any(isinstance(c, ReadEngine) for c in commands):
            self.tags.append("a landed load waits for a reading to settle")
        if tag.startswith("reading") and unloads:
            self.tags.append("a reading settles a landed load")
        for command in commands:
            if isinstance(command, Assign) and command.placed not in (Placed.HELD, Placed.LOADING):
                adapter = self.requests[command.ticket][1]
                if any(adapter in rep.held for rep in before.replicas.values()):
                    self.tags.append("route spills past a holder")
        kinds = {type(c) for c in commands}
        if tag == "route" and {ReadEngine, Assign} <= kinds:
            self.tags.append("route reads the replica it assigned")

    def act(self, kind: str, a: int, b: int) -> None:
        m = self.machine
        if kind == "request" and self.active:
            replica = sorted(self.active)[a % len(self.active)]
            adapter = ADAPTERS[b % len(ADAPTERS)]
            self.ticket += 1
            ticket = self.ticket
            self.waiting.append(ticket)
            self.requests[ticket] = (replica, adapter)
            self.send(
                lambda: m.request(ticket, replica=replica, adapter=adapter, path=f"/adapters/{adapter}"),
                "request",
            )
        elif kind == "release" and self.granted:
            ticket, *_ = self.granted.pop(a % len(self.granted))
            self.send(lambda: m.release(ticket), "release")
        elif kind == "cancel" and (self.waiting or self.granted):
            pool = self.waiting + [t for t, *_ in self.granted]
            ticket = pool[a % len(pool)]
            if ticket in self.waiting:
                self.waiting.remove(ticket)
            self.granted = [g for g in self.granted if g[0] != ticket]
            self.send(lambda: m.cancel(ticket), "cancel")
        elif kind == "answer" and self.world.calls:
            pending = self.world.pending()
            self.answer(pending[a % len(pending)], b)
        elif kind == "other":
            replica, adapter = REPLICAS[a % 2], ADAPTERS[b % 3]
            self.world.other_router(replica, adapter, load=not self.world.has(replica, adapter))
        elif kind == "restart":
            self.world.restart(REPLICAS[a % 2])
        elif kind == "tick":
            self.now += 30.0
            self.send(lambda: m.advance(self.now), "time advanced")
        elif kind == "forget" and self.granted:
            ticket, replica, adapter = self.granted.pop(a % len(self.granted))
            self.send(lambda: m.release(ticket), "release")
            self.send(lambda: m.adapter_missing(replica=replica, adapter=adapter), "adapter missing")
        elif kind == "remove" and self.active:
            # An odd b removes every replica in use at once: their waiters fail together, in ticket order.
            ids = sorted(self.active) if b % 2 else [sorted(self.active)[a % len(self.active)]]
            self.active -= set(ids)
            self.granted = [g for g in self.granted if g[1] not in ids]
            self.send(lambda: m.remove_replicas(ids), "replicas removed")
        elif kind == "add" and len(self.active) < len(REPLICAS):
            replica = sorted(set(REPLICAS) - self.active)[0]
            self.active.add(replica)
            self.send(lambda: m.add_replica(replica, model="m", limit=2), "replica added")
        elif kind == "limit":
            self.send(lambda: m.set_limit("m", 1 + b % 3), "limit set")
        elif kind == STAND:
            on = b % 2 == 0
            self.send(lambda: m.stand_by(on), "standing by" if on else "deciding again")
        elif kind == "report":
            # Other routers' requests run on a0 and a1 by b's bits: the engine's gauge names them.
            replica, names = REPLICAS[a % 2], [name for i, name in enumerate(ADAPTERS[:2]) if b >> i & 1]
            self.world.others_run(replica, names)
        elif kind == "busy":
            # The engine runs b requests besides those the gauge names, and queues 2 when a ≥ 2.
            self.world.busy(REPLICAS[a % 2], b, 2 * (a // 2))
        elif kind == "unread" and (reads := self.world.pending(ReadEngine)):
            self.answer(reads[a % len(reads)], 3)
        elif kind == "route":
            adapter = ADAPTERS[b % len(ADAPTERS)]
            exclude = [REPLICAS[a % 2]] if a >= 2 else []
            self.ticket += 1
            ticket = self.ticket
            self.waiting.append(ticket)
            self.requests[ticket] = ("", adapter)
            self.send(
                lambda: m.route(ticket, adapter=adapter, path=f"/adapters/{adapter}", exclude=exclude),
                "route",
            )

    def answer(self, op: int, how: int) -> None:
        """The engine answers call ``op``: as asked, or (``how`` 3) with a fault before it acted."""
        reply = self.world.answer(op, Way.FAULT_BEFORE if how == 3 else Way.AS_ASKED)
        event = reply.event
        if isinstance(event, LoadFinished):
            tag = f"load {event.outcome.value}"
        elif isinstance(event, UnloadFinished):
            tag = f"unload {event.outcome.value}"
        elif isinstance(event, ReadingReceived | ReadingFailed):
            tag = "reading received" if isinstance(event, ReadingReceived) else "reading failed"
        else:
            tag = "listing received" if isinstance(event, ListingReceived) else "listing failed"
        self.send(partial(self.machine.handle, event), tag)


RULE_OF_TAG = [
    ("request->Grant", "hit"),
    ("request->nothing", "join"),
    ("request->IssueLoad", "cold"),
    ("request->IssueUnload", "evict"),
    ("load", "load-outcome"),
    ("unload", "unload-outcome"),
    ("release", "release"),
    ("cancel", "cancel"),
    ("listing", "listing"),
    ("time advanced", "time"),
    ("adapter missing", "forget"),
    ("replica", "replicas"),
    ("limit", "limit"),
    ("over the limit", "evict"),
    ("request->ReadEngine", "read"),
    ("listing received->MarkMet+ReadEngine", "read"),
    ("reading", "read"),
    ("reading received", "reading"),
    ("reading failed", "read-failed"),
    ("route", "route"),
    ("evicts beside an adapter a reading names", "reading"),
    ("a landed load", "settle"),
    ("a reading settles", "settle"),
    ("route spills", "load"),
    ("route reads the replica", "read"),
    ("standing by", "standby"),
    ("deciding again", "standby"),
]


RULES_OF_SETTING = {
    "half_life": ["evict"],
    "backoff": ["health"],
    "max_backoff": ["health"],
    "refusal": ["refuse"],
    "overflow": ["place"],
    "concurrency": ["load", "place"],
    "headroom": ["cap", "evict"],
    "routers": ["share"],
    "listing_interval": ["time"],
}


def _setting_tag(tag: str) -> str | None:
    """The setting a "X decides: ..." or "X shows: ..." tag is about, else None."""
    name, _, rest = tag.partition(" ")
    return name if name in RULES_OF_SETTING and rest.startswith(("decides:", "shows:")) else None


def rules_of(tags: list[str]) -> list[str]:
    return sorted({rule for tag in tags for prefix, rule in RULE_OF_TAG if tag.startswith(prefix)})


def shows(tags: tuple[str, ...], program: Program) -> bool:
    found = Run(program).tags
    return all(tag in found for tag in tags)


def shrink(program: Program, tags: tuple[str, ...]) -> Program:
    """The program made as small as it goes while it still shows ``tags``: fewer actions, smaller numbers."""
    changed = True
    while changed:
        changed = False
        i = 0
        while i < len(program):
            candidate = program[:i] + program[i + 1 :]
            if shows(tags, candidate):
                program, changed = candidate, True
            else:
                i += 1
        for i in range(len(program)):
            # Each candidate is built from the current values and is strictly smaller, so this ends.
            kind, a, b = program[i]
            if a and shows(tags, candidate := [*program[:i], (kind, 0, b), *program[i + 1 :]]):
                program, changed, a = candidate, True, 0
            if b and shows(tags, candidate := [*program[:i], (kind, a, 0), *program[i + 1 :]]):
                program, changed = candidate, True
    return program


def search_vectors() -> list[dict[str, Any]]:
    surveyed = [(p, set(Run(p).tags)) for p in _survey()]
    # A program that sets a setting is kept for where the setting decides; the other tags and their
    # pairs come from the programs of the default settings, as they did before settings were drawn.
    plain = [(p, tags) for p, tags in surveyed if not any(kind == "set" for kind, _, _ in p)]
    every = sorted(set().union(*(tags for _, tags in plain)))
    settings_tags = sorted({t for _, tags in surveyed for t in tags if _setting_tag(t)})
    wanted: list[tuple[str, ...]] = [(t,) for t in every]
    wanted += [
        (t, u) for i, t in enumerate(every) for u in every[i + 1 :] if any({t, u} <= s for _, s in plain)
    ]
    wanted += [(t,) for t in settings_tags]
    print(f"{len(every)} kinds of step; {len(wanted)} single kinds and pairs to show", file=sys.stderr)
    vectors: dict[str, dict[str, Any]] = {}
    seen_runs: set[str] = set()
    for done, want in enumerate(wanted, 1):
        if done % 50 == 0:
            print(f"  {done}/{len(wanted)}", file=sys.stderr)
        first = next(p for p, tags in surveyed if set(want) <= tags)
        run = Run(shrink(first, want))
        key = json.dumps([run.machine.config, run.machine.steps])
        if key in seen_runs:
            continue
        seen_runs.add(key)
        run.machine.statistics()  # end every vector with what the machine then holds
        name = "hyp-" + "--".join(re.sub(r"[^a-z0-9]+", "-", t.lower()).strip("-") for t in want)
        description = "The smallest run found in which: " + "; ".join(want) + "."
        rules = rules_of(list(want)) + (["cap"] if run.capped else []) + (["read"] if run.reading else [])
        rules += [rule for t in want if (s := _setting_tag(t)) for rule in RULES_OF_SETTING[s]]
        vectors[name] = run.machine.vector(name, description, rules)
    return list(vectors.values())


def _survey() -> list[Program]:
    """Programs to learn which tags exist: Hypothesis's own first examples, deterministically.

    First of KINDS alone, then of every kind, then of every kind after WARM, then the same on a
    machine with a cap (``headroom=0``), where a release can admit a queue; then all of that again on
    a machine that reads its engines ([read]), with routed requests too, and once more with engines
    whose queues the readings show ([load], "busy"). A tag, or a pair of tags, is
    shown by the first program that has it, so kinds and machines added later leave every vector the
    earlier ones gave as it was, and fewer kinds to draw from keep the earlier ones' pairs as dense
    as before. (On a machine that reads nothing, "report" changes only the engine, and "unread" finds
    no read to fail: the surveys of the machine before [read] asked its reads, they draw as before.)
    After the settings' programs, programs on a machine that reads its engines where another router
    decides for it now and then ([standby]).
    """
    found: list[Program] = []

    def keep(p: Program) -> bool:
        found.append(p)
        return False

    every = programs(KINDS + LATER_KINDS[:2])
    reading = programs(KINDS + LATER_KINDS[:3]).map(lambda program: [("read", 0, 0), *program])
    busy = programs(KINDS + LATER_KINDS).map(lambda program: [("read", 0, 0), *program])
    strategies = [programs(KINDS)]
    for drawn in (every, reading, busy):
        strategies += [
            drawn,
            drawn.map(lambda program: [*_markers(program), *WARM, *_steps(program)]),
            drawn.map(lambda program: [("cap", 0, 0), *_markers(program), *WARM, *_steps(program)]),
        ]
    for strategy in strategies:
        with contextlib.suppress(NoSuchExample):
            find(
                strategy,
                keep,
                settings=settings(database=None, derandomize=True, max_examples=3000, deadline=None),
            )
    # Last, each setting drawn ("set", SETTINGS), with routed requests, on machines that read their
    # engines or not: where it decides. These programs give only the settings' tags (search_vectors).
    routed = programs((*KINDS, "route"))
    for index in range(len(SETTINGS)):
        chosen = st.tuples(st.just("set"), st.just(index), st.integers(0, 2))
        for drawn in (routed, busy):
            for warm in ([], WARM):
                strategy = st.tuples(chosen, drawn).map(partial(_set, warm=warm))
                with contextlib.suppress(NoSuchExample):
                    find(
                        strategy,
                        keep,
                        settings=settings(database=None, derandomize=True, max_examples=500, deadline=None),
                    )
    standing = programs((*KINDS, *LATER_KINDS, STAND)).map(lambda program: [("read", 0, 0), *program])
    with contextlib.suppress(NoSuchExample):
        find(
            standing,
            keep,
            settings=settings(database=None, derandomize=True, max_examples=3000, deadline=None),
        )
    return found


def _set(drawn: tuple[tuple[str, int, int], Program], warm: Program) -> Program:
    """A program that sets a setting: its markers, the "set" step, ``warm``, then its steps."""
    step, program = drawn
    return [*_markers(program), step, *warm, *_steps(program)]


def _markers(program: Program) -> Program:
    return [step for step in program[:1] if step[0] in MARKERS]


def _steps(program: Program) -> Program:
    return program[len(_markers(program)) :]


# -- writing ------------------------------------------------------------------------------------


STEP_ORDER = (
    "event",
    "hit",
    "commands",
    "error",
    "query",
    "replicas",
    "replica",
    "failed",
    "adapter",
    "model",
    "exclude",
    "load",
    "turn",
    "healthy",
    "result",
)


def _ordered(value: Any) -> Any:
    """``type`` first, the rest by name: events and commands read as they are written in SPEC.md."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (k != "type", k))
        return {k: _ordered(value[k]) for k in keys}
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def dump(vector: dict[str, Any]) -> str:
    """One step per line, so that a diff of a vector shows the steps that changed."""
    head = {k: v for k, v in vector.items() if k != "steps"}
    steps = [{k: _ordered(step[k]) for k in STEP_ORDER if k in step} for step in vector["steps"]]
    lines = [json.dumps(step, allow_nan=False) for step in steps]
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    return body + ',\n "steps": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def write(folder: Path, vectors: list[dict[str, Any]]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for vector in vectors:
        (folder / f"{vector['name']}.json").write_text(dump(vector))
    print(f"{folder.relative_to(ROOT)}: {len(vectors)} vectors", file=sys.stderr)


def main() -> int:
    write(HERE / "hand", hand_vectors())
    if "--hand-only" not in sys.argv:
        write(HERE / "hypothesis", search_vectors())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
