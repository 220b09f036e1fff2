// A mutation check of the port: plants one small semantic bug at a time in a copy of machine.mjs (one per
// rule clause of SPEC.md and per setting) and replays the vectors on it; every mutant must fail one.
//
//   node vectors/port/mutants.mjs vectors/hand vectors/hypothesis
//   node vectors/port/mutants.mjs --only evict-most-recent cap-ignores-max-loras
//   node vectors/port/mutants.mjs --wanting   # the mutants no vector catches yet (WANTING, below)
//
// Each mutant replaces one snippet (`old`, which must occur exactly once) with `new`, or each of a list of
// snippets with its own, in a copy of machine.mjs written with replay.mjs into a fresh temporary folder;
// nothing in vectors/port/ changes.
// A mutant is caught only when the replay ends in `N passed, M failed` with M above 0: a vector judged
// it. A replay that crashes or hangs judged nothing, and is BROKEN like a snippet that does not apply.
// Prints `caught`, `SURVIVED` or `BROKEN` with each mutant's id, rule and what it breaks, then
// `caught N/M` alone on the last line; exits non-zero unless every mutant is caught. Folders default
// to vectors/hand and vectors/hypothesis. Node.js only, no packages.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "..", "..");

// `old` and `new` are one snippet each, or lists of snippets replaced pairwise (each must occur once);
// `scenario`, for a mutant that waited in WANTING, is the run of the hand vector that catches it.
const m = (id, rule, what, old, replacement, scenario) => ({ id, rule, what, old, new: replacement, scenario });

export const MUTANTS = [
  // -- §3.1 requests
  m("hit-shortcut-keeps-ticket", "hit", "the hit shortcut does not advance the highest ticket seen",
    "if (!held || this.old(rep, adapter)) return false;\n    this.highest = ticket;",
    "if (!held || this.old(rep, adapter)) return false;"),
  m("hit-uncounted", "statistics", "a hit is not counted among the grants",
    "this.grants.hit += 1;", ""),
  m("join-granted-loaded", "join", "a request that joined a load is granted as loaded",
    'const how = ticket === load.starter ? "loaded" : "joined";', 'const how = "loaded";'),
  m("wait-unload-ignored", "wait-unload", "a request for an adapter being unloaded loads it at once",
    "if (unload) { // [wait-unload]", "if (false) { // [wait-unload]"),
  m("wait-unload-victim-loads", "wait-unload", "a request for a victim whose unload is not issued yet loads it anew",
    "if (unload) { // [wait-unload]", "if (unload && unload.op !== null) { // [wait-unload]"),
  m("evict-most-recent", "evict", "the victim is the most recently used idle adapter",
    "return rep.idle.keys().next().value;", "return [...rep.idle.keys()].at(-1);"),
  m("evict-by-demand", "evict", "the victim is the idle adapter in least demand, the least recently used among equals",
    "return rep.idle.keys().next().value;",
    "return [...rep.idle.keys()].reduce((a, b) => (this.weight(b) < this.weight(a) ? b : a));"),
  m("evict-new-load-uncounted", "evict", "a cold load takes a victim only once the count without it passes the line",
    "let excess = rep.held.size + rep.loading.size - this.line(rep);",
    "let excess = rep.held.size + rep.loading.size - 1 - this.line(rep);"),
  m("evict-at-the-bound", "evict", "a cold load takes victims only past line + headroom (none without a cap)",
    "let excess = rep.held.size + rep.loading.size - this.line(rep);",
    "let excess = rep.held.size + rep.loading.size - this.line(rep) - (this.headroom ?? Infinity);"),
  m("victims-unloaded-first", "evict", "a load's victims are unloaded as they are chosen, not once the load lands",
    "// Step 3.\n    return [{", "// Step 3.\n    return [...load.victims.splice(0).map((u) => "
      + "this.issueUnload(u)), {"),
  m("victims-numbered-when-chosen", "evict", "a victim's unload is numbered when chosen, not as it goes out",
    ["op: null, waiters: [], since, stamp }", "unload.op = this.newOp();"],
    ["op: this.newOp(), waiters: [], since, stamp }", "unload.op ??= this.newOp();"]),
  m("pin-load-no-victims", "pin", "a pin's load takes no victim: it goes past the line",
    "while (excess > 0 && rep.idle.size > 0) {\n      const victim = this.victim(rep);\n      const stamp",
    "while (ticket !== null && excess > 0 && rep.idle.size > 0) {\n      const victim = "
      + "this.victim(rep);\n      const stamp"),
  m("headroom-ignored", "cap", "setting headroom ignored: the cap is the line (or max_loras)",
    "return Math.max(this.line(rep) + this.headroom, rep.maxLoras ?? 0);", "return "
      + "Math.max(this.line(rep), rep.maxLoras ?? 0);"),
  m("cap-ignores-max-loras", "cap", "the cap is line + headroom, never the engine's max_loras",
    "return Math.max(this.line(rep) + this.headroom, rep.maxLoras ?? 0);", "return this.line(rep) + this.headroom;"),
  m("cap-never-waits", "cap", "a cold request at the cap loads anyway instead of queueing",
    "if (ticket !== null && this.capped(rep)) {", "if (false && ticket !== null && this.capped(rep)) {"),
  m("cap-one-over", "cap", "a cold request waits only once the cap is passed, not reached",
    "if (occupied >= this.cap(rep)) return true;", "if (occupied > this.cap(rep)) return true;"),
  m("cap-batch-ignored", "cap", "more adapters in use than one batch runs never hold a load that would take a victim",
    "return rep.maxLoras !== null && rep.held.size + rep.loading.size >= this.line(rep) && occupied > rep.maxLoras;",
    "return false;"),
  m("cap-batch-at-max-loras", "cap", "a load that would take a victim waits at max_loras adapters in use, not past",
    "&& occupied > rep.maxLoras;", "&& occupied >= rep.maxLoras;"),
  m("cap-batch-without-victim", "cap", "more adapters in use than one batch runs hold a load even below the line",
    "return rep.maxLoras !== null && rep.held.size + rep.loading.size >= this.line(rep) && occupied > rep.maxLoras;",
    "return rep.maxLoras !== null && occupied > rep.maxLoras;"),
  m("settle-skipped", "settle", "a landed load never unloads the excess over the line",
    "commands.push(...this.settle(rep));", ""),
  m("refuse-ignored", "refuse", "a refused adapter is loaded again at once",
    "if (refused.until > this.now) { // [refuse]: no call", "if (false) { // [refuse]: no call"),
  m("refusal-ignored", "refuse", "setting refusal ignored: refusals last the default 900 s",
    "this.refusalSeconds = Number(refusal);", "this.refusalSeconds = 900;"),
  m("forgive-ignored", "forgive", "refusal_forgotten forgets nothing: the refusal runs its time",
    "forgot = this.refused.delete(adapter);", "forgot = this.refused.has(adapter);"),
  m("forgive-null-ignored", "forgive", "refusal_forgotten with a null adapter forgets no refusal",
    "forgot = this.refused.size > 0;\n      this.refused.clear();", "forgot = false;"),
  m("forgive-no-pins", "forgive", "a pin waiting out a forgotten refusal waits on",
    "return forgot ? this.ensurePins() : [];", "return [];"),
  // -- §3.11 the operator's queries, §3.18 the operator's hand
  m("refusal-query-run-out", "refuse", "the refusal query still shows a refusal that has run out",
    "return refused && refused.until > this.now ? {", "return refused ? {"),
  m("dismiss-in-use", "dismiss", "an adapter held is dismissed though a request runs on it",
    "if (!rep.idle.has(adapter)) throw new UsageError(\"NotIdleError\"",
    "if (!rep.held.has(adapter)) throw new UsageError(\"NotIdleError\""),
  m("dismiss-named", "dismiss", "an adapter the last reading names is dismissed (another router's requests may run on it)",
    "if (!rep.idle.has(adapter)) throw new UsageError(\"NotIdleError\"",
    "if (!rep.idle.has(adapter) && !(rep.named.has(adapter) && rep.held.get(adapter)?.inUse === 0)) "
      + "throw new UsageError(\"NotIdleError\""),
  m("dismiss-pinned", "dismiss", "a pinned adapter no request runs on is dismissed",
    "if (!rep.idle.has(adapter)) throw new UsageError(\"NotIdleError\"",
    "if (!rep.idle.has(adapter) && !(this.pins.has(adapter) && rep.held.get(adapter)?.inUse === 0)) "
      + "throw new UsageError(\"NotIdleError\""),
  m("dismiss-old-copy", "dismiss", "an old copy of a changed adapter no request runs on is dismissed",
    "if (!rep.idle.has(adapter)) throw new UsageError(\"NotIdleError\"",
    "if (!rep.idle.has(adapter) && !(this.old(rep, adapter) && rep.held.get(adapter)?.inUse === 0)) "
      + "throw new UsageError(\"NotIdleError\""),
  m("dismiss-adapter-checked-first", "dismiss", "adapter_dismissed checks the adapter's name before the replica",
    "const rep = this.inUse(replica);\n    if (!rep) throw new UsageError(\"UnknownReplicaError\", `replica ${replica} is not in use`);\n    if (!isName(adapter)) throw invalid(\"adapter\", adapter);",
    "if (!isName(adapter)) throw invalid(\"adapter\", adapter);\n    const rep = this.inUse(replica);\n    if (!rep) throw new UsageError(\"UnknownReplicaError\", `replica ${replica} is not in use`);"),
  m("dismiss-kept-held", "dismiss", "a dismissed adapter is unloaded but still held",
    "this.drop(rep, adapter);\n    const unload = { kind: \"unload\", replica: rep, adapter, op: null, waiters: [] };",
    "const unload = { kind: \"unload\", replica: rep, adapter, op: null, waiters: [] };"),
  // -- §3.17 changed adapters
  m("renew-hit-shortcut-old", "renew", "the hit shortcut grants an old copy of a changed adapter",
    "if (!held || this.old(rep, adapter)) return false;\n    this.highest", "if (!held) return false;\n    this.highest"),
  m("renew-hit-old", "renew", "a request is granted a hit on an old copy",
    "if (held && !this.old(rep, adapter)) { // [hit]", "if (held) { // [hit]"),
  m("renew-join-old", "renew", "a request asked after the change joins an old copy's load",
    "if (load && !this.old(rep, adapter)) { // [join]", "if (load) { // [join]"),
  m("renew-idle-kept", "renew", "an idle old copy is not unloaded at the change",
    "if (held) commands.push(...this.retire(rep, held));", ""),
  m("renew-refusal-kept", "renew", "a change does not forget the adapter's refusal",
    "this.refused.delete(adapter);\n    const commands = [];", "const commands = [];"),
  m("renew-release-idles", "renew", "an old copy's last release makes it idle instead of unloading it",
    "if (rep.unloading.has(held.adapter)) return this.retire(rep, held); // [renew]: an old copy", ""),
  m("renew-named-unloaded", "renew", "an old copy another router's requests run on is unloaded under them",
    "if (rep.named.has(held.adapter)) return this.readEngine && !rep.read ? [this.startRead(rep)] : [];", ""),
  m("renew-named-no-read", "renew", "an old copy held back by a reading reads the engine no sooner",
    "if (rep.named.has(held.adapter)) return this.readEngine && !rep.read ? [this.startRead(rep)] : [];",
    "if (rep.named.has(held.adapter)) return [];"),
  m("renew-reading-keeps", "renew", "a reading that no longer names an old copy leaves it held",
    "commands.push(...this.retire(rep, held));\n        freed = true;", "freed = true;"),
  m("renew-load-refuses", "renew", "an old copy's failed load records a refusal",
    'if (outcome === "adapter_fault" && !renewal) {', 'if (outcome === "adapter_fault") {'),
  m("renew-landed-kept", "renew", "an old copy's load lands and stays held",
    "if (renewal) commands.push(...this.retire(rep, held));", ""),
  m("renew-failed-load-strands", "renew", "the requests waiting on an old copy's failed load wait on",
    "rep.unloading.delete(load.adapter);\n        commands.push(...this.readmit(rep, renewal));", ""),
  m("renew-victim-spared", "renew", "an old copy chosen as a victim is held again when the load fails",
    "if (victim.renew) {", "if (false) {"),
  m("renew-listing-strands", "renew", "a listing without the old copy leaves its waiters waiting",
    "renewals.push(rep.unloading.get(name));\n          rep.unloading.delete(name);", ""),
  m("renew-forget-strands", "renew", "the engine saying it lacks the old copy leaves its waiters waiting",
    "if (renewal) { // [renew]: the old copy is gone", "if (false) { // [renew]: the old copy is gone"),
  m("renew-removal-forgets", "renew", "a replica removed and added back takes its old copy for a holder",
    "if (unload.op === null && !old)", "if (unload.op === null)"),
  m("renew-view-holder", "renew", "[view] counts an old copy among the holders",
    "&& !this.old(rep, adapter)) holders.add(id);", ") holders.add(id);"),
  m("renew-place-fails", "renew", "with only an old copy's replica left, placement finds no replica",
    "if (!holder && other.replica === null) {", "if (false) {"),
  m("renew-parked-assigned", "renew", "a routed request that finds only old copies' replicas is assigned to one, to wait there",
    "if (this.oldCopyWait(adapter, { replica, placed })) { // [renew]", "if (false) { // [renew]"),
  m("renew-parked-stays", "renew", "parked requests are never placed again: they wait for ever",
    "return this.parked.size > 0 ? [...commands, ...this.placeParked()] : commands;", "return commands;"),
  m("renew-parked-reversed", "renew", "parked requests are placed again last ticket first",
    "for (const route of [...routes]) {", "for (const route of [...routes].reverse()) {"),
  m("renew-pin-not-reloaded", "renew", "a pinned adapter's old copy unloaded is not loaded again",
    "if (unload.renew && this.pins.has(unload.adapter)) commands.push(...this.ensurePins());", ""),
  m("renew-share-counts", "renew", "an old copy's unload answered not_found counts as another router's adapter",
    'outcome === "not_found" && !unload.renew) rep.unseen += 1;', 'outcome === "not_found") rep.unseen += 1;'),
  // -- §3.2 answers
  m("already-loaded-fails", "load-outcome", "already_loaded is taken for a failure",
    'if (outcome === "loaded" || outcome === "already_loaded") {', 'if (outcome === "loaded") {'),
  m("load-fault-swapped", "load-outcome", "a failed load's fault is adapter for replica_fault and replica for adapter_fault",
    'const fault = outcome === "adapter_fault" ? "adapter" : "replica";',
    'const fault = outcome === "replica_fault" ? "adapter" : "replica";'),
  m("victims-unloaded-reversed", "load-outcome", "a landed load's victims are unloaded in reverse eviction order",
    "for (const unload of load.victims) commands.push(this.issueUnload(unload));",
    "for (const unload of [...load.victims].reverse()) commands.push(this.issueUnload(unload));"),
  m("failed-load-unloads-victims", "load-outcome", "a failed load's victims are unloaded anyway",
    "commands.push(...this.spare(rep, load.victims));",
    "for (const unload of load.victims) commands.push(this.issueUnload(unload));"),
  m("spared-most-recent", "load-outcome", "a spared victim goes to the end of idle, not where its stamp places it",
    "const at = idle.findIndex(([, other]) => other > stamp);", "const at = -1;"),
  m("spared-waiters-dropped", "load-outcome", "the requests waiting on a spared victim are not admitted",
    "for (const victim of victims) if (!victim.renew) commands.push(...this.readmit(rep, victim)); // a [hit]",
    ""),
  m("unload-waiters-dropped", "unload-outcome", "requests waiting on an unload are not admitted when it ends",
    "const commands = this.readmit(rep, unload); // afresh, from the top",
    "const commands = [];"),
  // -- §3.3 the end of a request
  m("release-no-queue", "release", "an adapter gone idle does not let the queue in",
    "rep.idle.set(held.adapter, this.tick()); // the end of idle: most recently used\n    return this.admitQueue(rep);",
    "rep.idle.set(held.adapter, this.tick()); // the end of idle: most recently used\n    return [];"),
  m("cancel-abandons-load", "cancel", "a load whose last waiter is cancelled is forgotten, and the queue admitted",
    "if (waited.starter === ticket) waited.starter = null;\n",
    "if (waited.starter === ticket) waited.starter = null;\n      if (waited.waiters.length === 0) {\n"
      + "        waited.replica.loading.delete(waited.adapter);\n        this.ops.delete(waited.op);\n"
      + "        return this.admitQueue(waited.replica);\n      }\n"),
  // -- §3.4 listings, time
  m("listing-keeps-unlisted", "listing", "an adapter held before the listing and not in it is kept",
    "if (!listed.has(name) && held.since < listing.started) { // in use or not",
    "if (false) { // in use or not"),
  m("listing-drops-newer", "listing", "an adapter that landed while the listing was out is dropped too",
    "if (!listed.has(name) && held.since < listing.started) { // in use or not",
    "if (!listed.has(name)) { // in use or not"),
  m("listing-added-most-recent", "listing", "adapters a listing adds go to the end of idle, not its front",
    "rep.idle = new Map([...idle, ...rep.idle]);", "rep.idle = new Map([...rep.idle, ...idle]);"),
  m("listing-not-healthy", "health", "an answered listing does not clear the replica's failures",
    "const rep = listing.replica;\n    this.healthy(rep);", "const rep = listing.replica;"),
  m("listing-interval-ignored", "listing", "setting listing_interval ignored: listings every 30 s",
    "this.interval = Number(listing_interval);", "this.interval = 30;"),
  m("time-shared-ignored", "time", "setting shared_interval ignored: a shared replica listed every listing_interval",
    "return this.sharedInterval !== null && rep.sharedUntil > this.now && !this.standingBy\n      ? this.sharedInterval\n      : this.interval;",
    "return this.interval;"),
  m("time-shared-any-foreign", "time", "any foreign reading marks the replica shared, not only one naming an adapter not held",
    "if (this.sharedInterval !== null && [...names].some(theirs)) {",
    "if (this.sharedInterval !== null && rep.foreign) {"),
  m("time-shared-by-own-unload", "time", "a reading naming an adapter this router is unloading there marks the replica shared",
    "!rep.loading.has(name) && !rep.unloading.has(name);", "!rep.loading.has(name);"),
  m("time-shared-not-sooner", "time", "a shared replica's next listing is not brought forward",
    "rep.due = Math.min(rep.due, this.now + this.intervalOf(rep));", ""),
  m("standby-ignored", "standby", "standing by changes nothing: a shared replica is listed every shared_interval",
    "&& rep.sharedUntil > this.now && !this.standingBy", "&& rep.sharedUntil > this.now"),
  m("standby-no-listings", "standby", "deciding again lists nothing at once",
    "      rep.due = this.now + this.intervalOf(rep);\n      commands.push(this.startListing(rep));\n", ""),
  m("time-due-exclusive", "time", "a listing falls due only after its time, not at it",
    ".filter((rep) => !rep.removed && rep.due <= this.now)", ".filter((rep) => !rep.removed && rep.due < this.now)"),
  m("order-due-names-reversed", "order", "replicas due at once are listed in reverse name order",
    ".sort((a, b) => a.due - b.due || byName(a.id, b.id));", ".sort((a, b) => a.due - b.due || byName(b.id, a.id));"),
  // -- §3.5 forget, §3.7 replicas and limits
  m("forget-older-copy", "forget", "a report about an older copy (its ticket's lease is another) drops the adapter",
    "if (ticket !== null && this.leases.get(ticket) !== held) return []; // a report about an older copy", ""),
  m("removal-keeps-victims", "replicas", "a removal keeps the victims whose unloads are not issued in unloading",
    "if (unload.op === null && !old) rep.unloading.delete(unload.adapter);",
    ""),
  m("removed-fails-unordered", "replicas", "a removal fails its waiting requests not in ticket order",
    "const commands = failed.sort(byTicket).map((ticket) => {", "const commands = failed.map((ticket) => {"),
  m("limit-every-model", "limit", "a limit is set on the replicas of every model",
    "if (rep.removed || rep.model !== model) continue;", "if (rep.removed) continue;"),
  // -- §3.8 health, blame
  m("backoff-not-doubled", "health", "the backoff does not double with each failure",
    "const wait = this.backoff * 2 ** Math.min(rep.failures - 1, 32);", "const wait = this.backoff;"),
  m("backoff-ignored", "health", "setting backoff ignored: the default 5 s",
    "this.backoff = Number(backoff);", "this.backoff = 5;"),
  m("max-backoff-ignored", "health", "setting max_backoff ignored: the backoff grows without bound",
    "rep.avoidUntil = this.now + Math.min(wait, this.maxBackoff);", "rep.avoidUntil = this.now + wait;"),
  m("blame-the-server", "blame", "the replica that served the request is blamed with those that failed it",
    "if (rep && id !== replica) this.failure(rep);", "if (rep) this.failure(rep);"),
  // -- §3.10 pins
  m("pin-goes-idle", "pin", "a pinned adapter released by its last request goes idle (evictable)",
    "if (this.pins.has(held.adapter)) return []; // [pin]: never idle", ""),
  m("pin-over-unloading", "pin", "a pin's load may go where the adapter is being unloaded",
    "const skip = inUse.filter((rep) => rep.unloading.has(adapter) || holders.includes(rep)).map((rep) => rep.id);",
    "const skip = holders.map((rep) => rep.id);"),
  m("pin-counts-avoided", "pin", "a copy on a failing replica counts toward the pin's copies",
    "const have = holders.filter((rep) => !this.avoided(rep) && ofModel(rep));",
    "const have = holders.filter((rep) => ofModel(rep));"),
  // -- §3.12 place, load
  m("place-spread-full", "place", "a spread load takes replicas up to their whole capacity, not three quarters",
    "4 * busy(rep) < 3 * capacity;", "busy(rep) < capacity;"),
  m("place-saturated-past-full", "load", "a holder is saturated only past its capacity, not at it",
    "if (holder && !(capacity !== null && busy(holder) >= capacity)) return atHolder(holder);",
    "if (holder && !(capacity !== null && busy(holder) > capacity)) return atHolder(holder);"),
  m("place-queue-margin", "place", "a holder's queue of one sends the request to an engine with none",
    "if (mine !== null && theirs === 0 && mine >= 2) return other;",
    "if (mine !== null && theirs === 0 && mine >= 1) return other;"),
  m("place-spill-to-a-queue", "place", "a saturated holder's request goes to an engine whose queue is 2 shorter, queueing there too",
    "if (mine !== null && theirs === 0 && mine >= 2) return other;",
    "if (mine !== null && theirs !== null && theirs + 2 <= mine) return other;"),
  m("overflow-ignored", "place", "setting overflow ignored: a replica at its line with nothing idle is never 'over'",
    "return count < line + this.overflow ? 1 : 3;", "return count < line ? 1 : 3;"),
  m("concurrency-ignored", "load", "setting concurrency ignored: capacity only as readings show it",
    "return this.concurrency ?? rep.seqs;", "return rep.seqs;"),
  m("load-others-include-ours", "load", "a reading's running and waiting are all counted as other routers'",
    "rep.others = Math.max(0, run + wait - read.inFlight);", "rep.others = Math.max(0, run + wait);"),
  m("load-seqs-from-last", "load", "a reading with a queue sets the capacity to what runs now, lowering an earlier one's",
    "if (wait > 0) rep.seqs = Math.max(rep.ran, rep.seqs ?? 1);", "if (wait > 0) rep.seqs = Math.max(run, 1);"),
  m("place-victim-demand-ignored", "place", "replicas that would evict compare their victims' idle stamps alone",
    "return [2, busy, this.weight(victim), Math.max(0, rep.idle.get(victim)), ...last.slice(1)];",
    "return [2, busy, 0, Math.max(0, rep.idle.get(victim)), ...last.slice(1)];"),
  // -- §3.14 share
  m("routers-ignored", "share", "setting routers ignored: one router",
    "this.routers = Number(routers);", "this.routers = 1;"),
  m("share-floor", "share", "this router's share of the free slots rounds down, not up",
    "rep.base + Math.ceil(free / this.routers)", "rep.base + Math.floor(free / this.routers)"),
  m("share-not-found-unseen", "share", "an unload another router answered first does not lower the line",
    "if (this.routers > 1 && outcome === \"not_found\" && !unload.renew) rep.unseen += 1;",
    ""),
  m("share-not-found-evicts", "share", "an unload another router answered first unloads down to the lowered line",
    "if (this.routers > 1 && outcome === \"not_found\" && !unload.renew) rep.unseen += 1;\n    const commands = this.readmit(rep, unload); // afresh, from the top",
    "const commands = [];\n    if (this.routers > 1 && outcome === \"not_found\" && !unload.renew) {\n      rep.unseen += 1;\n      commands.push(...this.unloadExcess(rep));\n    }\n    commands.push(...this.readmit(rep, unload));"),
  // -- §3.15 read, reading, read-failed, route
  m("read-engine-ignored", "read", "setting read_engine ignored: engines are never read",
    "this.readEngine = read_engine;", "this.readEngine = false;"),
  m("read-one-late", "read", "a cold request waits for a reading only once the count alone passes the line",
    "return this.wantsReading(rep) && rep.held.size + rep.loading.size + 1 > this.line(rep);",
    "return this.wantsReading(rep) && rep.held.size + rep.loading.size > this.line(rep);"),
  m("read-at-the-bound", "read", "a cold request waits for a reading only past line + headroom (never without a cap)",
    "return this.wantsReading(rep) && rep.held.size + rep.loading.size + 1 > this.line(rep);",
    "return this.wantsReading(rep) && rep.held.size + rep.loading.size + 1 > this.line(rep) + "
      + "(this.headroom ?? Infinity);"),
  m("read-after-listing-skipped", "read", "a listing answered does not start a read (step 6)",
    "if (this.readEngine && !rep.read) commands.push(this.startRead(rep)); // [read], step 6", ""),
  m("reading-own-requests-named", "reading", "a reading that names only our own running requests stands as it is",
    "if (!rep.foreign) names = new Set();", ""),
  m("read-failed-kept", "read-failed", "a failed read after a listing keeps the last reading",
    "const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];", "const commands = [];"),
  m("place-victim-before-busy", "place", "replicas that would evict are ranked by their victims' demand before how busy they are",
    "return [2, busy, this.weight(victim), Math.max(0, rep.idle.get(victim)), ...last.slice(1)];",
    "return [2, this.weight(victim), Math.max(0, rep.idle.get(victim)), ...last];"),
  m("place-base-no-turn", "place-base", "equal replicas do not take turns: the first in id order takes every tie",
    "(((i - first) % ids.length) + ids.length) % ids.length]", "i]"),
  m("place-base-healthy-ignored", "place-base", "a replica the router knows healthy is passed over while avoided",
    "(this.avoided(rep) && !healthy.includes(id))", "this.avoided(rep)"),
  m("place-base-no-load", "place-base", "the router's own base-model requests are not counted",
    "const key = [this.load(rep) + Number(load[id] ?? 0),", "const key = [this.load(rep),"),
  m("route-now-after", "route", "a routed request's clock is set after it is placed, not before",
    ["const commands = now === null ? [] : this.timeAdvanced({ now });\n    this.highest = ticket;\n    return [...commands, ...this.placeRoute({ ticket, adapter, path, model, exclude, read: new Set() })];"],
    ["this.highest = ticket;\n    const placed = this.placeRoute({ ticket, adapter, path, model, exclude, read: new Set() });\n    return [...(now === null ? [] : this.timeAdvanced({ now })), ...placed];"]),
  m("route-now-ignored", "route", "a routed request's clock is not read",
    "const commands = now === null ? [] : this.timeAdvanced({ now });", "const commands = [];"),
  m("route-stale-not-read", "route", "a routed request on a replica with a stale reading does not ask for one",
    "if (this.stale(rep)) commands.push(this.startRead(rep)); // [read]: nothing waits for it", ""),
  // -- §3.8 queries
  m("view-room-at-line", "view", "a replica at its line counts as having room",
    "if (rep.held.size + rep.loading.size < this.line(rep) && !this.avoided(rep)) withRoom.add(id);",
    "if (rep.held.size + rep.loading.size <= this.line(rep) && !this.avoided(rep)) withRoom.add(id);"),
  // -- engine's memory: each waited in WANTING until tests/rules/test_engine_memory.py played its scenario
  m("half-life-ignored", "place", "setting half_life ignored: demand counts are never halved",
    "if (this.requests % this.halfLife === 0) {", "if (false) {",
    "half_life 1; r and q, limit 1 each, listed empty; x requested, loaded and released on r; y pinned "
      + "(loads on q, free), landed, unpinned (idle on q, a later stamp, demand 0); place z: r (every demand "
      + "halved to 0, x idle longer), not q (x's one request unhalved)"),
  m("settle-before-victims", "load-outcome", "a landed load settles before its victims' unloads go out",
    "for (const unload of load.victims) commands.push(this.issueUnload(unload));\n      if (renewal) commands.push(...this.retire(rep, held));\n      commands.push(...this.settle(rep));",
    "commands.push(...this.settle(rep));\n      for (const unload of load.victims) commands.push(this.issueUnload(unload));\n      if (renewal) commands.push(...this.retire(rep, held));",
    "r, limit 2, listed [a, b]; c requested (victim a); limit_set 1; c lands: grant, issue_unload a (the "
      + "victim), then issue_unload b ([settle]), not b then a"),
  m("spared-since-now", "load-outcome", "a spared victim is held again as of now, not of its noted since",
    "rep.held.set(adapter, { replica: rep, adapter, inUse: 0, since, current: true });",
    "rep.held.set(adapter, { replica: rep, adapter, inUse: 0, since: this.tick(), current: true });",
    "r, limit 1, listed [a]; time_advanced 30 (listing 2 out); b requested (victim a); b's load fails; "
      + "listing 2 received []: a, held since before it started, is dropped (statistics: held {})"),
  m("listing-stamps-zero", "listing", "adapters a listing adds all take the idle stamp 0",
    "const idle = front.map((name, i) => [name, rep.front - (front.length - i)]);",
    "const idle = front.map((name) => [name, 0]);",
    "r, limit 2, listed [a, b]; c requested (victim a); c's load fails (a back at the front, stamp -2 < "
      + "b's -1); d requested and landed: it unloads a, not b"),
  m("listing-stamps-name-order", "listing", "adapters a listing adds take front - 1, front - 2... in name order",
    "const idle = front.map((name, i) => [name, rep.front - (front.length - i)]);",
    "const idle = front.map((name, i) => [name, rep.front - (i + 1)]);",
    "as listing-stamps-zero: with a at -1 and b at -2, the spared a goes after b and d's load unloads b"),
  m("listing-front-not-kept", "listing", "each listing counts its adapters' stamps down from 0 again",
    "rep.front -= front.length;", "",
    "r, limit 2, listed [a], then at 30 listed [a, b] (b at -2, front of idle); c requested (victim b); "
      + "c's load fails; d requested and landed: it unloads b (back before a at -1), not a"),
  m("cap-batch-only-with-victim", "cap", "the batch clause holds a load only while an idle adapter is left to take",
    "return rep.maxLoras !== null && rep.held.size + rep.loading.size >= this.line(rep) && occupied > rep.maxLoras;",
    "return rep.maxLoras !== null && rep.idle.size > 0 && rep.held.size + rep.loading.size >= this.line(rep)"
      + " && occupied > rep.maxLoras;",
    "headroom 1, read_engine; r limit 2, listed []; a reading says max_loras 1; a and b requested, landed, both "
      + "still running; c requested: queued (count 2 at the line, 2 in use > max_loras 1), not loaded past the "
      + "line. Only headroom >= 1 shows it: at 0, occupied >= cap already holds the load"),
  m("place-served-first", "place", "placement compares requests served before how busy a replica is",
    "const least = (rep) => [busy(rep), rep.served, -rendezvous(adapter, rep.id)];",
    "const least = (rep) => [rep.served, busy(rep), -rendezvous(adapter, rep.id)];",
    "r and q, limit 2, both listed [a]; two requests for a on r, released; one on q, still running; place "
      + "a: r (busy 0 before served 2), not q"),
  m("place-listed-stamp-negative", "place", "a listed victim's stamp below 0 is compared as it is, not as 0",
    "Math.max(0, rep.idle.get(victim))", "rep.idle.get(victim)",
    "r limit 1 listed [a] (stamp -1), q limit 2 listed [b, c] (b at -2); place y (or u), whose weight "
      + "prefers r: r, as both victims' stamps read as 0, not q"),
  // -- issue 37: one or more per clause of §3.8-3.15 and the readings no vector pinned before
  // §1.3 demand counting
  m("demand-refused-uncounted", "place", "a refused request does not count toward its adapter's demand",
    "this.count(rep, adapter);\n    const refused = this.refused.get(adapter);",
    "const refused = this.refused.get(adapter);\n    if (refused && !rep.held.has(adapter) && refused.until > this.now) "
      + "{ rep.inFlight += 1; rep.served += 1; } else this.count(rep, adapter);"),
  m("demand-hit-shortcut-uncounted", "place", "a hit through the shortcut does not count toward demand",
    "this.highest = ticket;\n    this.count(rep, adapter);\n    this.take(ticket, held);",
    "this.highest = ticket;\n    rep.inFlight += 1;\n    rep.served += 1;\n    this.take(ticket, held);"),
  m("demand-routed-uncounted", "route", "a routed request assigned does not count toward demand",
    "this.count(rep, adapter);\n    const commands = [{ type: \"assign\"",
    "rep.inFlight += 1;\n    rep.served += 1;\n    const commands = [{ type: \"assign\""),
  m("half-life-default", "place", "the default half_life is 250, not 500",
    "half_life = 500n", "half_life = 250n"),
  m("demand-weight-is-count", "place", "a victim's demand weight is its count, not the count's bit length",
    "return n === 0 ? 0 : Math.floor(Math.log2(n)) + 1; // the bit length", "return n;"),
  // §3.8 health, blame, refuse
  m("replica-failed-ignored", "health", "replica_failed is no failure",
    "if (rep) this.failure(rep);\n    return [];\n  }\n\n  // [blame]: each", "return [];\n  }\n\n  // [blame]: each"),
  m("listing-failed-no-failure", "health", "a failed listing is no failure of the replica",
    "listing.replica.droppedWhileListing = new Set();\n    this.failure(listing.replica);",
    "listing.replica.droppedWhileListing = new Set();"),
  m("replica-fault-no-failure", "health", "a load answered replica_fault is no failure of the replica",
    'if (outcome === "replica_fault") this.failure(rep);', 'if (false) this.failure(rep);'),
  m("load-answer-not-healthy", "health", "a load answered otherwise does not clear the replica's failures",
    "    else this.healthy(rep);\n", ""),
  m("blame-counts-duplicates", "blame", "served_elsewhere blames a replica named twice twice",
    "for (const id of [...new Set(failed)].sort(byName)) {", "for (const id of [...failed].sort(byName)) {"),
  m("blame-any-failed", "blame", "blame says request whenever any replica failed before, the same one included",
    'return failed.some((id) => id !== replica) ? "request" : "replica";',
    'return failed.length > 0 ? "request" : "replica";'),
  m("blame-served-is-an-answer", "blame", "the replica that served the request counts as answering (its failures cleared)",
    "for (const id of [...new Set(failed)].sort(byName)) {",
    "if (this.inUse(replica)) this.healthy(this.inUse(replica));\n    for (const id of [...new Set(failed)].sort(byName)) {"),
  m("refuse-not-on-route", "refuse", "a routed request is placed and loads a refused adapter",
    "if (refused.until > this.now) { // [refuse]\n", "if (false) { // [refuse]\n"),
  m("refuse-route-holder-too", "refuse", "a routed request for a refused adapter fails even where it is held",
    "if (refused && !rep.held.has(adapter)) {\n      if (refused.until > this.now) { // [refuse]\n",
    "if (refused) {\n      if (refused.until > this.now) { // [refuse]\n"),
  m("refuse-on-replica-fault", "refuse", "a load answered replica_fault records a refusal too",
    "if (outcome === \"adapter_fault\" && !renewal) { // [refuse]",
    "if (outcome !== \"loaded\" && outcome !== \"already_loaded\" && !renewal) { // [refuse]"),
  m("refuse-route-not-after-read", "route", "a routed request placed again after a read does not look at refusals",
    "if (refused && !rep.held.has(adapter)) {\n      if (refused.until > this.now) { // [refuse]\n",
    "if (refused && !rep.held.has(adapter) && route.read.size === 0) {\n      if (refused.until > this.now) { // [refuse]\n"),
  // §3.9 cap: what admits the queue, and what does not
  m("cap-queue-head-held-waits", "cap", "a queue head whose adapter is held waits at the cap too",
    "const known = rep.held.has(adapter) || rep.loading.has(adapter) || rep.unloading.has(adapter);",
    "const known = false;"),
  m("cap-listing-no-queue", "cap", "a listing received does not admit the queue",
    "commands.push(...this.admitQueue(rep), ...this.ensurePins());", "commands.push(...this.ensurePins());"),
  m("cap-forget-no-queue", "cap", "an adapter_missing that drops an adapter does not admit the queue",
    "return [...commands, ...this.admitQueue(rep), ...(this.pins.has(adapter)",
    "return [...commands, ...(this.pins.has(adapter)"),
  m("cap-unpin-no-queue", "cap", "an unpin that leaves an adapter idle does not admit the queue",
    "rep.idle.set(adapter, this.tick()); // evictable again, most recently used\n        commands.push(...this.admitQueue(rep));",
    "rep.idle.set(adapter, this.tick()); // evictable again, most recently used"),
  m("cap-limit-set-no-queue", "cap", "limit_set does not admit the queues",
    "rep.limit = Number(limit);\n      commands.push(...this.admitQueue(rep));", "rep.limit = Number(limit);"),
  m("cap-readd-no-queue", "cap", "replica_added for a replica in use does not admit its queue",
    "rep.limit = Number(limit);\n      return this.admitQueue(rep);", "rep.limit = Number(limit);\n      return [];"),
  m("cap-load-answer-no-queue", "cap", "a load answered does not admit the queue",
    "    commands.push(...this.admitQueue(rep));\n    if (outcome === \"adapter_fault\"", "    if (outcome === \"adapter_fault\""),
  m("cap-reading-frees-no-queue", "cap", "a reading that frees an adapter does not admit the queue",
    "return freed ? [...commands, ...this.admitQueue(rep)] : commands;",
    "return commands;"),
  m("cap-raised-max-loras-no-queue", "cap", "a reading that raises max_loras does not admit the queue",
    "if (raised) commands.push(...this.admitQueue(rep)); // [cap]: the cap may have risen with it\n", ""),
  m("cap-raised-after-settle", "cap", "the queue admitted for a raised max_loras comes after the pending settle",
    "if (raised) commands.push(...this.admitQueue(rep)); // [cap]: the cap may have risen with it\n"
      + "    return [...commands, ...this.settled(rep), ...this.unpark(read)];",
    "commands.push(...this.settled(rep));\n    if (raised) commands.push(...this.admitQueue(rep));\n"
      + "    return [...commands, ...this.unpark(read)];"),
  m("cap-unload-admits-queue", "cap", "an unload's answer admits the queue",
    "const commands = this.readmit(rep, unload); // afresh, from the top",
    "const commands = this.readmit(rep, unload); // afresh, from the top\n    commands.push(...this.admitQueue(rep));"),
  m("cap-cancel-admits-queue", "cap", "a cancel of a queued ticket admits the queue",
    "waited.waiters = waited.waiters.filter((w) => w.ticket !== ticket);\n    }\n    return [];",
    "waited.waiters = waited.waiters.filter((w) => w.ticket !== ticket);\n      if (waited.kind === \"queue\") "
      + "return this.admitQueue(waited.replica);\n    }\n    return [];"),
  m("cap-pinned-release-admits-queue", "cap", "a release of a pinned adapter admits the queue",
    "if (this.pins.has(held.adapter)) return []; // [pin]: never idle",
    "if (this.pins.has(held.adapter)) return this.admitQueue(rep); // [pin]: never idle"),
  m("cap-named-release-admits-queue", "cap", "a release of an adapter the reading names admits the queue",
    "if (this.readEngine && rep.queue.waiters.length > 0 && !rep.read) return [this.startRead(rep)];\n      return [];",
    "if (this.readEngine && rep.queue.waiters.length > 0 && !rep.read) return [this.startRead(rep)];\n"
      + "      return this.admitQueue(rep);"),
  m("cap-zero-max-loras-replaces", "cap", "a reading's max_loras of 0 replaces the known one",
    "if (max_loras !== null && max_loras > 0n) rep.maxLoras = Number(max_loras);",
    "if (max_loras !== null) rep.maxLoras = Number(max_loras);"),
  // §3.10 pins
  m("pin-not-on-time", "pin", "time passing does not make the pins good",
    "return [...commands, ...this.ensurePins()]; // replicas back from their backoff", "return commands;"),
  m("pin-not-on-listing-failed", "pin", "a failed listing does not make the pins good",
    "return [...this.met(listing.replica), ...this.ensurePins()];", "return this.met(listing.replica);"),
  m("pin-not-on-load-fault", "pin", "a failed load does not make the pins good",
    'if (outcome === "adapter_fault" || outcome === "replica_fault") commands.push(...this.ensurePins());', ""),
  m("pin-not-on-forget", "pin", "an adapter_missing that drops a pinned adapter does not make the pins good",
    "...(this.pins.has(adapter) ? this.ensurePins() : [])", "...[]"),
  m("pin-not-on-removal", "pin", "a removal does not make the pins good",
    "return [...commands, ...this.ensurePins()];\n  }\n\n  forgetIfDone", "return commands;\n  }\n\n  forgetIfDone"),
  m("pin-goes-over", "pin", "a pin loads where placement says over, not only free or evict",
    'if (placed !== "free" && placed !== "evict") break;', 'if (placed === "wait") break;'),
  m("pin-model-ignored", "pin", "a pin's model is ignored where its copies are counted",
    "const ofModel = (rep) => pin.model === null || rep.model === pin.model;", "const ofModel = () => true;"),
  m("pin-placed-any-model", "pin", "a pin's copies are placed on replicas of any model",
    "this.placeCold(adapter, { model: pin.model, exclude: skip })", "this.placeCold(adapter, { model: null, exclude: skip })"),
  m("pin-stays-idle", "pin", "pinning leaves the adapter in idle where it is held",
    "for (const rep of this.replicas.values()) if (!rep.removed) rep.idle.delete(adapter);", ""),
  m("pin-refusal-ignored", "pin", "a refused pinned adapter is loaded anyway",
    "continue; // [refuse]", "{} // [refuse]"),
  m("pin-names-reversed", "pin", "pins are made good in reverse name order",
    "for (const adapter of [...this.pins.keys()].sort(byName)) {",
    "for (const adapter of [...this.pins.keys()].sort(byName).reverse()) {"),
  m("unpin-not-idle", "pin", "an unpinned adapter no request runs on stays out of idle",
    "rep.idle.set(adapter, this.tick()); // evictable again, most recently used", "// (not idle)"),
  m("cap-engine-queue-ignored", "cap", "a load takes a victim while the engine queues requests",
    "if (full && capacity !== null && rep.granted + rep.others > capacity) return true;", ""),
  m("cap-engine-queue-counts-waiting", "cap", "the engine's queue counts the requests waiting in the machine",
    "if (full && capacity !== null && rep.granted + rep.others > capacity) return true;",
    "if (full && capacity !== null && rep.inFlight + rep.others > capacity) return true;"),
  m("cap-drained-never-admits", "cap", "a release that empties the engine's queue, its adapter in use, admits nothing",
    "if (!rep.removed && capacity !== null && rep.granted + rep.others === capacity) return this.admitQueue(rep);",
    ""),
  m("reading-ended-is-foreign", "reading", "an adapter whose request ended while the read was out counts as another router's",
    "!(rep.held.get(name)?.inUse > 0 || ended.has(name))",
    "!(rep.held.get(name)?.inUse > 0)"),
  m("warm-never-lifts", "warm", "a pin until held is kept once a copy lands",
    "if (!pin || !pin.untilHeld || (pin.model !== null && pin.model !== rep.model)) return [];",
    "return [];"),
  m("warm-any-model", "warm", "a copy on a replica of another model lifts a pin until held",
    "if (!pin || !pin.untilHeld || (pin.model !== null && pin.model !== rep.model)) return [];",
    "if (!pin || !pin.untilHeld) return [];"),
  m("warm-over-held", "warm", "a pin until held is made where a copy is held already",
    "if (untilHeld && (this.pins.has(adapter) || this.holds(adapter, model))) return [];",
    "if (untilHeld && this.pins.has(adapter)) return [];"),
  m("warm-over-pin", "warm", "a pin until held replaces a pin of the adapter",
    "if (untilHeld && (this.pins.has(adapter) || this.holds(adapter, model))) return [];",
    "if (untilHeld && this.holds(adapter, model)) return [];"),
  m("warm-not-by-listing", "warm", "a listing that shows a copy does not lift a pin until held",
    "for (const name of added) commands.push(...this.warmed(rep, name));", ""),
  // §3.11 queries
  m("view-holders-held-only", "view", "a replica loading the adapter is no holder in a view",
    "if ((rep.held.has(adapter) || rep.loading.has(adapter)) && !this.old(rep, adapter)) holders.add(id);",
    "if (rep.held.has(adapter) && !this.old(rep, adapter)) holders.add(id);"),
  m("view-avoided-has-room", "view", "an avoided replica has room in a view",
    "< this.line(rep) && !this.avoided(rep)) withRoom.add(id);", "< this.line(rep)) withRoom.add(id);"),
  m("view-unknown-no-room", "view", "a replica not in use has no room in a view",
    "withRoom.add(id);\n        continue;", "continue;"),
  m("statistics-waiting-no-reads", "statistics", "waiting counts no ticket waiting for a read",
    "waiting: this.waiting.size,", 'waiting: [...this.waiting.values()].filter((w) => w.kind !== "read").length,'),
  m("statistics-failing-past", "statistics", "failing_until shows a backoff already over",
    "failing_until: this.avoided(rep) ? rep.avoidUntil : null,", "failing_until: rep.avoidUntil || null,"),
  m("reading-load-ours-only", "load", "the reading query's load is this router's requests alone",
    "load: this.load(rep), capacity", "load: rep.inFlight, capacity"),
  // §3.12 load, place
  m("load-others-negative", "load", "others may go below 0",
    "rep.others = Math.max(0, run + wait - read.inFlight);", "rep.others = run + wait - read.inFlight;"),
  m("load-others-current", "load", "others are taken against this router's in-flight now, not as the read went out",
    "rep.others = Math.max(0, run + wait - read.inFlight);", "rep.others = Math.max(0, run + wait - rep.inFlight);"),
  m("load-calm-current", "load", "calm is taken with this router's in-flight now, not as the read went out",
    "else rep.calm = Math.max(rep.calm, read.inFlight + rep.others);", "else rep.calm = Math.max(rep.calm, rep.inFlight + rep.others);"),
  m("load-ran-lowered", "load", "a later reading lowers ran",
    "rep.ran = Math.max(rep.ran, run);", "rep.ran = run;"),
  m("load-calm-lowered", "load", "a later reading lowers calm",
    "else rep.calm = Math.max(rep.calm, read.inFlight + rep.others);", "else rep.calm = read.inFlight + rep.others;"),
  m("load-read-served-now", "read", "read_served is the served count when the answer comes, not when the read went out",
    "rep.readServed = read.served;", "rep.readServed = rep.served;"),
  m("place-saturated-at-capacity", "place", "a holder is saturated at its capacity, not past it",
    "return capacity === null ? null : Math.max(0, busy(rep) - capacity);",
    "return capacity === null ? null : Math.max(0, busy(rep) + 1 - capacity);"),
  m("place-spread-floor", "place", "the spread bound rounds three quarters down (an engine of 1 takes no copy)",
    "4 * busy(rep) < 3 * capacity;", "busy(rep) < Math.floor((3 * capacity) / 4);"),
  m("place-spread-floor-1", "place", "the spread bound rounds three quarters down, at least 1 (an engine of 2 running 1 takes no copy)",
    "4 * busy(rep) < 3 * capacity;", "busy(rep) < Math.max(1, Math.floor((3 * capacity) / 4));"),
  m("place-step2-takes-wait", "place", "step 2 takes replicas at their cap (kind 4) too",
    "if (this.coldKind(rep) === 4) return false;", ""),
  m("place-step3-full-key", "place", "step 3 compares the full cold key, not (at its cap, busy, served, -weight)",
    "if (least) return [kind === 4, ...last];", ""),
  m("place-holder-held-only", "place", "a replica loading the adapter is no holder",
    "const holders = this.candidates(model, exclude)\n      .filter((rep) => (rep.held.has(adapter) || rep.loading.has(adapter)) && !this.old(rep, adapter));",
    "const holders = this.candidates(model, exclude)\n      .filter((rep) => rep.held.has(adapter) && !this.old(rep, adapter));"),
  m("place-unmet-candidates", "place", "a replica not yet met is a candidate",
    "(rep) => !rep.removed && rep.met && !this.avoided(rep)", "(rep) => !rep.removed && !this.avoided(rep)"),
  m("place-avoided-candidates", "place", "an avoided replica is a candidate",
    "(rep) => !rep.removed && rep.met && !this.avoided(rep)", "(rep) => !rep.removed && rep.met"),
  m("place-model-ignored", "place", "placement ignores the model",
    "&& (model === null || rep.model === model),", "&& true,"),
  m("place-free-at-line", "place", "a replica at its line counts as having a free slot",
    "if (count < line) return 0;", "if (count <= line) return 0;"),
  m("place-caller-load-ignored", "place", "the caller's load figures are ignored in the holder step",
    "const busy = (rep) => this.load(rep) + Number(load[rep.id] ?? 0);\n    const least", "const busy = (rep) => this.load(rep);\n    const least"),
  // §3.13 reading, read-failed
  m("reading-foreign-ignores-others", "reading", "a reading counting other routers' requests is not foreign by that alone",
    "rep.foreign = others || [...names]", "rep.foreign = [...names]"),
  m("reading-frees-reversed", "reading", "a reading frees the adapters it no longer names in reverse name order",
    "for (const name of [...before].filter((n) => !rep.named.has(n)).sort(byName)) {",
    "for (const name of [...before].filter((n) => !rep.named.has(n)).sort(byName).reverse()) {"),
  m("reading-frees-pinned", "reading", "a reading frees a pinned adapter into idle",
    "} else if (!this.pins.has(name)) {",
    "} else {"),
  m("reading-named-stay-idle", "reading", "the adapters a reading names stay in idle",
    "for (const name of rep.named) rep.idle.delete(name);", ""),
  m("reading-waiters-before-settle", "reading", "a reading admits the read's waiters before the pending settle",
    "if (raised) commands.push(...this.admitQueue(rep)); // [cap]: the cap may have risen with it\n"
      + "    return [...commands, ...this.settled(rep), ...this.unpark(read)];",
    "if (raised) commands.push(...this.admitQueue(rep)); // [cap]: the cap may have risen with it\n"
      + "    return [...commands, ...this.unpark(read), ...this.settled(rep)];"),
  m("read-failed-no-settle", "read-failed", "a failed read leaves a pending settle pending",
    "const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];\n"
      + "    return [...commands, ...this.settled(rep), ...this.unpark(read)];",
    "const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];\n"
      + "    return [...commands, ...this.unpark(read)];"),
  m("read-failed-clears-names", "read-failed", "a failed read clears names_adapters",
    "const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];",
    "rep.namesAdapters = false;\n    const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];"),
  m("listing-idles-named", "listing", "a listing puts the adapters the last reading names in idle",
    "const front = added.filter((name) => this.idleable(rep, name));", "const front = added;"),
  m("removal-keeps-settle", "replicas", "a removal keeps a pending settle",
    "foreign: false, settle: false,\n", "foreign: false,\n"),
  m("removal-keeps-max-loras", "replicas", "a removal keeps max_loras",
    "maxLoras: null, sampled: null,\n      });", "sampled: null,\n      });"),
  m("removal-keeps-ran", "replicas", "a removal keeps ran",
    "ran: 0, calm: 0, maxLoras: null, sampled: null,\n      });", "calm: 0, maxLoras: null, sampled: null,\n      });"),
  m("removal-keeps-named", "replicas", "a removal keeps what the last reading named",
    "named: new Set(), listedSinceReading: false, namesAdapters: false", "listedSinceReading: false, namesAdapters: false"),
  // §3.14 share
  m("share-base-kept-on-readd", "share", "a replica added back keeps its old base",
    "rep.base = rep.held.size + rep.loading.size; // [share]: what it is known to hold, shared afresh\n", ""),
  m("share-base-without-loads", "share", "a listing's base leaves out the loads still out",
    "rep.base = rep.held.size + rep.loading.size; // [share]: the free slots it leaves, shared afresh",
    "rep.base = rep.held.size;"),
  m("share-forget-not-unseen", "share", "an adapter_missing that drops an adapter does not lower the line",
    "if (this.routers > 1) rep.unseen += 1; // [share]: as an unload another router answered first", ""),
  m("share-unseen-kept-by-listing", "share", "a listing does not reset unseen",
    "rep.unseen = 0;\n    rep.listedSinceReading = true;", "rep.listedSinceReading = true;"),
  m("share-no-floor", "share", "the line may fall below 1",
    "return Math.max(1, (free <= 0 ? rep.limit : rep.base + Math.ceil(free / this.routers)) - rep.unseen);",
    "return (free <= 0 ? rep.limit : rep.base + Math.ceil(free / this.routers)) - rep.unseen;"),
  // §3.15 read, route
  m("read-waiters-reversed", "read", "a read's waiters go on in reverse arrival order",
    "for (const { ticket, adapter, path, route } of read.waiters) {",
    "for (const { ticket, adapter, path, route } of [...read.waiters].reverse()) {"),
  m("read-first-not-awaited", "read", "a replica whose first read is on its way does not want a reading",
    "return rep.namesAdapters ? rep.foreign : rep.read !== null;", "return rep.namesAdapters && rep.foreign;"),
  m("stale-after-five", "read", "a foreign replica is stale after 5 requests since its reading, not 4",
    "rep.served - rep.readServed >= 4", "rep.served - rep.readServed >= 5"),
  m("stale-at-calm", "read", "a replica is stale at its calm load, not above it",
    "this.load(rep) > rep.calm;", "this.load(rep) >= rep.calm;"),
  m("stale-capacity-known", "read", "a replica of known capacity is stale above its calm load too",
    "return rep.sampled !== null && this.capacity(rep) === null && this.load(rep) > rep.calm;",
    "return rep.sampled !== null && this.load(rep) > rep.calm;"),
  m("stale-without-names", "read", "a replica whose engine names nothing is stale too",
    "if (!this.readEngine || !rep.namesAdapters || rep.read !== null) return false;",
    "if (!this.readEngine || rep.read !== null) return false;"),
  m("route-reads-again", "route", "a routed request reads a replica again each time it is placed there",
    "if (full && !route.read.has(replica) && this.needsReading(rep)) {", "if (full && this.needsReading(rep)) {"),
  m("route-read-by-record", "route", "a placement record's read holds replica records, not ids",
    ["if (full && !route.read.has(replica) && this.needsReading(rep)) {\n      route.read.add(replica);"],
    ["if (full && !route.read.has(rep) && this.needsReading(rep)) {\n      route.read.add(rep);"]),
  m("route-reads-before-evict-only", "route", "a routed request reads only before an eviction, not before over or wait",
    'const full = placed === "evict" || placed === "over" || placed === "wait";', 'const full = placed === "evict";'),
  m("route-removal-fails-routed", "route", "a removal fails the routed requests waiting for its read",
    "if (waiter.route === null) failed.push(waiter.ticket);", "if (true) failed.push(waiter.ticket);"),
  m("route-removal-pins-first", "route", "a removal makes the pins good before placing routed requests again",
    "for (const route of placeAgain.sort((a, b) => byTicket(a.ticket, b.ticket))) {\n      commands.push(...this.placeRoute(route));\n    }\n"
      + "    return [...commands, ...this.ensurePins()];",
    "commands.push(...this.ensurePins());\n    for (const route of placeAgain.sort((a, b) => byTicket(a.ticket, b.ticket))) {\n"
      + "      commands.push(...this.placeRoute(route));\n    }\n    return commands;"),
  m("route-stale-read-first", "route", "the read of a stale replica goes out before the assign",
    'if (this.stale(rep)) commands.push(this.startRead(rep)); // [read]: nothing waits for it',
    'if (this.stale(rep)) commands.unshift(this.startRead(rep)); // [read]: nothing waits for it'),
  // [settle], issue 31's rules
  m("settle-empty-idle-reads", "settle", "a landed load over the line with nothing idle still settles (reads or waits)",
    "if (rep.held.size <= this.line(rep) || rep.idle.size === 0) return [];", "if (rep.held.size <= this.line(rep)) return [];"),
  m("settle-never-waits", "settle", "a landed load's excess is unloaded at once even where another router runs",
    "if (this.wantsReading(rep)) {\n      rep.settle = true;", "if (false) {\n      rep.settle = true;"),
  m("settle-counts-loads", "settle", "settle counts the loads still out with the adapters held",
    "for (let excess = rep.held.size - this.line(rep);", "for (let excess = rep.held.size + rep.loading.size - this.line(rep);"),
];

// Mutants no vector catches yet, each a real misreading of SPEC (not equivalent: a scenario, its sixth
// argument, shows the port and the mutant differ). Each waits for the hand vector that scenario describes,
// then moves up into MUTANTS.
//   node vectors/port/mutants.mjs --wanting
export const WANTING = [];

function main(argv) {
  let only = null;
  let wanting = false;
  const folders = [];
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--wanting") wanting = true;
    else if (argv[i] === "--only") {
      only = new Set();
      while (i + 1 < argv.length && !argv[i + 1].startsWith("--")) only.add(argv[(i += 1)]);
    } else folders.push(argv[i]);
  }
  if (folders.length === 0) folders.push(join(ROOT, "vectors", "hand"), join(ROOT, "vectors", "hypothesis"));
  const paths = folders.map((f) => resolve(f));
  const all = [...MUTANTS, ...WANTING];
  const mutants = only !== null ? all.filter((x) => only.has(x.id)) : wanting ? WANTING : MUTANTS;
  if (only !== null) for (const id of only) if (!all.some((x) => x.id === id)) console.log(`no mutant ${id}`);
  const source = readFileSync(join(HERE, "machine.mjs"), "utf8");
  const replay = readFileSync(join(HERE, "replay.mjs"), "utf8");
  let caught = 0;
  let bad = 0;
  for (const mutant of mutants) {
    const label = `${mutant.id}   [${mutant.rule}] ${mutant.what}`;
    const [olds, news] = [[mutant.old].flat(), [mutant.new].flat()];
    const times = olds.map((old) => source.split(old).length - 1);
    if (olds.length !== news.length || times.some((n) => n !== 1) || olds.some((old, i) => old === news[i])) {
      console.log(`BROKEN   ${label}: its snippets occur ${times.join(", ")} times`);
      bad += 1;
      continue;
    }
    const dir = realpathSync(mkdtempSync(join(tmpdir(), "lorafleet-mutant-")));
    try {
      const mutated = olds.reduce((text, old, i) => text.replace(old, () => news[i]), source);
      writeFileSync(join(dir, "machine.mjs"), mutated);
      writeFileSync(join(dir, "replay.mjs"), replay);
      // The bound is for a mutant that loops forever. A replay takes about 1.5 s, far longer on a
      // machine loaded well past its cores, where a test run failed once with a bound of 20 s.
      const done = spawnSync(process.execPath, [join(dir, "replay.mjs"), ...paths], { encoding: "utf8", timeout: 120000 });
      const last = done.error ? "" : done.stdout.trimEnd().split("\n").at(-1);
      if (/^\d+ passed, [1-9]\d* failed$/.test(last)) {
        caught += 1;
        console.log(`caught   ${label}`);
      } else if (done.error || done.status !== 0) {
        // Say how it ended: a crash the mutant caused names its error, one the machine caused (a signal) none.
        const how = done.error ? `hung (${done.error.code ?? done.error.message})`
          : `crashed (status ${done.status}, signal ${done.signal}: ${done.stderr.trimEnd().split("\n").at(-1)})`;
        console.log(`BROKEN   ${label}: the replay ${how}, so no vector judged it`);
        bad += 1;
      } else {
        console.log(`SURVIVED ${label}`);
        bad += 1;
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  console.log(`caught ${caught}/${mutants.length}`);
  return bad === 0 && (only !== null || wanting || mutants.length > 0) ? 0 : 1; // none waiting is no failure
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2)); // flushes, as replay.mjs
