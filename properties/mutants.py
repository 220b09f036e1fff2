"""Plant small semantic bugs in a copy of the core, one at a time, and say which the tests catch.

    .venv/bin/python properties/mutants.py                      # the ci property run, every mutant
    .venv/bin/python properties/mutants.py --tests tests/rules
    .venv/bin/python properties/mutants.py --only evict-most-recent --show
    .venv/bin/python properties/mutants.py --only old-removal-drops-running --seeds 20

Each mutant replaces one snippet of ``core/lorafleet`` (it must occur exactly once) in a copy made in a
temporary folder, which goes first on PYTHONPATH; nothing in the source tree changes, and no mutant is
part of the package. The properties run under the ``ci-find`` profile: the ci profile's examples,
without shrinking (finding is what counts here, not the shortest story).

With ``--seeds N`` each mutant runs N times, under the ``ci-seeded`` profile (the same, but seeded
with ``--hypothesis-seed`` 0 to N-1), to say how often a run of the ci profile would find it.

A mutant the tests do not catch either shows a gap in them or changes nothing anyone can see (an
equivalent mutant); read the survivors with ``--show`` before trusting the score.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "core" / "lorafleet"


@attrs.frozen
class Mutant:
    name: str
    rule: str
    """The SPEC.md rule (or ``wire``) it breaks."""
    what: str
    file: str
    old: str
    new: str


MACHINE = "_machine.py"
WORDING = "vllm/_wording.py"
ANSWERS = "vllm/_answers.py"

MUTANTS = [
    # -- [warm]
    Mutant(
        "warm-never-lifts",
        "warm",
        "a pin until held is kept once a copy lands",
        MACHINE,
        "        if pin is None or not pin.until_held or pin.model not in (None, rep.model):\n"
        "            return []",
        "        if True:\n            return []",
    ),
    Mutant(
        "warm-over-held",
        "warm",
        "a pin until held is made where a copy is held already",
        MACHINE,
        "if event.until_held and (adapter in self._pins or self._holds(adapter, event.model)):",
        "if event.until_held and adapter in self._pins:",
    ),
    # -- [hit], the fast path
    Mutant(
        "hit-keeps-ticket",
        "hit",
        "a hit does not advance the highest ticket seen",
        MACHINE,
        "        self._last_ticket = ticket\n        self._count(rep, held.adapter)\n",
        "        self._count(rep, held.adapter)\n",
    ),
    Mutant(
        "hit-uncounted",
        "hit",
        "a hit is not counted in the statistics",
        MACHINE,
        "        held.in_use += 1\n        self._leases[ticket] = held\n        self._counts.hits += 1",
        "        held.in_use += 1\n        self._leases[ticket] = held",
    ),
    Mutant(
        "hit-stays-idle",
        "hit",
        "a hit refreshes the adapter's place in the idle list instead of taking it off",
        MACHINE,
        "            rep.idle.pop(held.adapter, None)  # not there if pinned",
        "            rep.idle[held.adapter] = rep.idle.pop(held.adapter, 0)",
    ),
    # -- [evict]
    Mutant(
        "evict-most-recent",
        "evict",
        "the victim is the most recently used idle adapter",
        MACHINE,
        "            victim, stamp = next(iter(rep.idle.items()))\n",
        "            victim, stamp = next(reversed(rep.idle.items()))\n",
    ),
    Mutant(
        "evict-one-short",
        "evict",
        "victims are chosen as if the new load did not count",
        MACHINE,
        "self._doom(rep, len(rep.held) + len(rep.loading) + 1 - self._line(rep))",
        "self._doom(rep, len(rep.held) + len(rep.loading) - self._line(rep))",
    ),
    Mutant(
        "evict-unloads-reversed",
        "evict",
        "the unloads of several victims come out last victim first",
        MACHINE,
        "commands.extend(self._unload(unload) for unload in op.victims)",
        "commands.extend(self._unload(unload) for unload in reversed(op.victims))",
    ),
    Mutant(
        "evict-fails-and-unloads",
        "evict",
        "a load that failed still unloads its victims, though the engine took no room for it",
        MACHINE,
        "            commands.extend(self._spare(op))\n",
        "            commands.extend(self._unload(unload) for unload in op.victims)\n",
    ),
    Mutant(
        "spare-at-the-end",
        "load-outcome",
        "a victim held again goes to the end of idle, most recently used, not back where it was",
        MACHINE,
        "                _idle_at(rep.idle, unload.adapter, unload.stamp)\n",
        "                rep.idle[unload.adapter] = self._tick()\n",
    ),
    Mutant(
        "evict-unloads-at-send",
        "evict",
        "the victims' unloads go out with their load, not once it lands (so a failed load spares none)",
        MACHINE,
        "        rep.outstanding += 1\n"
        "        return [IssueLoad(load=load.op, replica=rep.id, adapter=adapter, path=path)]",
        "        rep.outstanding += 1\n"
        "        early, load.victims = [self._unload(u) for u in load.victims], []\n"
        "        return [IssueLoad(load=load.op, replica=rep.id, adapter=adapter, path=path), *early]",
    ),
    Mutant(
        "spare-named-idle",
        "load-outcome",
        "a spared victim the last reading names goes back to idle",
        MACHINE,
        "            if unload.adapter not in self._pins and unload.adapter not in rep.named:",
        "            if unload.adapter not in self._pins:",
    ),
    Mutant(
        "spare-since-renewed",
        "load-outcome",
        "a spared victim is dated anew, as if loaded now, so a listing that started before keeps it",
        MACHINE,
        "rep.held[unload.adapter] = Held(rep, unload.adapter, 0, unload.since)",
        "rep.held[unload.adapter] = Held(rep, unload.adapter, 0, self._tick())",
    ),
    # -- [settle]
    Mutant(
        "settle-never",
        "settle",
        "a load that lands over the line leaves the excess held",
        MACHINE,
        "            commands.extend(self._settle(rep))\n",
        "",
    ),
    Mutant(
        "settle-counts-loads-out",
        "settle",
        "loads still out count in the excess, so one that fails later has evicted already",
        MACHINE,
        "[self._start_read(rep)]\n        return self._evict(rep, len(rep.held) - self._line(rep))",
        "[self._start_read(rep)]\n        return self._evict(rep, len(rep.held)"
        " + len(rep.loading) - self._line(rep))",
    ),
    Mutant(
        "settle-does-not-wait",
        "settle",
        "the excess is unloaded at once though another router's requests ran there",
        MACHINE,
        "        if self._wants_reading(rep):\n            rep.settle = True\n",
        "        if False:\n            rep.settle = True\n",
    ),
    # -- [listing]
    Mutant(
        "time-shared-for-ever",
        "time",
        "a replica marked shared stays on the shorter pace for ever, not for a listing interval",
        MACHINE,
        "        rep.shared_until = self._clock + self._settings.listing_interval\n",
        "        rep.shared_until = math.inf\n",
    ),
    Mutant(
        "standby-ignored",
        "standby",
        "standing by changes nothing: a shared replica is listed every shared_interval",
        MACHINE,
        "rep.shared_until > self._clock and not self._standing_by",
        "rep.shared_until > self._clock",
    ),
    Mutant(
        "standby-no-listings",
        "standby",
        "deciding again lists nothing at once",
        MACHINE,
        "            commands.append(self._start_listing(rep))\n        return commands\n",
        "        return commands\n",
    ),
    Mutant(
        "reading-ended-is-foreign",
        "reading",
        "an adapter whose request of this router ended while the read was out counts as another router's",
        MACHINE,
        "name not in mine or not (mine[name].in_use or name in op.ended) for name in named",
        "name not in mine or not mine[name].in_use for name in named",
    ),
    Mutant(
        "time-shared-any-foreign",
        "time",
        "any foreign reading marks the replica shared, not only one naming an adapter not held there",
        MACHINE,
        "self._settings.shared_interval is not None and any(_theirs(rep, name) for name in names):",
        "self._settings.shared_interval is not None:",
    ),
    Mutant(
        "time-shared-by-own-load",
        "time",
        "a reading naming an adapter this router is loading there marks the replica shared",
        MACHINE,
        "    return name not in rep.held and name not in rep.loading and name not in rep.unloading\n",
        "    return name not in rep.held and name not in rep.unloading\n",
    ),
    Mutant(
        "time-shared-by-own-unload",
        "time",
        "a reading naming an adapter this router is unloading there marks the replica shared",
        MACHINE,
        "    return name not in rep.held and name not in rep.loading and name not in rep.unloading\n",
        "    return name not in rep.held and name not in rep.loading\n",
    ),
    Mutant(
        "listing-adds-at-back",
        "listing",
        "a listing's additions go to the back of the idle list (most recently used)",
        MACHINE,
        "            rep.idle.move_to_end(name, last=False)\n",
        "",
    ),
    Mutant(
        "listing-ties-reversed",
        "listing",
        "a listing's additions are ordered largest name first",
        MACHINE,
        "for name in sorted(listed - known, reverse=True):",
        "for name in sorted(listed - known):",
    ),
    Mutant(
        "listing-drops-newer",
        "listing",
        "a listing drops an unlisted adapter even if it became held after the listing started",
        MACHINE,
        "if name not in listed and held.since < finished.started:",
        "if name not in listed:",
    ),
    Mutant(
        "release-renews-since",
        "listing",
        "a release dates the adapter anew, so an older listing no longer drops it once it went idle",
        MACHINE,
        "        rep.idle[held.adapter] = self._logical\n",
        "        rep.idle[held.adapter] = self._logical\n        held.since = self._tick()\n",
    ),
    Mutant(
        "listing-revives-dropped",
        "listing",
        "a listing brings back adapters dropped since it started",
        MACHINE,
        "rep.unloading.keys() | rep.dropped_while_listing",
        "rep.unloading.keys()",
    ),
    Mutant(
        "listing-holds-loading",
        "listing",
        "a listing holds an adapter that is being loaded (the seed's fault 3)",
        MACHINE,
        "known = rep.held.keys() | rep.loading.keys() |",
        "known = rep.held.keys() |",
    ),
    Mutant(
        "unload-end-not-noted",
        "listing",
        "an unload answered while a listing is out does not keep the listing from bringing it back",
        MACHINE,
        "        if rep.listing is not None:\n            rep.dropped_while_listing.add(op.adapter)\n"
        "        commands",
        "        commands",
    ),
    Mutant(
        "markmet-every-listing",
        "listing",
        "every listing answered marks its replica met again",
        MACHINE,
        "        if rep.met:\n            return []\n        rep.met = True",
        "        rep.met = True",
    ),
    Mutant(
        "old-listing-keeps-in-use",
        "listing",
        "the old [listing] (issue 8, 1): a listing does not drop an adapter requests run on",
        MACHINE,
        "if name not in listed and held.since < finished.started:",
        "if name not in listed and held.since < finished.started and not held.in_use:",
    ),
    # -- [forget]
    Mutant(
        "forget-not-noted",
        "forget",
        "adapter_missing stops holding the adapter without noting it for the listing out",
        MACHINE,
        "            return []\n        self._drop(rep, adapter)\n",
        "            return []\n        rep.held.pop(adapter).current = False\n"
        "        rep.idle.pop(adapter, None)\n        self._unwhere(rep, adapter)\n",
    ),
    Mutant(
        "forget-trusts-stale",
        "forget",
        "a report with the ticket of a request on an older copy drops the copy held now",
        MACHINE,
        "        if ticket is not None and self._leases.get(ticket) is not held:\n            return []\n",
        "",
    ),
    Mutant(
        "old-forget-keeps-in-use",
        "forget",
        "the old [forget] (issue 8, 1): adapter_missing does not drop an adapter requests run on",
        MACHINE,
        "            return []\n        self._drop(rep, adapter)\n",
        "            return []\n        if held.in_use:\n            return []\n"
        "        self._drop(rep, adapter)\n",
    ),
    # -- answers, releases, cancels
    Mutant(
        "spare-waiters-first",
        "load-outcome",
        "the waiters of a failed load's victims are admitted before the victims are held again",
        MACHINE,
        "                continue\n            del rep.unloading[unload.adapter]\n",
        "                continue\n            commands.extend(self._readmit(unload))\n"
        "            unload.waiters.clear()\n            del rep.unloading[unload.adapter]\n",
    ),
    Mutant(
        "cancel-abandons-joiners",
        "cancel",
        "a cancelled waiter of a load takes every other waiter off it: they are never answered",
        MACHINE,
        "            waited.waiters.remove(ticket)",
        "            waited.waiters.clear()",
    ),
    Mutant(
        "loaded-goes-to-first-waiter",
        "load-outcome",
        "when the starter was cancelled, the first remaining waiter is granted 'loaded'",
        MACHINE,
        "                if ticket == op.starter:",
        "                if ticket == op.waiters[0]:",
    ),
    Mutant(
        "cap-ignores-the-batch",
        "cap",
        "a load takes a victim while more adapters are in use than one batch of the engine runs",
        MACHINE,
        " or (count >= line and in_use > batch)\n",
        "\n",
    ),
    Mutant(
        "cap-batch-past-line",
        "cap",
        "the batch clause waits only once the count is past the line, not at it",
        MACHINE,
        "(count >= line and in_use > batch)",
        "(count > line and in_use > batch)",
    ),
    Mutant(
        "cap-engine-queue-ignored",
        "cap",
        "a load takes a victim while the engine queues requests (more granted than it runs at once)",
        MACHINE,
        "            if seqs is not None and rep.granted + rep.others > seqs:\n                return True",
        "            if seqs is not None and rep.granted + rep.others > seqs:\n                pass",
    ),
    Mutant(
        "cap-engine-queue-counts-waiting",
        "cap",
        "the engine-queue clause counts requests waiting in the machine too (they wait on it: a deadlock)",
        MACHINE,
        "rep.granted + rep.others > seqs",
        "rep.in_flight + rep.others > seqs",
    ),
    Mutant(
        "cap-drained-never-admits",
        "cap",
        "a release that empties the engine's queue (its adapter still in use) does not admit the queue",
        MACHINE,
        "                return self._admit_queued(rep)  # [cap]: the engine's queue may have emptied: room",
        "                return []  # [cap]: the engine's queue may have emptied: room",
    ),
    Mutant(
        "cap-raised-never-admits",
        "cap",
        "a reading that raises max_loras (and so the cap) does not admit the queue",
        MACHINE,
        "        if raised:\n            commands.extend(self._admit_queued(rep))",
        "        if False:\n            commands.extend(self._admit_queued(rep))",
    ),
    # -- [replicas]
    Mutant(
        "removal-order",
        "replicas",
        "a removal fails its waiters in the order it finds them, not in ticket order",
        MACHINE,
        "for ticket in sorted(failed):",
        "for ticket in failed:",
    ),
    Mutant(
        "late-answer-uncounted",
        "replicas",
        "a removed replica's late answers are not counted in the statistics",
        MACHINE,
        "        key = (rep.model, event.outcome.value)\n"
        "        self._counts.evictions[key] = self._counts.evictions.get(key, 0) + 1\n"
        "        if self._count_answer(rep):\n            return []",
        "        if self._count_answer(rep):\n            return []\n"
        "        key = (rep.model, event.outcome.value)\n"
        "        self._counts.evictions[key] = self._counts.evictions.get(key, 0) + 1",
    ),
    Mutant(
        "removed-forgotten-early",
        "replicas",
        "a removed replica is forgotten while calls to it are still out",
        MACHINE,
        "if not rep.outstanding and not rep.held and self._replicas.get(rep.id) is rep:",
        "if not rep.held and self._replicas.get(rep.id) is rep:",
    ),
    Mutant(
        "old-removal-drops-running",
        "replicas",
        "the old removal (issue 8, 2): adapters requests run on are dropped, so a re-add can unload them",
        MACHINE,
        "for name in [n for n, held in rep.held.items() if not held.in_use]:",
        "for name in list(rep.held):",
    ),
    # -- [time], [view]
    Mutant(
        "listings-reversed",
        "time",
        "the listings one advance starts come out last replica first",
        MACHINE,
        "                commands.append(self._start_listing(rep))",
        "                commands.insert(0, self._start_listing(rep))",
    ),
    Mutant(
        "due-catches-up",
        "time",
        "the next listing is due an interval after it was due, not after now",
        MACHINE,
        "            rep.due = now + self._interval(rep)\n",
        "            rep.due = at + self._interval(rep)\n",
    ),
    Mutant(
        "view-full-has-room",
        "view",
        "a replica at its limit counts as having room",
        "_queries.py",
        "if len(held) + len(loading) < line and",
        "if len(held) + len(loading) <= line and",
    ),
    # -- [refuse], [health], [cap]
    Mutant(
        "refusal-never-ends",
        "refuse",
        "an adapter the engine refused is refused for ever",
        MACHINE,
        "        if refused[0] > self._clock:  # [refuse]",
        "        if True:  # [refuse]",
    ),
    Mutant(
        "backoff-does-not-double",
        "health",
        "a replica failing again and again is avoided no longer than the first time",
        MACHINE,
        "        wait = self._settings.backoff * 2.0 ** min(rep.failures - 1, 32)",
        "        wait = self._settings.backoff",
    ),
    Mutant(
        "cap-counts-idle",
        "cap",
        "idle adapters count against the cap, so a request waits though evicting one would make room",
        MACHINE,
        "        in_use = count - len(rep.idle)\n",
        "        in_use = count\n",
    ),
    # -- [share]
    Mutant(
        "share-per-router-limit",
        "share",
        "each of R routers fills every free slot a listing left, as if it were alone",
        MACHINE,
        "line = rep.limit if free <= 0 else rep.base + -(-free // self._settings.routers)",
        "line = rep.limit",
    ),
    Mutant(
        "share-rounds-down",
        "share",
        "a router's share of the free slots a listing left rounds down",
        MACHINE,
        "rep.base + -(-free // self._settings.routers)",
        "rep.base + free // self._settings.routers",
    ),
    Mutant(
        "share-line-below-1",
        "share",
        "the line may fall below 1 as the engine loses adapters behind the machine's back",
        MACHINE,
        "        return max(line - rep.unseen, 1)",
        "        return line - rep.unseen",
    ),
    Mutant(
        "share-never-resets",
        "share",
        "a listing does not share the free slots it leaves afresh",
        MACHINE,
        "        rep.base, rep.unseen = len(rep.held) + len(rep.loading), 0  # [share]: shared afresh\n",
        "",
    ),
    Mutant(
        "share-trusts-not-found",
        "share",
        "a victim another router unloaded first counts as room made",
        MACHINE,
        "            rep.unseen += 1\n            self._touch(rep)\n"
        "        commands.extend(self._readmit(op))",
        "            self._touch(rep)\n        commands.extend(self._readmit(op))",
    ),
    # -- [read], [reading], [read-failed]
    Mutant(
        "read-never-before-cold",
        "read",
        "a cold request on a full replica loads without waiting for a reading",
        MACHINE,
        "        if not fresh and self._needs_read(rep):\n",
        "        if False:\n",
    ),
    Mutant(
        "read-not-the-first",
        "read",
        "a request on a replica whose first reading is on its way does not wait for it",
        MACHINE,
        "        return rep.foreign if rep.names_adapters else rep.read is not None\n",
        "        return rep.foreign if rep.names_adapters else False\n",
    ),
    Mutant(
        "read-not-after-listing",
        "read",
        "a listing is not followed by a read of the engine",
        MACHINE,
        "            commands.append(self._start_read(rep))  # [read]: what runs there, as of the listing\n",
        "",
    ),
    Mutant(
        "read-free-slot-too",
        "read",
        "a cold request reads the engine even when its load has a free slot",
        MACHINE,
        "        return self._wants_reading(rep) and len(rep.held) + len(rep.loading) + 1 > "
        "self._line(rep)\n",
        "        return self._wants_reading(rep)\n",
    ),
    Mutant(
        "reading-released-idle",
        "reading",
        "a release makes an adapter the engine reports running idle, so a victim",
        MACHINE,
        "never a victim, so never idle\n        if held.adapter in rep.named:\n",
        "never a victim, so never idle\n        if False:\n",
    ),
    Mutant(
        "read-failed-always-ends",
        "read-failed",
        "every failed read ends the last reading, listing or not",
        MACHINE,
        "self._new_reading(rep, frozenset(), None) if rep.listed_since_reading else []\n",
        "self._new_reading(rep, frozenset(), None)\n",
    ),
    Mutant(
        "reading-own-stands",
        "reading",
        "a reading of only this router's own requests keeps them out of idle after they end",
        MACHINE,
        "            if not foreign:\n                names = frozenset()\n",
        "",
    ),
    Mutant(
        "cap-ignores-max-loras",
        "cap",
        "the cap stays at the line plus the headroom below what one batch of the engine may use",
        MACHINE,
        "        return in_use >= max(line + headroom, batch) or",
        "        return in_use >= line + headroom or",
    ),
    Mutant(
        "reading-frees-reversed",
        "reading",
        "adapters a reading no longer names go idle in reverse name order",
        MACHINE,
        "        for name in sorted(before - rep.named):",
        "        for name in sorted(before - rep.named, reverse=True):",
    ),
    Mutant(
        "read-failed-never-ends",
        "read-failed",
        "a listing does not mark the reading as older than it, so no failed read ends it",
        MACHINE,
        "        rep.listed_since_reading = True\n",
        "",
    ),
    # -- [place], [load], [route], and the settings only they read
    Mutant(
        "place-holder-never-busy",
        "place",
        "a saturated holder keeps the request: no second copy of a hot adapter",
        MACHINE,
        "        if holder is not None and not self._saturated(holder, extra):",
        "        if holder is not None:",
    ),
    Mutant(
        "place-holder-ignores-served",
        "place",
        "holders tied on busy go by the weight alone, not by the requests each has served",
        MACHINE,
        "            served = rep.served\n",
        "            served = 0\n",
    ),
    Mutant(
        "place-saturated-past-full",
        "load",
        "a holder is saturated only past its capacity, not at it",
        MACHINE,
        "        return seqs is not None and self._busy(rep, extra) >= seqs",
        "        return seqs is not None and self._busy(rep, extra) > seqs",
    ),
    Mutant(
        "place-spill-margin-1",
        "place",
        "with every engine busy, a holder's queue of one sends the request to an engine with none",
        MACHINE,
        "theirs == 0 and mine >= SPILL_MARGIN",
        "theirs == 0 and mine >= 1",
    ),
    Mutant(
        "place-base-no-turn",
        "place-base",
        "equal replicas do not take turns: the first in id order takes every tie",
        MACHINE,
        "key = (self._busy(rep, extra), (i - turn) % len(ids))",
        "key = (self._busy(rep, extra), i)",
    ),
    Mutant(
        "place-base-healthy-ignored",
        "place-base",
        "a replica the router knows healthy is passed over while avoided",
        MACHINE,
        "(rep.avoid_until > self._clock and rid not in allowed)",
        "rep.avoid_until > self._clock",
    ),
    Mutant(
        "place-burst-bound-full",
        "place",
        "a cold load may go to an engine at three quarters of its capacity or more",
        MACHINE,
        "            if seqs is not None and 4 * busy >= 3 * seqs:\n                return False",
        "            if seqs is not None and busy >= seqs:\n                return False",
    ),
    Mutant(
        "place-victim-weight-ignored",
        "place",
        "replicas that would evict are ranked by their victims' idle stamps, not their demand first",
        MACHINE,
        "        return (2, busy, self._level(victim), max(rep.idle[victim], 0), rep.served)",
        "        return (2, busy, 0, max(rep.idle[victim], 0), rep.served)",
    ),
    Mutant(
        "place-step2-takes-wait",
        "place",
        "step 2 takes a replica at its cap (kind 4) for a cold load (the index's path)",
        "_indexing.py",
        "            if spread and key[0] == 4:\n",
        "            if False:\n",
    ),
    Mutant(
        "place-victim-before-busy",
        "place",
        "replicas that would evict are ranked by their victims' demand before how busy they are",
        MACHINE,
        "        return (2, busy, self._level(victim), max(rep.idle[victim], 0), rep.served)",
        "        return (2, 0, self._level(victim), max(rep.idle[victim], 0), busy)",
    ),
    Mutant(
        "place-step3-full-key",
        "place",
        "step 3 picks by the full cold key, not by (kind = 4, busy, served, -weight)",
        MACHINE,
        "key = (kind == 4, busy, served, weight) if least else (kind, busy, a, b, served, weight)",
        "key = (kind, busy, a, b, served, weight)",
    ),
    Mutant(
        "place-burst-bound-floor",
        "place",
        "the burst bound is three quarters rounded down: an engine of 2 at once running 1 takes no copy",
        MACHINE,
        "            if seqs is not None and 4 * busy >= 3 * seqs:\n                return False",
        "            if seqs is not None and busy >= max(1, 3 * seqs // 4):\n                return False",
    ),
    Mutant(
        "place-holder-weight-reversed",
        "place",
        "holders tied on busy and served go to the lightest rendezvous weight",
        MACHINE,
        "                if weight > best_weight:",
        "                if weight < best_weight:",
    ),
    Mutant(
        "place-holder-avoided",
        "place",
        "a holder being avoided ([health]) is still a candidate",
        MACHINE,
        "            if not rep.met or rep.avoid_until > clock or rep.id in skip:\n                continue",
        "            if not rep.met or rep.id in skip:\n                continue",
    ),
    Mutant(
        "overflow-inclusive",
        "place",
        "kind 1 (over, preferred) while the count is at most line + overflow, not below it",
        MACHINE,
        "            return (1 if count < line + self._settings.overflow else 3, busy, 0, 0, rep.served)",
        "            return (1 if count <= line + self._settings.overflow else 3, busy, 0, 0, rep.served)",
    ),
    Mutant(
        "overflow-ignored",
        "place",
        "the overflow setting is read as its default, 2 (the index's path)",
        MACHINE,
        "            return (1 if count < line + self._settings.overflow else 3, busy, 0, 0, rep.served)",
        "            return (1 if count < line + 2 else 3, busy, 0, 0, rep.served)",
    ),
    Mutant(
        "concurrency-ignored",
        "load",
        "the concurrency setting is ignored: capacity is only what readings showed",
        MACHINE,
        "        return self._settings.concurrency if self._settings.concurrency is not None else rep.seqs",
        "        return rep.seqs",
    ),
    Mutant(
        "load-seqs-from-last",
        "load",
        "a reading with a queue sets the engine's batch to what runs now, lowering what an earlier showed",
        MACHINE,
        "                rep.seqs = max(rep.ran, rep.seqs or 1)",
        "                rep.seqs = max(running, 1)",
    ),
    Mutant(
        "load-others-negative",
        "load",
        "other routers' requests may count below 0 when this router's own outnumber the engine's",
        MACHINE,
        "            rep.others = max(0, running + waiting - op.in_flight)",
        "            rep.others = running + waiting - op.in_flight",
    ),
    Mutant(
        "load-calm-never",
        "load",
        "a reading with no queue does not raise the load an engine was seen to carry calmly",
        MACHINE,
        "                rep.calm = max(rep.calm, op.in_flight + rep.others)",
        "                rep.calm = rep.calm",
    ),
    Mutant(
        "load-others-against-now",
        "load",
        "other routers' requests are the engine's count less this router's now, not when the read went out",
        MACHINE,
        "            rep.others = max(0, running + waiting - op.in_flight)",
        "            rep.others = max(0, running + waiting - rep.in_flight)",
    ),
    Mutant(
        "route-ignores-refusal",
        "route",
        "a routed request for a refused adapter is assigned and loads it again",
        MACHINE,
        "        if refused is not None:  # no call, no replica, the engine's words again",
        "        if False:",
    ),
    Mutant(
        "route-never-stale",
        "read",
        "a request assigned to a stale replica starts no read of it",
        MACHINE,
        "        if self._stale(rep):\n            commands.append(self._start_read(rep))",
        "        if False:\n            commands.append(self._start_read(rep))",
    ),
    Mutant(
        "stale-refresh-late",
        "read",
        "a replica other routers use is read again only after one request more than REFRESH",
        MACHINE,
        "rep.served + coming - rep.read_served >= REFRESH",
        "rep.served + coming - rep.read_served > REFRESH",
    ),
    Mutant(
        "max-backoff-ignored",
        "health",
        "the max_backoff setting does not cap the time a failing replica is avoided",
        MACHINE,
        "        rep.avoid_until = self._clock + min(wait, self._settings.max_backoff)",
        "        rep.avoid_until = self._clock + wait",
    ),
    Mutant(
        "half-life-late",
        "evict",
        "demand is halved one request after every half_life",
        MACHINE,
        "            half_life=half_life,\n",
        "            half_life=half_life + 1,\n",
    ),
    # -- the wire
    Mutant(
        "wire-worker-is-adapter",
        "wire",
        "every worker failure is the adapter's fault",
        WORDING,
        '    "must be provided",  # an empty name or path\n',
        '    "must be provided",  # an empty name or path\n    "Worker failed",\n',
    ),
    Mutant(
        "wire-unload-400",
        "wire",
        "a 400 'cannot be found' (vLLM 0.6) is a failed unload, not a successful one",
        ANSWERS,
        "if status in (400, 404) and not no_such_route(status, body):",
        "if status == 404 and not no_such_route(status, body):",
    ),
    Mutant(
        "wire-no-answer-adapter",
        "wire",
        "a load that got no answer is the adapter's fault",
        ANSWERS,
        "return LoadFinished(load=command.load, outcome=LoadOutcome.REPLICA_FAULT, message=reason)",
        "return LoadFinished(load=command.load, outcome=LoadOutcome.ADAPTER_FAULT, message=reason)",
    ),
    Mutant(
        "wire-lists-base",
        "wire",
        "a listing names the base model as an adapter",
        ANSWERS,
        "        if parent:\n            adapters.append",
        "        if True:\n            adapters.append",
    ),
    # -- Written after the suite was (issue 37's "bugs planted the same way that it has never seen"):
    # none of the properties was changed for them; their first run is the measure.
    Mutant(
        "dismiss-in-use",
        "dismiss",
        "an operator's dismissal unloads an adapter a request runs on",
        MACHINE,
        "        if adapter not in rep.idle:\n            reason = self._not_idle(rep, adapter)",
        "        if adapter not in rep.held:\n            reason = self._not_idle(rep, adapter)",
    ),
    Mutant(
        "dismiss-keeps-held",
        "dismiss",
        "a dismissed adapter is unloaded but stays held, and is granted",
        MACHINE,
        "        return [self._unload_idle(rep, adapter)]",
        "        rep.unloading[adapter] = Unload(rep, adapter, None)\n"
        "        return [self._unload(rep.unloading[adapter])]",
    ),
    Mutant(
        "release-named-idle",
        "reading",
        "a release leaves an adapter the last reading names idle, a victim under another router's requests",
        MACHINE,
        "        if held.adapter in rep.named:\n            # [reading]: the last reading keeps it",
        "        if held.adapter in rep.named and False:\n            # [reading]: the last reading keeps it",
    ),
    Mutant(
        "listing-adds-last",
        "listing",
        "a listing's additions enter idle most recently used, not least",
        MACHINE,
        "                rep.idle.move_to_end(name, last=False)",
        "                rep.idle.move_to_end(name)",
    ),
    Mutant(
        "backoff-unbounded",
        "health",
        "a failing replica's backoff doubles past max_backoff",
        MACHINE,
        "        rep.avoid_until = self._clock + min(wait, self._settings.max_backoff)",
        "        rep.avoid_until = self._clock + wait",
    ),
    Mutant(
        "backoff-flat",
        "health",
        "a failing replica's backoff never doubles",
        MACHINE,
        "        wait = self._settings.backoff * 2.0 ** min(rep.failures - 1, 32)",
        "        wait = self._settings.backoff",
    ),
    Mutant(
        "halving-late",
        "demand",
        "demand is halved every half_life + 1 requests after the first halving",
        MACHINE,
        "        self._to_halving = self._settings.half_life\n        self._epoch += 1",
        "        self._to_halving = self._settings.half_life + 1\n        self._epoch += 1",
    ),
    Mutant(
        "refused-held-fails",
        "refuse",
        "a request for a refused adapter fails on a replica that holds it (a listing said it took it)",
        MACHINE,
        "        if refused is None or adapter in rep.held:\n            return None",
        "        if refused is None:\n            return None",
    ),
    Mutant(
        "release-admits-no-queue",
        "cap",
        "a release that leaves an adapter idle does not admit the cap's queue",
        MACHINE,
        "        rep.idle[held.adapter] = self._logical\n"
        "        return self._admit_queued(rep) if rep.queue is not None else []",
        "        rep.idle[held.adapter] = self._logical\n        return []",
    ),
]


def mutate(source: Path, mutant: Mutant | None) -> None:
    """Copy the core to ``source`` with ``mutant`` applied (if any)."""
    target = source / "lorafleet"
    shutil.copytree(CORE, target, ignore=shutil.ignore_patterns("__pycache__"))
    if mutant is None:
        return
    path = target / mutant.file
    text = path.read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise SystemExit(f"{mutant.name}: the snippet occurs {count} times in {mutant.file}, not once")
    path.write_text(text.replace(mutant.old, mutant.new))


def run(
    mutant: Mutant | None, tests: list[str], timeout: float, seed: int | None = None
) -> tuple[bool, float, str]:
    """Run ``tests`` against the core with ``mutant`` in it; True when they fail (the mutant is caught)."""
    with tempfile.TemporaryDirectory(prefix="lorafleet-mutant-") as folder:
        profile = "ci-find" if seed is None else "ci-seeded"
        env = dict(os.environ, HYPOTHESIS_PROFILE=profile, PYTHONDONTWRITEBYTECODE="1")
        seeded = [] if seed is None else [f"--hypothesis-seed={seed}"]
        # The copy goes first on the path even unmutated: the installed package may be another tree's.
        mutate(Path(folder), mutant)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *seeded, *tests],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            # A run that never ends fails CI too: caught, and said so.
            return True, time.monotonic() - started, "timed out"
        took = time.monotonic() - started
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    return done.returncode != 0, took, last


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        default=[
            "properties/test_machine_properties.py",
            "properties/test_share.py",
            "properties/test_placement.py",
        ],
    )
    parser.add_argument("--only", nargs="+", help="mutant names")
    parser.add_argument("--show", action="store_true", help="print each mutant's change")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for one run")
    parser.add_argument("--seeds", type=int, help="run each mutant with this many seeds, and count")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    for mutant in chosen:  # fail fast on a stale snippet, before any run
        with tempfile.TemporaryDirectory() as folder:
            mutate(Path(folder), mutant)
    caught, took, last = run(None, args.tests, args.timeout)
    if caught:
        print(f"the tests fail on the unmutated core ({last}): nothing to measure")
        return 1
    print(f"unmutated: pass in {took:.0f} s; tests: {' '.join(args.tests)}")
    if args.seeds:
        for mutant in chosen:
            found = [run(mutant, args.tests, args.timeout, seed) for seed in range(args.seeds)]
            seeds = [seed for seed, (caught, _, _) in enumerate(found) if caught]
            took = sum(t for _, t, _ in found) / len(found)
            print(
                f"{mutant.name:28} found by {len(seeds)}/{args.seeds} seeds (a run: {took:.0f} s on average)"
            )
        return 0
    score = 0
    for mutant in chosen:
        caught, took, last = run(mutant, args.tests, args.timeout)
        score += caught
        verdict = ("hung    " if last == "timed out" else "caught  ") if caught else "SURVIVED"
        print(f"{verdict} {mutant.name:28} [{mutant.rule}] {mutant.what} ({took:.0f} s)", flush=True)
        if args.show:
            print(f"    - {mutant.old!r}\n    + {mutant.new!r}\n    {last}")
    print(f"caught {score}/{len(chosen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
