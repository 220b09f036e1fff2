// A mutation check of the port: plants one small semantic bug at a time in a copy of machine.mjs (one per
// rule clause of SPEC.md and per setting) and replays the vectors on it; every mutant must fail one.
//
//   node vectors/port/mutants.mjs vectors/hand vectors/hypothesis
//   node vectors/port/mutants.mjs --only evict-most-recent cap-ignores-max-loras
//
// Each mutant replaces one snippet (`old`, which must occur exactly once) with `new`, in a copy of
// machine.mjs written with replay.mjs into a fresh temporary folder; nothing in vectors/port/ changes.
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

const m = (id, rule, what, old, replacement) => ({ id, rule, what, old, new: replacement });

export const MUTANTS = [
  // -- §3.1 requests
  m("hit-shortcut-keeps-ticket", "hit", "the hit shortcut does not advance the highest ticket seen",
    "if (!held) return false;\n    this.highest = ticket;", "if (!held) return false;"),
  m("hit-uncounted", "statistics", "a hit is not counted among the grants",
    "this.grants.hit += 1;", ""),
  m("join-granted-loaded", "join", "a request that joined a load is granted as loaded",
    'const how = ticket === load.starter ? "loaded" : "joined";', 'const how = "loaded";'),
  m("wait-unload-ignored", "wait-unload", "a request for an adapter being unloaded loads it at once",
    "if (unload) { // [wait-unload]", "if (false) { // [wait-unload]"),
  m("evict-most-recent", "evict", "among equals in demand, the most recently used idle adapter is evicted",
    "for (const name of rep.idle.keys()) {", "for (const name of [...rep.idle.keys()].reverse()) {"),
  m("evict-ignores-demand", "evict", "the victim is the least recently used, whatever its demand",
    "const weight = this.weight(name);\n      if (lowest", "const weight = 0;\n      if (lowest"),
  m("half-life-ignored", "evict", "setting half_life ignored: demand counts are never halved",
    "if (this.requests % this.halfLife === 0) {", "if (false) {"),
  m("cold-load-before-victims", "evict", "past the bound, the load goes out before its victims are unloaded",
    "if (victims.length === 0) commands.push(this.issue(load));", "commands.push(this.issue(load));"),
  m("headroom-ignored", "evict", "setting headroom ignored by the bound: a cold load evicts first at the line",
    "return this.headroom === null ? Infinity : this.line(rep) + this.headroom;",
    "return this.headroom === null ? Infinity : this.line(rep);"),
  m("cap-ignores-max-loras", "cap", "the cap is the bound, never the engine's max_loras",
    "return Math.max(this.line(rep) + this.headroom, rep.maxLoras ?? 0);", "return this.line(rep) + this.headroom;"),
  m("cap-never-waits", "cap", "a cold request at the cap loads anyway instead of queueing",
    "if (ticket !== null && this.capped(rep)) {", "if (false && ticket !== null && this.capped(rep)) {"),
  m("cap-one-over", "cap", "a cold request waits only once the cap is passed, not reached",
    "return this.headroom !== null && this.occupied(rep) >= this.cap(rep);",
    "return this.headroom !== null && this.occupied(rep) > this.cap(rep);"),
  m("settle-skipped", "settle", "a landed load never unloads the excess over the line",
    "commands.push(...this.settle(rep));", ""),
  m("refuse-ignored", "refuse", "a refused adapter is loaded again at once",
    "if (refused.until > this.now) { // [refuse]: no call", "if (false) { // [refuse]: no call"),
  m("refusal-ignored", "refuse", "setting refusal ignored: refusals last the default 900 s",
    "this.refusal = Number(refusal);", "this.refusal = 900;"),
  // -- §3.2 answers
  m("already-loaded-fails", "load-outcome", "already_loaded is taken for a failure",
    'if (outcome === "loaded" || outcome === "already_loaded") {', 'if (outcome === "loaded") {'),
  m("load-fault-swapped", "load-outcome", "a failed load's fault is adapter for replica_fault and replica for adapter_fault",
    'const fault = outcome === "adapter_fault" ? "adapter" : "replica";',
    'const fault = outcome === "replica_fault" ? "adapter" : "replica";'),
  m("unload-waiters-dropped", "unload-outcome", "requests waiting on an unload are not admitted when it ends",
    "commands.push(...this.admit(ticket, rep, unload.adapter, path)); // afresh, from the top", ""),
  // -- §3.3 the end of a request
  m("release-no-queue", "release", "an adapter gone idle does not let the queue in",
    "rep.idle.set(held.adapter, this.tick()); // the end of idle: most recently used\n    return this.admitQueue(rep);",
    "rep.idle.set(held.adapter, this.tick()); // the end of idle: most recently used\n    return [];"),
  m("cancel-keeps-load", "cancel", "a load not yet issued that no one waits for any more is kept",
    "if (waited.waiters.length === 0 && !waited.issued", "if (waited.waiters.length < 0 && !waited.issued"),
  // -- §3.4 listings, time
  m("listing-keeps-unlisted", "listing", "an adapter held before the listing and not in it is kept",
    "if (!listed.has(name) && held.since < listing.started) this.drop(rep, name);",
    "if (false && !listed.has(name) && held.since < listing.started) this.drop(rep, name);"),
  m("listing-drops-newer", "listing", "an adapter that landed while the listing was out is dropped too",
    "if (!listed.has(name) && held.since < listing.started) this.drop(rep, name);",
    "if (!listed.has(name)) this.drop(rep, name);"),
  m("listing-added-most-recent", "listing", "adapters a listing adds go to the end of idle, not its front",
    "rep.idle = new Map([...idle, ...rep.idle]);", "rep.idle = new Map([...rep.idle, ...idle]);"),
  m("listing-not-healthy", "health", "an answered listing does not clear the replica's failures",
    "const rep = listing.replica;\n    this.healthy(rep);", "const rep = listing.replica;"),
  m("listing-interval-ignored", "listing", "setting listing_interval ignored: listings every 30 s",
    "this.interval = Number(listing_interval);", "this.interval = 30;"),
  m("time-due-exclusive", "time", "a listing falls due only after its time, not at it",
    ".filter((rep) => !rep.removed && rep.due <= this.now)", ".filter((rep) => !rep.removed && rep.due < this.now)"),
  m("order-due-names-reversed", "order", "replicas due at once are listed in reverse name order",
    ".sort((a, b) => a.due - b.due || byName(a.id, b.id));", ".sort((a, b) => a.due - b.due || byName(b.id, a.id));"),
  // -- §3.5 forget, §3.7 replicas and limits
  m("forget-older-copy", "forget", "a report about an older copy (its ticket's lease is another) drops the adapter",
    "if (ticket !== null && this.leases.get(ticket) !== held) return []; // a report about an older copy", ""),
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
  m("pin-counts-avoided", "pin", "a copy on a failing replica counts toward the pin's copies",
    "const have = holders.filter((rep) => !this.avoided(rep) && ofModel(rep));",
    "const have = holders.filter((rep) => ofModel(rep));"),
  // -- §3.12 place, load
  m("place-served-first", "place", "placement compares requests served before how busy a replica is",
    "const least = (rep) => [busy(rep), rep.served, -rendezvous(adapter, rep.id)];",
    "const least = (rep) => [rep.served, busy(rep), -rendezvous(adapter, rep.id)];"),
  m("place-spread-full", "place", "a spread load takes replicas up to their whole capacity, not three quarters",
    "busy(rep) < Math.max(1, Math.floor((3 * capacity) / 4));", "busy(rep) < Math.max(1, capacity);"),
  m("place-queue-margin", "place", "a cold load elsewhere beats a saturated holder by one queued request, not two",
    "if (mine !== null && theirs !== null && theirs + 2 <= mine) return other;",
    "if (mine !== null && theirs !== null && theirs + 1 <= mine) return other;"),
  m("overflow-ignored", "place", "setting overflow ignored: a replica at its line with nothing idle is never 'over'",
    "return count < line + this.overflow ? 1 : 3;", "return count < line ? 1 : 3;"),
  m("concurrency-ignored", "load", "setting concurrency ignored: capacity only as readings show it",
    "return this.concurrency ?? rep.seqs;", "return rep.seqs;"),
  m("load-others-include-ours", "load", "a reading's running and waiting are all counted as other routers'",
    "rep.others = Math.max(0, run + wait - read.inFlight);", "rep.others = Math.max(0, run + wait);"),
  m("load-seqs-from-last", "load", "a reading with a queue sets the capacity to what runs now, lowering an earlier one's",
    "if (wait > 0) rep.seqs = Math.max(rep.ran, rep.seqs ?? 1);", "if (wait > 0) rep.seqs = Math.max(run, 1);"),
  m("place-victim-demand-ignored", "place", "replicas that would evict compare their victims' idle stamps alone",
    "return [2, this.weight(victim), rep.idle.get(victim), ...last];", "return [2, 0, rep.idle.get(victim), ...last];"),
  // -- §3.14 share
  m("routers-ignored", "share", "setting routers ignored: one router",
    "this.routers = Number(routers);", "this.routers = 1;"),
  m("share-floor", "share", "this router's share of the free slots rounds down, not up",
    "rep.base + Math.ceil(free / this.routers)", "rep.base + Math.floor(free / this.routers)"),
  m("share-not-found-unseen", "share", "an unload another router answered first does not lower the line",
    "rep.unseen += 1;\n      if (load) {", "if (load) {"),
  // -- §3.15 read, reading, read-failed, route
  m("read-engine-ignored", "read", "setting read_engine ignored: engines are never read",
    "this.readEngine = read_engine;", "this.readEngine = false;"),
  m("read-after-listing-skipped", "read", "a listing answered does not start a read (step 6)",
    "if (this.readEngine && !rep.read) commands.push(this.startRead(rep)); // [read], step 6", ""),
  m("reading-own-requests-named", "reading", "a reading that names only our own running requests stands as it is",
    "if (!rep.foreign) names = new Set();", ""),
  m("read-failed-kept", "read-failed", "a failed read after a listing keeps the last reading",
    "const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];", "const commands = [];"),
  m("route-stale-not-read", "route", "a routed request on a replica with a stale reading does not ask for one",
    "if (this.stale(rep)) commands.push(this.startRead(rep)); // [read]: nothing waits for it", ""),
  // -- §3.8 queries
  m("view-room-at-line", "view", "a replica at its line counts as having room",
    "if (rep.held.size + rep.loading.size < this.line(rep) && !this.avoided(rep)) withRoom.add(id);",
    "if (rep.held.size + rep.loading.size <= this.line(rep) && !this.avoided(rep)) withRoom.add(id);"),
];

function main(argv) {
  let only = null;
  const folders = [];
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--only") {
      only = new Set();
      while (i + 1 < argv.length && !argv[i + 1].startsWith("--")) only.add(argv[(i += 1)]);
    } else folders.push(argv[i]);
  }
  if (folders.length === 0) folders.push(join(ROOT, "vectors", "hand"), join(ROOT, "vectors", "hypothesis"));
  const paths = folders.map((f) => resolve(f));
  const mutants = only === null ? MUTANTS : MUTANTS.filter((x) => only.has(x.id));
  if (only !== null) for (const id of only) if (!MUTANTS.some((x) => x.id === id)) console.log(`no mutant ${id}`);
  const source = readFileSync(join(HERE, "machine.mjs"), "utf8");
  const replay = readFileSync(join(HERE, "replay.mjs"), "utf8");
  let caught = 0;
  let bad = 0;
  for (const mutant of mutants) {
    const label = `${mutant.id}   [${mutant.rule}] ${mutant.what}`;
    const times = source.split(mutant.old).length - 1;
    if (times !== 1 || mutant.old === mutant.new) {
      console.log(`BROKEN   ${label}: its snippet occurs ${times} times`);
      bad += 1;
      continue;
    }
    const dir = realpathSync(mkdtempSync(join(tmpdir(), "lorafleet-mutant-")));
    try {
      writeFileSync(join(dir, "machine.mjs"), source.replace(mutant.old, () => mutant.new));
      writeFileSync(join(dir, "replay.mjs"), replay);
      // The bound is for a mutant that loops forever. A replay takes about 1.5 s, far longer on a
      // machine loaded well past its cores, where a test run failed once with a bound of 20 s.
      const done = spawnSync(process.execPath, [join(dir, "replay.mjs"), ...paths], { encoding: "utf8", timeout: 120000 });
      const last = done.error ? "" : done.stdout.trimEnd().split("\n").at(-1);
      if (/^\d+ passed, [1-9]\d* failed$/.test(last)) {
        caught += 1;
        console.log(`caught   ${label}`);
      } else if (done.error || done.status !== 0) {
        console.log(`BROKEN   ${label}: the replay ${done.error ? "hung" : "crashed"}, so no vector judged it`);
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
  return bad === 0 && (only !== null || mutants.length > 0) ? 0 : 1;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exit(main(process.argv.slice(2)));
