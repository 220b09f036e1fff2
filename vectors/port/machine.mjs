// lorafleet's adapter state machine, a second implementation written from SPEC.md (not from the Python).
//
// A porter's reference: every rule carries its identifier from SPEC.md in brackets, and section numbers
// point at the text it follows. Events and commands are their JSON form (SPEC §2): plain objects with a
// `type`. Integers (tickets, operation numbers, limits) are BigInt, so that `2` and `2.0` stay apart as
// JSON keeps them (SPEC §1.1); numbers (`now`) are Number or BigInt.

export class UsageError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name; // the error's name in SPEC §4, which the vectors compare
  }
}

export const REPLICA_REMOVED = "the replica was removed while the request waited";
const LOAD_OUTCOMES = ["loaded", "already_loaded", "adapter_fault", "replica_fault"];
const UNLOAD_OUTCOMES = ["unloaded", "not_found", "failed"];

// §1.1 Values.
const isInteger = (v) => typeof v === "bigint";
const isNumber = (v) => typeof v === "bigint" || (typeof v === "number" && Number.isFinite(v));
const isName = (v) => typeof v === "string" && v.length > 0;
// Name order is code point order, which UTF-8 bytes keep and UTF-16 units (JavaScript's own) do not.
export const byName = (a, b) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
const byTicket = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function invalid(field, value) {
  return new UsageError("InvalidValueError", `${field}: ${String(value)} is not of its kind`);
}

export class Machine {
  // §1.4 Settings, checked in this order.
  constructor(settings = {}) {
    const { listing_interval = 30, backoff = 5, max_backoff = 300, refusal = 900 } = settings;
    const { headroom = null, concurrency = null, overflow = 2n, half_life = 500n, routers = 1n } = settings;
    const { read_engine = false, shared_interval = null } = settings;
    const seconds = { listing_interval, backoff, max_backoff, refusal };
    for (const [name, value] of Object.entries(seconds)) {
      if (!isNumber(value) || Number(value) <= 0) throw invalid(name, value);
    }
    if (headroom !== null && (!isInteger(headroom) || headroom < 0n)) throw invalid("headroom", headroom);
    if (concurrency !== null && (!isInteger(concurrency) || concurrency < 1n)) {
      throw invalid("concurrency", concurrency);
    }
    if (!isInteger(overflow) || overflow < 0n) throw invalid("overflow", overflow);
    if (!isInteger(half_life) || half_life < 1n) throw invalid("half_life", half_life);
    if (!isInteger(routers) || routers < 1n) throw invalid("routers", routers);
    if (typeof read_engine !== "boolean") throw invalid("read_engine", read_engine);
    if (shared_interval !== null && (!isNumber(shared_interval) || Number(shared_interval) <= 0)) {
      throw invalid("shared_interval", shared_interval);
    }
    this.readEngine = read_engine;
    this.sharedInterval = shared_interval === null ? null : Number(shared_interval); // [time]
    this.routers = Number(routers);
    this.concurrency = concurrency === null ? null : Number(concurrency); // [load]: else as readings show
    this.overflow = Number(overflow);
    this.halfLife = Number(half_life);
    this.demand_ = new Map(); // adapter name -> decayed request count ([place]: where a cold load evicts)
    this.requests = 0;
    this.interval = Number(listing_interval);
    this.backoff = Number(backoff);
    this.maxBackoff = Number(max_backoff);
    this.refusalSeconds = Number(refusal);
    this.headroom = headroom === null ? null : Number(headroom);
    this.refused = new Map(); // adapter name -> { until, message } ([refuse])
    this.pins = new Map(); // adapter name -> { path, copies, model } ([pin])
    this.parked = new Map(); // adapter name -> placement records of routed requests, in ticket order ([renew])
    // §1.3 Machine-wide state.
    this.now = 0;
    this.standingBy = false; // [standby]
    this.logical = 0;
    this.nextOp = 1n;
    this.highest = 0n; // the highest ticket seen
    this.replicas = new Map(); // id -> replica, in use or removed but kept
    this.ops = new Map(); // operation number -> load, unload or listing awaiting its answer
    this.leases = new Map(); // ticket -> held entry (by identity)
    this.waiting = new Map(); // ticket -> the load, unload or queue it waits on
    this.grants = { hit: 0, joined: 0, loaded: 0 };
    this.failures = {};
    this.loads = {};
    this.evictions = {};
  }

  get next_ticket() {
    return this.highest + 1n;
  }

  handle(event) {
    const on = {
      replica_added: this.replicaAdded, replicas_removed: this.replicasRemoved, limit_set: this.limitSet,
      time_advanced: this.timeAdvanced, standing_by: this.standingByEvent, requested: this.requested, released: this.released,
      cancelled: this.cancelled, load_finished: this.loadFinished, unload_finished: this.unloadFinished,
      listing_received: this.listingReceived, listing_failed: this.listingFailed,
      adapter_missing: this.adapterMissing, replica_failed: this.replicaFailed,
      served_elsewhere: this.servedElsewhere,
      adapter_pinned: this.adapterPinned, adapter_unpinned: this.adapterUnpinned,
      refusal_forgotten: this.refusalForgotten, adapter_changed: this.adapterChanged,
      adapter_dismissed: this.adapterDismissed,
      routed: this.routed, reading_received: this.readingReceived, reading_failed: this.readingFailed,
    }[event.type];
    if (!on) throw new Error(`unknown event type ${event.type}`);
    const commands = on.call(this, event);
    return this.parked.size > 0 ? [...commands, ...this.placeParked()] : commands;
  }

  // [renew]: after every event, the parked routed requests [place] now puts elsewhere than a replica
  // replacing an old copy are placed again: adapters in name order, tickets in order.
  placeParked() {
    const commands = [];
    for (const adapter of [...this.parked.keys()].sort(byName)) {
      const routes = this.parked.get(adapter);
      for (const route of [...routes]) {
        if (this.oldCopyWait(adapter, this.place(adapter, { model: route.model, exclude: route.exclude }))) continue;
        routes.splice(routes.indexOf(route), 1);
        this.waiting.delete(route.ticket);
        commands.push(...this.placeRoute(route));
      }
      if (routes.length === 0) this.parked.delete(adapter);
    }
    return commands;
  }

  // A `wait` placement where an old copy is held or loading; a `wait` at a cap holds none there.
  oldCopyWait(adapter, { replica, placed }) {
    if (placed !== "wait") return false;
    const rep = this.replicas.get(replica);
    return rep.held.has(adapter) || rep.loading.has(adapter);
  }

  // -- §3.1 Requests ------------------------------------------------------------------------------

  // §4.1: ticket, then replica, then adapter (then path), each whole before the next.
  newRequest(ticket, replica, adapter) {
    if (!isInteger(ticket) || ticket <= this.highest) {
      throw new UsageError("TicketOrderError", `ticket ${ticket} is not an integer above ${this.highest}`);
    }
    const rep = typeof replica === "string" ? this.replicas.get(replica) : undefined;
    if (!rep || rep.removed) throw new UsageError("UnknownReplicaError", `replica ${replica} is not in use`);
    if (!isName(adapter)) throw invalid("adapter", adapter);
    return rep;
  }

  requested({ ticket, replica, adapter, path }) {
    const rep = this.newRequest(ticket, replica, adapter);
    if (!isName(path)) throw invalid("path", path);
    this.highest = ticket;
    this.count(rep, adapter);
    const refused = this.refused.get(adapter);
    if (refused && !rep.held.has(adapter)) { // held there: the engine took it, so a [hit]
      if (refused.until > this.now) { // [refuse]: no call, the engine's words again
        return [this.fail(ticket, rep, "adapter", refused.message)];
      }
      this.refused.delete(adapter);
    }
    return this.admit(ticket, rep, adapter, path, true);
  }

  // The [hit] shortcut: true when granted at once, false (having changed nothing) otherwise.
  hit({ ticket, replica, adapter }) {
    const rep = this.newRequest(ticket, replica, adapter);
    const held = rep.held.get(adapter);
    if (!held || this.old(rep, adapter)) return false;
    this.highest = ticket;
    this.count(rep, adapter);
    this.take(ticket, held);
    return true;
  }

  // Admitted `first` (a requested request's first admission) it may wait for a reading ([read]);
  // afresh (after a read, an unload, from the queue), from the top, it never does.
  admit(ticket, rep, adapter, path, first = false) {
    const held = rep.held.get(adapter);
    if (held && !this.old(rep, adapter)) { // [hit]
      this.take(ticket, held);
      return [{ type: "grant", ticket, how: "hit" }];
    }
    const load = rep.loading.get(adapter);
    if (load && !this.old(rep, adapter)) { // [join]
      load.waiters.push(ticket);
      this.waiting.set(ticket, load);
      return [];
    }
    const unload = rep.unloading.get(adapter);
    if (unload) { // [wait-unload]
      unload.waiters.push({ ticket, path });
      this.waiting.set(ticket, unload);
      return [];
    }
    if (first && this.needsReading(rep)) return this.awaitReading(rep, { ticket, adapter, path, route: null });
    return this.cold(ticket, rep, adapter, path);
  }

  // [hit], for requested and for the shortcut alike: the grant is counted either way.
  // A new request: in flight on its replica, one more served there, one more for its adapter's demand;
  // every half_life requests every demand count is halved (rounding down; zeros are forgotten).
  count(rep, adapter) {
    rep.inFlight += 1;
    rep.served += 1;
    this.demand_.set(adapter, (this.demand_.get(adapter) ?? 0) + 1);
    this.requests += 1;
    if (this.requests % this.halfLife === 0) {
      for (const [name, n] of [...this.demand_]) {
        if (n > 1) this.demand_.set(name, Math.floor(n / 2));
        else this.demand_.delete(name);
      }
    }
  }

  // [place]: an adapter's weight is the bit length of its demand count (0 for 0, 1 for 1, 2 for 2-3...);
  // demand matters only where a cold load evicts, never for which adapter it evicts.
  weight(adapter) {
    const n = this.demand_.get(adapter) ?? 0;
    return n === 0 ? 0 : Math.floor(Math.log2(n)) + 1; // the bit length
  }

  // [evict] (§3.16): the victim is the least recently used idle adapter, the first of `idle`, which is
  // what the engine itself drops when a load finds its memory full.
  victim(rep) {
    return rep.idle.keys().next().value;
  }

  take(ticket, held) {
    if (held.inUse === 0) held.replica.idle.delete(held.adapter);
    held.inUse += 1;
    held.replica.granted += 1;
    this.leases.set(ticket, held);
    this.grants.hit += 1;
  }

  // [share] (§3.14) The count past which a cold load takes a victim ([evict]) and to which a landed load
  // brings the replica back ([settle]): its limit, less the other routers' shares of the f free slots its
  // last listing (or its adding) left; ours is ceil(f / R). Less one for each adapter the engine lost since
  // without this router's unload (another's took its slot); never below 1.
  line(rep) {
    const free = rep.limit - rep.base;
    return Math.max(1, (free <= 0 ? rep.limit : rep.base + Math.ceil(free / this.routers)) - rep.unseen);
  }

  // [cap]: the line plus the headroom, or the engine's max_loras when greater.
  cap(rep) {
    return Math.max(this.line(rep) + this.headroom, rep.maxLoras ?? 0);
  }

  // [cold]; a [pin]'s load has no ticket, and placement chose room for it, so the cap does not apply
  // (a pin's load starts "from step 1").
  cold(ticket, rep, adapter, path) {
    if (ticket !== null && this.capped(rep)) { // step 0, [cap]: wait for room
      rep.queue.waiters.push({ ticket, adapter, path });
      this.waiting.set(ticket, rep.queue);
      return [];
    }
    // Step 1: the load is numbered and recorded first; it always goes out at once.
    const load = {
      kind: "load", replica: rep, adapter, path, op: this.newOp(), waiters: ticket === null ? [] : [ticket],
      starter: ticket, victims: [],
    };
    rep.loading.set(adapter, load);
    rep.outstanding += 1;
    this.ops.set(load.op, load);
    if (ticket !== null) this.waiting.set(ticket, load);
    // Step 2, [evict]: past the line (the new load counted), the least recently used idle adapters are its
    // victims. Each leaves `held` for `unloading` now, so that no request makes it recent again on the
    // engine ([wait-unload]), but takes no number and no command until the load lands ([load-outcome]).
    let excess = rep.held.size + rep.loading.size - this.line(rep);
    while (excess > 0 && rep.idle.size > 0) {
      const victim = this.victim(rep);
      const stamp = rep.idle.get(victim);
      const { since } = rep.held.get(victim);
      this.drop(rep, victim);
      const unload = { kind: "unload", replica: rep, adapter: victim, op: null, waiters: [], since, stamp };
      rep.unloading.set(victim, unload);
      load.victims.push(unload);
      excess -= 1;
    }
    // Step 3.
    return [{ type: "issue_load", load: load.op, replica: rep.id, adapter, path }];
  }

  // An unload goes out: it takes its operation number now ([settle]'s, or a victim's once its load landed).
  issueUnload(unload) {
    const rep = unload.replica;
    unload.op = this.newOp();
    rep.outstanding += 1;
    this.ops.set(unload.op, unload);
    return { type: "issue_unload", unload: unload.op, replica: rep.id, adapter: unload.adapter };
  }

  // -- §3.2 Answers from the engine ---------------------------------------------------------------

  // [load-outcome]
  loadFinished({ load: number, outcome, message }) {
    const load = isInteger(number) ? this.ops.get(number) : undefined;
    if (!load || load.kind !== "load") {
      throw new UsageError("UnknownOperationError", `load ${number} is not awaiting its answer`);
    }
    if (!LOAD_OUTCOMES.includes(outcome)) throw invalid("outcome", outcome);
    if (typeof message !== "string") throw invalid("message", message);
    this.ops.delete(number);
    const rep = load.replica;
    rep.loading.delete(load.adapter);
    count(this.loads, `${rep.model}/${outcome}`); // the model the replica has now
    const renewal = rep.unloading.get(load.adapter); // [renew]: an old copy's load
    if (this.answered(rep)) {
      if (renewal) rep.unloading.delete(load.adapter);
      return [];
    }
    const text = message || `the load of '${load.adapter}' on '${rep.id}' failed`; // literally, no escaping
    if (outcome === "replica_fault") this.failure(rep);
    else this.healthy(rep);
    if (outcome === "adapter_fault" && !renewal) { // [refuse]; [renew]: not for files since replaced
      this.refused.set(load.adapter, { until: this.now + this.refusalSeconds, message: text });
    }
    const commands = [];
    if (outcome === "loaded" || outcome === "already_loaded") {
      const held = {
        replica: rep, adapter: load.adapter, inUse: load.waiters.length, since: this.tick(), current: true,
      };
      rep.held.set(load.adapter, held);
      rep.granted += load.waiters.length;
      if (!renewal && held.inUse === 0 && this.idleable(rep, load.adapter)) rep.idle.set(load.adapter, held.since);
      for (const ticket of load.waiters) {
        this.waiting.delete(ticket);
        this.leases.set(ticket, held);
        const how = ticket === load.starter ? "loaded" : "joined";
        this.grants[how] += 1;
        commands.push({ type: "grant", ticket, how });
      }
      // Its victims' unloads go out now, in eviction order, each numbered as it goes: the engine made
      // their room as the load landed (§3.16). Then [settle].
      for (const unload of load.victims) commands.push(this.issueUnload(unload));
      if (renewal) commands.push(...this.retire(rep, held));
      commands.push(...this.settle(rep));
      if (!renewal) commands.push(...this.warmed(rep, load.adapter));
    } else {
      const fault = outcome === "adapter_fault" ? "adapter" : "replica";
      for (const ticket of load.waiters) {
        this.waiting.delete(ticket);
        commands.push(this.fail(ticket, rep, fault, text));
      }
      commands.push(...this.spare(rep, load.victims));
      if (renewal) {
        rep.unloading.delete(load.adapter);
        commands.push(...this.readmit(rep, renewal));
      }
    }
    commands.push(...this.admitQueue(rep));
    if (outcome === "adapter_fault" || outcome === "replica_fault") commands.push(...this.ensurePins());
    return commands;
  }

  // [load-outcome]: a load that failed took no room on the engine, so its victims are spared: held again
  // as they were (no request on them, their own `since`), back in `idle` where their stamps place them
  // (the stamps rise along it), unless pinned or named; then the requests that waited on their unloads
  // are admitted afresh, victim by victim, and find them held.
  spare(rep, victims) {
    const commands = [];
    for (const victim of victims) {
      const { adapter, since, stamp } = victim;
      if (victim.renew) { // [renew]: an old copy is not held again; its unload goes out
        commands.push(this.issueUnload(victim));
        continue;
      }
      rep.unloading.delete(adapter);
      rep.held.set(adapter, { replica: rep, adapter, inUse: 0, since, current: true });
      if (!this.idleable(rep, adapter)) continue;
      const idle = [...rep.idle];
      const at = idle.findIndex(([, other]) => other > stamp);
      idle.splice(at < 0 ? idle.length : at, 0, [adapter, stamp]);
      rep.idle = new Map(idle);
    }
    for (const victim of victims) if (!victim.renew) commands.push(...this.readmit(rep, victim)); // a [hit]
    return commands;
  }

  // The requests that waited for an unload, admitted afresh in arrival order.
  readmit(rep, unload) {
    const commands = [];
    for (const { ticket, path } of unload.waiters) {
      this.waiting.delete(ticket);
      commands.push(...this.admit(ticket, rep, unload.adapter, path));
    }
    return commands;
  }

  // [unload-outcome]
  unloadFinished({ unload: number, outcome, message }) {
    const unload = isInteger(number) ? this.ops.get(number) : undefined;
    if (!unload || unload.kind !== "unload") {
      throw new UsageError("UnknownOperationError", `unload ${number} is not awaiting its answer`);
    }
    if (!UNLOAD_OUTCOMES.includes(outcome)) throw invalid("outcome", outcome);
    if (typeof message !== "string") throw invalid("message", message);
    this.ops.delete(number);
    const rep = unload.replica;
    rep.unloading.delete(unload.adapter);
    count(this.evictions, `${rep.model}/${outcome}`);
    if (this.answered(rep)) return [];
    if (rep.listing) rep.droppedWhileListing.add(unload.adapter);
    // [share] another router unloaded it first: one more adapter this router does not see, and a line one
    // lower. Nothing more: the load it made room for landed before it went out.
    // [renew]: not an old copy's: every router unloads that, and no other adapter took its slot.
    if (this.routers > 1 && outcome === "not_found" && !unload.renew) rep.unseen += 1;
    const commands = this.readmit(rep, unload); // afresh, from the top
    if (unload.renew && this.pins.has(unload.adapter)) commands.push(...this.ensurePins());
    return commands;
  }

  // Counts an answer; true when the replica is removed, so that the answer changes nothing more (§3.7).
  answered(rep) {
    rep.outstanding -= 1;
    if (!rep.removed) return false;
    this.forgetIfDone(rep);
    return true;
  }

  // -- §3.3 The end of a request ------------------------------------------------------------------

  // [release]
  released({ ticket }) {
    const held = isInteger(ticket) ? this.leases.get(ticket) : undefined;
    if (!held) {
      if (isInteger(ticket) && this.waiting.has(ticket)) {
        throw new UsageError("UnknownTicketError", `ticket ${ticket} is waiting: cancel it`);
      }
      this.checkEnded(ticket);
      return [];
    }
    this.leases.delete(ticket);
    held.inUse -= 1;
    const rep = held.replica;
    rep.inFlight -= 1;
    rep.granted -= 1;
    if (held.inUse > 0 || !held.current) { // in use still, or a dead lease: it ends, nothing else...
      // ...unless its engine runs all it is granted now: its own queue may have emptied ([cap]).
      const capacity = this.capacity(rep);
      if (!rep.removed && capacity !== null && rep.granted + rep.others === capacity) return this.admitQueue(rep);
      return [];
    }
    if (rep.removed) {
      this.drop(rep, held.adapter);
      rep.unloading.delete(held.adapter); // [renew]: an old copy's unload, never issued now
      this.forgetIfDone(rep);
      return [];
    }
    if (rep.read) rep.read.ended.add(held.adapter); // [reading]: the sample may name it, as ours
    if (rep.unloading.has(held.adapter)) return this.retire(rep, held); // [renew]: an old copy
    if (this.pins.has(held.adapter)) return []; // [pin]: never idle
    if (rep.named.has(held.adapter)) { // [reading]: never idle until the next reading
      // [read]: with requests waiting at the cap, read again for the room this request leaves.
      if (this.readEngine && rep.queue.waiters.length > 0 && !rep.read) return [this.startRead(rep)];
      return [];
    }
    rep.idle.set(held.adapter, this.tick()); // the end of idle: most recently used
    return this.admitQueue(rep);
  }

  // [cancel]
  cancelled({ ticket }) {
    if (isInteger(ticket) && this.leases.has(ticket)) return this.released({ ticket });
    const waited = isInteger(ticket) ? this.waiting.get(ticket) : undefined;
    if (!waited) {
      this.checkEnded(ticket);
      return [];
    }
    this.waiting.delete(ticket);
    if (waited.kind === "parked") { // counted on no replica
      const routes = this.parked.get(waited.adapter).filter((r) => r.ticket !== ticket);
      if (routes.length > 0) this.parked.set(waited.adapter, routes);
      else this.parked.delete(waited.adapter);
      return [];
    }
    if (waited.kind === "read") { // the read goes on; a routed request waiting here is counted nowhere
      const entry = waited.waiters.find((w) => w.ticket === ticket);
      waited.waiters = waited.waiters.filter((w) => w !== entry);
      if (entry.route === null) waited.replica.inFlight -= 1;
      return [];
    }
    waited.replica.inFlight -= 1;
    if (waited.kind === "load") { // never abandoned: it went out as it was recorded, and lands for the others
      waited.waiters = waited.waiters.filter((t) => t !== ticket);
      if (waited.starter === ticket) waited.starter = null;
    } else { // an unload (a victim's too) or a queue; the queue is not admitted
      waited.waiters = waited.waiters.filter((w) => w.ticket !== ticket);
    }
    return [];
  }

  // §1.1: a ticket from 1 to the highest seen that is neither waiting nor a lease has ended.
  checkEnded(ticket) {
    if (!isInteger(ticket) || ticket < 1n || ticket > this.highest) {
      throw new UsageError("UnknownTicketError", `no request ever had ticket ${ticket}`);
    }
  }

  // -- §3.4 Listings ------------------------------------------------------------------------------

  // [time]
  timeAdvanced({ now }) {
    if (!isNumber(now)) throw invalid("now", now);
    if (Number(now) < this.now) {
      throw new UsageError("ClockWentBackwardsError", `now ${now} is before ${this.now}`);
    }
    this.now = Number(now);
    const due = [...this.replicas.values()]
      .filter((rep) => !rep.removed && rep.due <= this.now)
      .sort((a, b) => a.due - b.due || byName(a.id, b.id));
    const commands = [];
    for (const rep of due) {
      rep.due = this.now + this.intervalOf(rep);
      if (!rep.listing) commands.push(this.startListing(rep));
    }
    return [...commands, ...this.ensurePins()]; // replicas back from their backoff
  }

  // [time]: a replica other routers worked on within a listing interval is listed every shared_interval,
  // unless another router decides for this one ([standby]).
  intervalOf(rep) {
    return this.sharedInterval !== null && rep.sharedUntil > this.now && !this.standingBy
      ? this.sharedInterval
      : this.interval;
  }

  // [standby]
  standingByEvent({ on }) {
    if (typeof on !== "boolean") throw invalid("on", on);
    const was = this.standingBy;
    this.standingBy = on;
    if (on || !was) return [];
    const commands = [];
    for (const rep of [...this.replicas.values()].sort((a, b) => byName(a.id, b.id))) {
      if (rep.removed || rep.listing) continue;
      rep.due = this.now + this.intervalOf(rep);
      commands.push(this.startListing(rep));
    }
    return commands;
  }

  next_due() {
    const dues = [...this.replicas.values()].filter((rep) => !rep.removed).map((rep) => rep.due);
    return dues.length ? Math.min(...dues) : null;
  }

  startListing(rep) {
    const listing = { kind: "listing", replica: rep, op: this.newOp(), started: this.tick() };
    rep.listing = listing;
    rep.droppedWhileListing = new Set();
    rep.outstanding += 1;
    this.ops.set(listing.op, listing);
    return { type: "read_listing", listing: listing.op, replica: rep.id };
  }

  listingOp(number) {
    const listing = isInteger(number) ? this.ops.get(number) : undefined;
    if (!listing || listing.kind !== "listing") {
      throw new UsageError("UnknownOperationError", `listing ${number} is not awaiting its answer`);
    }
    return listing;
  }

  // Counts the listing as answered; false when the answer is to be ignored (abandoned, §3.4).
  finishListing(listing) {
    this.ops.delete(listing.op);
    const rep = listing.replica;
    if (this.answered(rep) || rep.listing !== listing) return false;
    rep.listing = null;
    return true;
  }

  met(rep) {
    if (rep.met) return [];
    rep.met = true;
    return [{ type: "mark_met", replica: rep.id }];
  }

  // [listing]
  listingReceived({ listing: number, adapters }) {
    const listing = this.listingOp(number);
    if (!Array.isArray(adapters)) throw invalid("adapters", adapters);
    for (const name of adapters) if (!isName(name)) throw invalid("adapters", name);
    if (!this.finishListing(listing)) return [];
    const rep = listing.replica;
    this.healthy(rep);
    const commands = this.met(rep);
    const listed = new Set(adapters);
    const renewals = [];
    for (const [name, held] of [...rep.held]) {
      if (!listed.has(name) && held.since < listing.started) { // in use or not
        this.drop(rep, name);
        if (rep.unloading.has(name)) { // [renew]: the old copy is gone: its unload is not needed
          renewals.push(rep.unloading.get(name));
          rep.unloading.delete(name);
        }
      }
    }
    const known = (name) => rep.held.has(name) || rep.loading.has(name) || rep.unloading.has(name)
      || rep.droppedWhileListing.has(name);
    const added = [...listed].filter((name) => !known(name)).sort(byName);
    rep.droppedWhileListing = new Set();
    const since = this.tick();
    for (const name of added) {
      rep.held.set(name, { replica: rep, adapter: name, inUse: 0, since, current: true });
    }
    // The front of idle, in name order: least recently used of all. Their stamps count down from the
    // replica's `front` in reverse name order (the smallest name the lowest), so that stamps rise along idle.
    const front = added.filter((name) => this.idleable(rep, name));
    const idle = front.map((name, i) => [name, rep.front - (front.length - i)]);
    rep.front -= front.length;
    rep.idle = new Map([...idle, ...rep.idle]);
    rep.base = rep.held.size + rep.loading.size; // [share]: the free slots it leaves, shared afresh
    rep.unseen = 0;
    rep.listedSinceReading = true; // [read-failed]
    for (const name of added) commands.push(...this.warmed(rep, name));
    for (const renewal of renewals) commands.push(...this.readmit(rep, renewal));
    commands.push(...this.admitQueue(rep), ...this.ensurePins());
    if (this.readEngine && !rep.read) commands.push(this.startRead(rep)); // [read], step 6
    return commands;
  }

  listingFailed({ listing: number, message }) {
    const listing = this.listingOp(number);
    if (typeof message !== "string") throw invalid("message", message);
    if (!this.finishListing(listing)) return [];
    listing.replica.droppedWhileListing = new Set();
    this.failure(listing.replica);
    return [...this.met(listing.replica), ...this.ensurePins()];
  }

  // -- §3.5 What the engine says it does not have -------------------------------------------------

  // [forget]
  adapterMissing({ replica, adapter, ticket = null }) {
    if (!isName(replica)) throw invalid("replica", replica);
    if (!isName(adapter)) throw invalid("adapter", adapter);
    if (ticket !== null && !isInteger(ticket)) throw invalid("ticket", ticket);
    if (ticket !== null && (ticket < 1n || ticket > this.highest)) {
      throw new UsageError("UnknownTicketError", `no request ever had ticket ${ticket}`);
    }
    const rep = this.replicas.get(replica);
    const held = rep && !rep.removed ? rep.held.get(adapter) : undefined;
    if (!held) return [];
    if (ticket !== null && this.leases.get(ticket) !== held) return []; // a report about an older copy
    this.drop(rep, adapter);
    if (this.routers > 1) rep.unseen += 1; // [share]: as an unload another router answered first
    const commands = [];
    const renewal = rep.unloading.get(adapter);
    if (renewal) { // [renew]: the old copy is gone: its unload is not needed
      rep.unloading.delete(adapter);
      commands.push(...this.readmit(rep, renewal));
    }
    return [...commands, ...this.admitQueue(rep), ...(this.pins.has(adapter) ? this.ensurePins() : [])];
  }

  // -- §3.6 Dropping ------------------------------------------------------------------------------

  drop(rep, name) {
    rep.held.get(name).current = false; // leases on it go dead
    rep.held.delete(name);
    rep.idle.delete(name);
    if (rep.listing) rep.droppedWhileListing.add(name);
  }

  // -- §3.7 Replicas and limits -------------------------------------------------------------------

  // [replicas]
  replicaAdded({ replica, model, limit }) {
    if (!isName(replica)) throw invalid("replica", replica);
    if (!isName(model)) throw invalid("model", model);
    if (!isInteger(limit) || limit < 1n) throw invalid("limit", limit);
    let rep = this.replicas.get(replica);
    if (rep && !rep.removed) {
      if (rep.model !== model) {
        throw new UsageError("ReplicaConflictError", `replica ${replica} is in use with model ${rep.model}`);
      }
      rep.limit = Number(limit);
      return this.admitQueue(rep);
    }
    if (!rep) {
      rep = {
        id: replica, held: new Map(), idle: new Map(), loading: new Map(), unloading: new Map(),
        listing: null, droppedWhileListing: new Set(), outstanding: 0, inFlight: 0, granted: 0, served: 0,
        failures: 0, avoidUntil: 0, named: new Set(), listedSinceReading: false, base: 0, unseen: 0,
        read: null, namesAdapters: false, foreign: false, settle: false, front: 0, sharedUntil: -Infinity,
        others: 0, readServed: 0, seqs: null, ran: 0, calm: 0, maxLoras: null, sampled: null,
      };
      rep.queue = { kind: "queue", replica: rep, waiters: [] };
      this.replicas.set(replica, rep);
    }
    // New, or back while its calls or running requests keep it: they stay (§3.7).
    const due = this.now + this.interval;
    Object.assign(rep, { model, limit: Number(limit), met: false, removed: false, due });
    rep.base = rep.held.size + rep.loading.size; // [share]: what it is known to hold, shared afresh
    rep.unseen = 0;
    return [this.startListing(rep)];
  }

  replicasRemoved({ replicas: ids }) {
    if (!Array.isArray(ids)) throw invalid("replicas", ids);
    for (const id of ids) if (!isName(id)) throw invalid("replicas", id);
    const failed = [];
    const placeAgain = [];
    for (const id of ids) {
      const rep = this.replicas.get(id);
      if (!rep || rep.removed) continue;
      rep.removed = true;
      // [reading], [load]: what readings said is about the engine before the removal.
      Object.assign(rep, {
        named: new Set(), listedSinceReading: false, namesAdapters: false, foreign: false, settle: false,
        others: 0, readServed: 0, seqs: null, ran: 0, calm: 0, maxLoras: null, sampled: null,
      });
      if (rep.read) { // abandoned: requested waiters fail with the others, routed ones are placed again
        for (const waiter of rep.read.waiters) {
          if (waiter.route === null) failed.push(waiter.ticket);
          else {
            this.waiting.delete(waiter.ticket);
            placeAgain.push(waiter.route);
          }
        }
        rep.read.waiters = [];
        rep.read = null;
      }
      // Every adapter no request runs on is dropped (idle ones, and pinned ones): only running ones are kept.
      for (const name of [...rep.held.keys()].sort(byName)) {
        if (rep.held.get(name).inUse === 0) this.drop(rep, name);
      }
      for (const load of [...rep.loading.values()]) {
        failed.push(...load.waiters);
        load.waiters = [];
        load.starter = null;
        load.victims = [];
      }
      for (const unload of [...rep.unloading.values()]) {
        failed.push(...unload.waiters.map((w) => w.ticket));
        unload.waiters = [];
        // A victim whose unload is not issued never is, even if the replica comes back: it is simply not held.
        // An old copy's stays ([renew]): added back, the replica must not take it for a holder.
        const old = rep.held.has(unload.adapter) || rep.loading.has(unload.adapter);
        if (unload.op === null && !old) rep.unloading.delete(unload.adapter);
      }
      failed.push(...rep.queue.waiters.map((w) => w.ticket));
      rep.queue.waiters = [];
      rep.listing = null; // abandoned: its answer is ignored
      rep.droppedWhileListing = new Set();
      this.forgetIfDone(rep);
    }
    const commands = failed.sort(byTicket).map((ticket) => {
      const waited = this.waiting.get(ticket);
      this.waiting.delete(ticket);
      return this.fail(ticket, waited.replica, "replica", REPLICA_REMOVED);
    });
    for (const route of placeAgain.sort((a, b) => byTicket(a.ticket, b.ticket))) {
      commands.push(...this.placeRoute(route));
    }
    return [...commands, ...this.ensurePins()];
  }

  forgetIfDone(rep) {
    if (rep.outstanding === 0 && rep.held.size === 0 && this.replicas.get(rep.id) === rep) {
      this.replicas.delete(rep.id);
    }
  }

  // -- §3.8 Failing replicas, §3.9 Waiting for room ---------------------------------------------

  // [health]
  replicaFailed({ replica, message }) {
    if (!isName(replica)) throw invalid("replica", replica);
    if (typeof message !== "string") throw invalid("message", message);
    const rep = this.inUse(replica);
    if (rep) this.failure(rep);
    return [];
  }

  // [blame]: each replica that answered a 5xx to a request another then served failed it.
  servedElsewhere({ replica, failed }) {
    if (!isName(replica)) throw invalid("replica", replica);
    if (!Array.isArray(failed)) throw invalid("failed", failed);
    for (const id of failed) if (!isName(id)) throw invalid("failed", id);
    for (const id of [...new Set(failed)].sort(byName)) {
      const rep = this.inUse(id);
      if (rep && id !== replica) this.failure(rep);
    }
    return [];
  }

  // [blame]: a second replica's server error for one request is the request's fault.
  blame(replica, failed = []) {
    return failed.some((id) => id !== replica) ? "request" : "replica";
  }

  failure(rep) {
    rep.failures += 1;
    const wait = this.backoff * 2 ** Math.min(rep.failures - 1, 32);
    rep.avoidUntil = this.now + Math.min(wait, this.maxBackoff);
  }

  healthy(rep) {
    rep.failures = 0;
    rep.avoidUntil = 0;
  }

  avoided(rep) {
    return rep.avoidUntil > this.now;
  }

  // Adapters held or loading that no request could give up: what the cap counts.
  occupied(rep) {
    return rep.held.size + rep.loading.size - rep.idle.size;
  }

  // [cap]: admit the queue, first come first served, while there is room.
  admitQueue(rep) {
    const commands = [];
    const queue = rep.queue.waiters;
    while (queue.length > 0) {
      const { ticket, adapter, path } = queue[0];
      const known = rep.held.has(adapter) || rep.loading.has(adapter) || rep.unloading.has(adapter);
      if (!known && this.capped(rep)) break;
      queue.shift();
      this.waiting.delete(ticket);
      commands.push(...this.admit(ticket, rep, adapter, path));
    }
    return commands;
  }

  // -- §3.13 Several routers ---------------------------------------------------------------------

  // -- §3.15 Reading engines, and requests the machine places ------------------------------------

  // [cap]: at its cap, even with every idle adapter unloaded, one more load would pass the cap; or the
  // load would take a victim while the engine queues (its capacity known, more granted there than it
  // runs), or, with the engine's max_loras known, while more adapters are in use than one batch runs:
  // either way one may wait unused in the engine's queue, and the engine would drop it (§3.16).
  capped(rep) {
    if (this.headroom === null) return false;
    const capacity = this.capacity(rep);
    const full = rep.held.size + rep.loading.size >= this.line(rep);
    if (full && capacity !== null && rep.granted + rep.others > capacity) return true;
    const occupied = this.occupied(rep);
    if (occupied >= this.cap(rep)) return true;
    return rep.maxLoras !== null && rep.held.size + rep.loading.size >= this.line(rep) && occupied > rep.maxLoras;
  }

  // [read]: a cold load there waits for a reading: it would take a victim, and the replica wants one.
  needsReading(rep) {
    return this.wantsReading(rep) && rep.held.size + rep.loading.size + 1 > this.line(rep);
  }

  // [read]: an eviction there waits for a fresh reading: the last one named another router's adapter,
  // or the first is on its way.
  wantsReading(rep) {
    if (!this.readEngine) return false;
    return rep.namesAdapters ? rep.foreign : rep.read !== null;
  }

  // [read]: a request placed there asks for a reading nothing waits for.
  stale(rep) {
    if (!this.readEngine || !rep.namesAdapters || rep.read !== null) return false;
    if (rep.foreign && rep.served - rep.readServed >= 4) return true;
    return rep.sampled !== null && this.capacity(rep) === null && this.load(rep) > rep.calm;
  }

  // [settle]: a load landed; unload the excess over the line, now or once a reading says what runs.
  settle(rep) {
    if (rep.held.size <= this.line(rep) || rep.idle.size === 0) return [];
    if (this.wantsReading(rep)) {
      rep.settle = true;
      return rep.read ? [] : [this.startRead(rep)];
    }
    return this.unloadExcess(rep);
  }

  // [settle]: the read a landed load waited for is answered.
  settled(rep) {
    if (!rep.settle) return [];
    rep.settle = false;
    return this.unloadExcess(rep);
  }

  // [settle]: the least recently used idle adapters, down to the line, each unloaded as it is taken.
  unloadExcess(rep) {
    const commands = [];
    for (let excess = rep.held.size - this.line(rep); excess > 0 && rep.idle.size > 0; excess -= 1) {
      commands.push(this.unloadIdle(rep, this.victim(rep)));
    }
    return commands;
  }

  // Unload an adapter idle on rep now ([settle], [dismiss]): no request may take it.
  unloadIdle(rep, adapter) {
    this.drop(rep, adapter);
    const unload = { kind: "unload", replica: rep, adapter, op: null, waiters: [] };
    rep.unloading.set(adapter, unload);
    return this.issueUnload(unload);
  }

  startRead(rep) {
    const read = {
      kind: "read", replica: rep, op: this.newOp(), waiters: [], inFlight: rep.inFlight, served: rep.served,
      ended: new Set(),
    };
    rep.read = read;
    rep.outstanding += 1;
    this.ops.set(read.op, read);
    return { type: "read_engine", read: read.op, replica: rep.id };
  }

  awaitReading(rep, waiter) {
    const commands = rep.read ? [] : [this.startRead(rep)];
    rep.read.waiters.push(waiter);
    this.waiting.set(waiter.ticket, rep.read);
    return commands;
  }

  readOp(number) {
    const read = isInteger(number) ? this.ops.get(number) : undefined;
    if (!read || read.kind !== "read") {
      throw new UsageError("UnknownOperationError", `read ${number} is not awaiting its answer`);
    }
    return read;
  }

  // Counts the read as answered; false when the answer is to be ignored (abandoned).
  finishRead(read) {
    this.ops.delete(read.op);
    const rep = read.replica;
    if (this.answered(rep) || rep.read !== read) return false;
    rep.read = null;
    return true;
  }

  // [reading]: the engine's set replaces the last reading; then the read's waiters go on.
  readingReceived({ read: number, adapters, running = null, waiting = null, max_loras = null }) {
    const read = this.readOp(number);
    if (adapters !== null) {
      if (!Array.isArray(adapters)) throw invalid("adapters", adapters);
      for (const name of adapters) if (!isName(name)) throw invalid("adapters", name);
    }
    for (const [field, value] of [["running", running], ["waiting", waiting], ["max_loras", max_loras]]) {
      if (value !== null && (!isInteger(value) || value < 0n)) throw invalid(field, value);
    }
    if (!this.finishRead(read)) return [];
    const rep = read.replica;
    rep.namesAdapters = adapters !== null;
    rep.readServed = read.served;
    if (running !== null && waiting !== null) { // [load]
      const [run, wait] = [Number(running), Number(waiting)];
      rep.sampled = [run, wait];
      rep.others = Math.max(0, run + wait - read.inFlight);
      rep.ran = Math.max(rep.ran, run);
      if (wait > 0) rep.seqs = Math.max(rep.ran, rep.seqs ?? 1);
      else rep.calm = Math.max(rep.calm, read.inFlight + rep.others); // that load, and nothing waited
    }
    const raised = max_loras !== null && Number(max_loras) > (rep.maxLoras ?? 0);
    if (max_loras !== null && max_loras > 0n) rep.maxLoras = Number(max_loras);
    const counted = running !== null && waiting !== null;
    const commands = this.newReading(rep, adapters ?? [], false, counted && rep.others > 0, read.ended);
    if (raised) commands.push(...this.admitQueue(rep)); // [cap]: the cap may have risen with it
    return [...commands, ...this.settled(rep), ...this.unpark(read)];
  }

  // [read-failed]: after a listing received since the last reading, a failed read is an empty one.
  readingFailed({ read: number, message }) {
    const read = this.readOp(number);
    if (typeof message !== "string") throw invalid("message", message);
    if (!this.finishRead(read)) return [];
    const rep = read.replica;
    const commands = rep.listedSinceReading ? this.newReading(rep, [], true) : [];
    return [...commands, ...this.settled(rep), ...this.unpark(read)];
  }

  // The read's waiters, in order: requested ones admitted afresh, routed ones placed again.
  unpark(read) {
    const commands = [];
    for (const { ticket, adapter, path, route } of read.waiters) {
      this.waiting.delete(ticket);
      if (route === null) commands.push(...this.admit(ticket, read.replica, adapter, path));
      else commands.push(...this.placeRoute(route));
    }
    return commands;
  }

  // [route]
  routed({ ticket, adapter, path, model = null, exclude = [], now = null }) {
    if (!isInteger(ticket) || ticket <= this.highest) {
      throw new UsageError("TicketOrderError", `ticket ${ticket} is not an integer above ${this.highest}`);
    }
    if (!isName(adapter)) throw invalid("adapter", adapter);
    if (!isName(path)) throw invalid("path", path);
    if (model !== null && !isName(model)) throw invalid("model", model);
    if (!Array.isArray(exclude)) throw invalid("exclude", exclude);
    for (const id of exclude) if (!isName(id)) throw invalid("exclude", id);
    if (now !== null && !isNumber(now)) throw invalid("now", now);
    // [time] first, when the request carries the clock: its checks before any change.
    const commands = now === null ? [] : this.timeAdvanced({ now });
    this.highest = ticket;
    return [...commands, ...this.placeRoute({ ticket, adapter, path, model, exclude, read: new Set() })];
  }

  placeRoute(route) {
    const { ticket, adapter, path, model, exclude } = route;
    const { replica, placed } = this.place(adapter, { model, exclude });
    if (replica === null) {
      const of = model === null ? "" : ` of model '${model}'`;
      this.failures.replica = (this.failures.replica ?? 0) + 1;
      const message = `no replica${of} to place '${adapter}' on: each is failing, excluded, or not in use`;
      return [{ type: "fail", ticket, fault: "replica", message }];
    }
    const rep = this.replicas.get(replica);
    const refused = this.refused.get(adapter);
    if (refused && !rep.held.has(adapter)) {
      if (refused.until > this.now) { // [refuse]
        this.failures.adapter = (this.failures.adapter ?? 0) + 1;
        return [{ type: "fail", ticket, fault: "adapter", message: refused.message }];
      }
      this.refused.delete(adapter);
    }
    if (this.oldCopyWait(adapter, { replica, placed })) { // [renew]: parked, counted on no replica
      if (!this.parked.has(adapter)) this.parked.set(adapter, []);
      this.parked.get(adapter).push(route);
      this.waiting.set(ticket, { kind: "parked", adapter });
      return [];
    }
    const full = placed === "evict" || placed === "over" || placed === "wait";
    if (full && !route.read.has(replica) && this.needsReading(rep)) {
      route.read.add(replica);
      return this.awaitReading(rep, { ticket, adapter, path, route });
    }
    this.count(rep, adapter);
    const commands = [{ type: "assign", ticket, replica, placed }, ...this.admit(ticket, rep, adapter, path)];
    if (this.stale(rep)) commands.push(this.startRead(rep)); // [read]: nothing waits for it
    return commands;
  }

  // The reading replaces the last one: named adapters leave idle; ones no longer named, held with no
  // request of ours on them, come back to its end, in name order, and the queue may get the room.
  // One that names only our own running requests stands as an empty one; a failed read keeps `foreign`.
  newReading(rep, adapters, failed = false, others = false, ended = new Set()) {
    rep.listedSinceReading = false;
    let names = new Set(adapters);
    if (!failed) {
      // Ours: an adapter this router runs on there, or ran on while the read was out.
      rep.foreign = others || [...names].some((name) => !(rep.held.get(name)?.inUse > 0 || ended.has(name)));
      if (!rep.foreign) names = new Set();
      // Another router's load: not held, loading or unloading here (the engine names those too).
      const theirs = (name) => !rep.held.has(name) && !rep.loading.has(name) && !rep.unloading.has(name);
      if (this.sharedInterval !== null && [...names].some(theirs)) {
        // [time]: another router's adapter there: listed sooner, for a listing interval
        rep.sharedUntil = this.now + this.interval;
        rep.due = Math.min(rep.due, this.now + this.intervalOf(rep));
      }
    }
    const before = rep.named;
    rep.named = names;
    for (const name of rep.named) rep.idle.delete(name);
    let freed = false;
    const commands = [];
    for (const name of [...before].filter((n) => !rep.named.has(n)).sort(byName)) {
      const held = rep.held.get(name);
      if (!held || held.inUse !== 0) continue;
      if (rep.unloading.has(name)) { // [renew]: an old copy nothing runs on any more
        commands.push(...this.retire(rep, held));
        freed = true;
      } else if (!this.pins.has(name)) {
        rep.idle.set(name, this.tick());
        freed = true;
      }
    }
    return freed ? [...commands, ...this.admitQueue(rep)] : commands;
  }

  // Whether a held adapter with no request of ours on it may be idle: not pinned, not named by a reading.
  idleable(rep, name) {
    return !this.pins.has(name) && !rep.named.has(name);
  }

  // -- §3.10 Pinned adapters ---------------------------------------------------------------------

  // [pin]
  adapterPinned({ adapter, path, copies, model, until_held: untilHeld = false }) {
    if (!isName(adapter)) throw invalid("adapter", adapter);
    if (!isName(path)) throw invalid("path", path);
    if (!isInteger(copies) || copies < 1n) throw invalid("copies", copies);
    if (model !== null && !isName(model)) throw invalid("model", model);
    if (typeof untilHeld !== "boolean") throw invalid("until_held", untilHeld);
    // [warm]: a pin until a copy is held, where none is and the adapter is not pinned already.
    if (untilHeld && (this.pins.has(adapter) || this.holds(adapter, model))) return [];
    this.pins.set(adapter, { path, copies: Number(copies), model, untilHeld });
    for (const rep of this.replicas.values()) if (!rep.removed) rep.idle.delete(adapter);
    return this.ensurePins();
  }

  // [warm]: whether a replica in use (of `model`, if given) holds a copy that serves requests.
  holds(adapter, model) {
    for (const rep of this.replicas.values()) {
      if (rep.removed || (model !== null && rep.model !== model)) continue;
      if (rep.held.has(adapter) && !rep.unloading.has(adapter)) return true;
    }
    return false;
  }

  // [warm]: `rep` holds `adapter` now: a pin of it until a copy is held is lifted.
  warmed(rep, adapter) {
    const pin = this.pins.get(adapter);
    if (!pin || !pin.untilHeld || (pin.model !== null && pin.model !== rep.model)) return [];
    return this.adapterUnpinned({ adapter });
  }

  adapterUnpinned({ adapter }) {
    if (!isName(adapter)) throw invalid("adapter", adapter);
    if (!this.pins.delete(adapter)) return [];
    const commands = [];
    for (const rep of [...this.replicas.values()].sort((a, b) => byName(a.id, b.id))) {
      const held = rep.held.get(adapter);
      if (held && held.inUse === 0 && !rep.removed && !rep.named.has(adapter)) {
        rep.idle.set(adapter, this.tick()); // evictable again, most recently used
        commands.push(...this.admitQueue(rep));
      }
      // A load of the adapter still out goes on, and lands as any other.
    }
    return commands;
  }

  // [forgive]: the next request asks an engine again; a pin that waited out the refusal loads now.
  refusalForgotten({ adapter }) {
    if (adapter !== undefined && adapter !== null && !isName(adapter)) throw invalid("adapter", adapter);
    let forgot;
    if (adapter === undefined || adapter === null) {
      forgot = this.refused.size > 0;
      this.refused.clear();
    } else {
      forgot = this.refused.delete(adapter);
    }
    return forgot ? this.ensurePins() : [];
  }


  // [renew] (§3.17): from now on no request gets a copy loaded before; none goes under a running request.
  adapterChanged({ adapter }) {
    if (!isName(adapter)) throw invalid("adapter", adapter);
    this.refused.delete(adapter);
    const commands = [];
    for (const rep of [...this.replicas.values()].sort((a, b) => byName(a.id, b.id))) {
      const unload = rep.unloading.get(adapter);
      if (unload) {
        if (unload.op === null) unload.renew = true;
        continue;
      }
      const held = rep.held.get(adapter);
      if (!held && !rep.loading.has(adapter)) continue;
      rep.unloading.set(adapter, {
        kind: "unload", replica: rep, adapter, op: null, waiters: [], since: 0, stamp: 0, renew: true,
      });
      rep.idle.delete(adapter);
      if (held) commands.push(...this.retire(rep, held));
    }
    return [...commands, ...this.ensurePins()];
  }

  // [renew]: an old held copy goes once nothing runs on it: not this router's requests, nor what the
  // last reading names (then read again, for the requests that will wait).
  retire(rep, held) {
    if (held.inUse > 0 || rep.removed) return [];
    if (rep.named.has(held.adapter)) return this.readEngine && !rep.read ? [this.startRead(rep)] : [];
    const unload = rep.unloading.get(held.adapter);
    this.drop(rep, held.adapter);
    return [this.issueUnload(unload)];
  }

  // -- §3.18 The operator's hand -------------------------------------------------------------------

  // [dismiss]: only an adapter in the replica's idle goes (§4.1: replica, then adapter, then idle),
  // unloaded as [settle] unloads one.
  adapterDismissed({ replica, adapter }) {
    const rep = this.inUse(replica);
    if (!rep) throw new UsageError("UnknownReplicaError", `replica ${replica} is not in use`);
    if (!isName(adapter)) throw invalid("adapter", adapter);
    if (!rep.idle.has(adapter)) throw new UsageError("NotIdleError", `${adapter} is not idle on ${replica}`);
    return [this.unloadIdle(rep, adapter)];
  }

  // An old copy of a changed adapter: held or loading, and its unload waiting for it ([renew]).
  old(rep, name) {
    return rep.unloading.has(name) && (rep.held.has(name) || rep.loading.has(name));
  }

  // Making the pins good: loads where placement finds room, for pins short of their copies.
  ensurePins() {
    const commands = [];
    for (const adapter of [...this.pins.keys()].sort(byName)) {
      const pin = this.pins.get(adapter);
      if ((this.refused.get(adapter)?.until ?? -Infinity) > this.now) continue; // [refuse]
      const inUse = [...this.replicas.values()].filter((rep) => !rep.removed);
      const holders = inUse.filter((rep) => (rep.held.has(adapter) || rep.loading.has(adapter)) && !this.old(rep, adapter));
      const ofModel = (rep) => pin.model === null || rep.model === pin.model;
      const have = holders.filter((rep) => !this.avoided(rep) && ofModel(rep));
      // Never where it is held, loading or unloading (a load and an unload of one adapter never cross).
      const skip = inUse.filter((rep) => rep.unloading.has(adapter) || holders.includes(rep)).map((rep) => rep.id);
      for (let i = have.length; i < pin.copies; i += 1) {
        const { replica, placed } = this.placeCold(adapter, { model: pin.model, exclude: skip });
        if (placed !== "free" && placed !== "evict") break;
        commands.push(...this.cold(null, this.replicas.get(replica), adapter, pin.path));
        skip.push(replica);
      }
    }
    return commands;
  }

  // -- §3.7 again ---------------------------------------------------------------------------------

  // [limit]
  limitSet({ model, limit }) {
    if (!isName(model)) throw invalid("model", model);
    if (!isInteger(limit) || limit < 1n) throw invalid("limit", limit);
    const commands = [];
    for (const rep of [...this.replicas.values()].sort((a, b) => byName(a.id, b.id))) {
      if (rep.removed || rep.model !== model) continue;
      rep.limit = Number(limit);
      commands.push(...this.admitQueue(rep));
    }
    return commands;
  }

  // -- §3.8 Queries -------------------------------------------------------------------------------

  inUse(id) {
    const rep = this.replicas.get(id);
    return rep && !rep.removed ? rep : undefined;
  }

  // [view]
  view(replicas, adapter) {
    const holders = new Set();
    const withRoom = new Set();
    for (const id of replicas) {
      const rep = this.inUse(id);
      if (!rep) {
        withRoom.add(id);
        continue;
      }
      if ((rep.held.has(adapter) || rep.loading.has(adapter)) && !this.old(rep, adapter)) holders.add(id);
      if (rep.held.size + rep.loading.size < this.line(rep) && !this.avoided(rep)) withRoom.add(id);
    }
    return { holders: [...holders].sort(byName), with_room: [...withRoom].sort(byName) };
  }

  is_met(replica) {
    return Boolean(this.inUse(replica)?.met);
  }

  // [reading]: what the last reading names, in name order; empty for a replica not in use.
  named(replica) {
    return [...(this.inUse(replica)?.named ?? [])].sort(byName);
  }

  // [demand]: the adapter's count, 0 when it has none.
  demand(adapter) {
    return this.demand_.get(adapter) ?? 0;
  }

  // [refuse]: the refusal in force, or null (none, or run out, forgotten yet or not).
  refusal(adapter) {
    const refused = this.refused.get(adapter);
    return refused && refused.until > this.now ? { until: refused.until, message: refused.message } : null;
  }

  // The readings' view of an engine ([reading], [load]); null for a replica not in use.
  reading(replica) {
    const rep = this.inUse(replica);
    if (!rep) return null;
    const [running, waiting] = rep.sampled ?? [null, null];
    return {
      adapters: [...rep.named].sort(byName), foreign: rep.foreign, running, waiting, others: rep.others,
      load: this.load(rep), capacity: this.capacity(rep), max_loras: rep.maxLoras,
    };
  }

  // [statistics]
  statistics() {
    const replicas = {};
    for (const rep of this.replicas.values()) {
      if (rep.removed) continue;
      replicas[rep.id] = {
        model: rep.model, limit: rep.limit, met: rep.met,
        held: Object.fromEntries([...rep.held].map(([name, held]) => [name, held.inUse])),
        loading: [...rep.loading.keys()].sort(byName), unloading: [...rep.unloading.keys()].sort(byName),
        queued: rep.queue.waiters.length, in_flight: rep.inFlight,
        failing_until: this.avoided(rep) ? rep.avoidUntil : null,
      };
    }
    const warming = [...this.pins].filter(([, pin]) => pin.untilHeld).map(([name]) => name).sort(byName);
    return {
      loads: { ...this.loads }, evictions: { ...this.evictions }, grants: { ...this.grants },
      failures: { ...this.failures }, replicas, waiting: this.waiting.size, leases: this.leases.size,
      pins: Object.fromEntries([...this.pins].map(([name, pin]) => [name, pin.copies])),
      ...(warming.length ? { warming } : {}),
    };
  }

  // [place] (SPEC §3.12): where to send a request; a query that changes nothing.
  place(adapter, { model = null, exclude = [], load = {} } = {}) {
    if (!isName(adapter)) throw invalid("adapter", adapter);
    const busy = (rep) => this.load(rep) + Number(load[rep.id] ?? 0);
    const least = (rep) => [busy(rep), rep.served, -rendezvous(adapter, rep.id)];
    const holders = this.candidates(model, exclude)
      .filter((rep) => (rep.held.has(adapter) || rep.loading.has(adapter)) && !this.old(rep, adapter));
    const holder = holders.length ? best(holders.map((rep) => ({ rep, key: least(rep) }))).rep : null;
    const atHolder = (rep) => ({ replica: rep.id, placed: rep.held.has(adapter) ? "held" : "loading" });
    // [load]: a saturated replica's requests queue; with its capacity unknown it never is.
    const queue = (rep) => {
      const capacity = this.capacity(rep);
      return capacity === null ? null : Math.max(0, busy(rep) - capacity);
    };
    const capacity = holder ? this.capacity(holder) : null;
    if (holder && !(capacity !== null && busy(holder) >= capacity)) return atHolder(holder); // not saturated
    const cold = this.placeCold(adapter, { model, exclude, load, spread: true });
    if (cold.replica !== null) return cold;
    const other = this.placeCold(adapter, { model, exclude, load, least: true });
    if (!holder && other.replica === null) { // [renew]: wait where an old copy of it is being replaced
      const renewing = this.candidates(model, exclude).filter((rep) => this.old(rep, adapter));
      if (renewing.length === 0) return other;
      return { replica: best(renewing.map((rep) => ({ rep, key: least(rep) }))).rep.id, placed: "wait" };
    }
    if (!holder) return other;
    const [mine, theirs] = [queue(holder), other.replica === null ? null : queue(this.replicas.get(other.replica))];
    // A load costs a wait too, and a copy on an engine that queues stalls its queue.
    if (mine !== null && theirs === 0 && mine >= 2) return other;
    return atHolder(holder);
  }

  // [place-base]: the least busy replica of the model, equal ones in turn from `turn`.
  place_base(model, { exclude = [], load = {}, turn = 0, healthy = [] } = {}) {
    const ids = [...this.replicas.values()].filter((rep) => !rep.removed && rep.model === model)
      .map((rep) => rep.id).sort(byName);
    const first = Number(turn); // integers may come as BigInt
    let chosen = null;
    let chosenKey = null;
    ids.forEach((id, i) => {
      const rep = this.replicas.get(id);
      if (exclude.includes(id) || (this.avoided(rep) && !healthy.includes(id))) return;
      const key = [this.load(rep) + Number(load[id] ?? 0), (((i - first) % ids.length) + ids.length) % ids.length];
      if (chosen === null || key[0] < chosenKey[0] || (key[0] === chosenKey[0] && key[1] < chosenKey[1])) {
        chosen = id;
        chosenKey = key;
      }
    });
    return chosen;
  }

  // [load]: this router's requests on the replica, and the others' as its last reading showed them.
  load(rep) {
    return rep.inFlight + rep.others;
  }

  capacity(rep) {
    return this.concurrency ?? rep.seqs;
  }

  candidates(model, exclude) {
    return [...this.replicas.values()].filter(
      (rep) => !rep.removed && rep.met && !this.avoided(rep) && !exclude.includes(rep.id)
        && (model === null || rep.model === model),
    );
  }

  // [place], a cold load: among candidates not holding or loading the adapter (with `spread`, only
  // those not at their cap and under three quarters of their capacity, when known), the least key;
  // `least` compares (at its cap, busy, served, -weight) alone.
  placeCold(adapter, { model = null, exclude = [], load = {}, spread = false, least = false }) {
    const busy = (rep) => this.load(rep) + Number(load[rep.id] ?? 0);
    const roomy = (rep) => {
      if (this.coldKind(rep) === 4) return false;
      const capacity = this.capacity(rep);
      return capacity === null || 4 * busy(rep) < 3 * capacity;
    };
    const candidates = this.candidates(model, exclude).filter(
      (rep) => !rep.held.has(adapter) && !rep.loading.has(adapter) && (!spread || roomy(rep)),
    );
    if (candidates.length === 0) return { replica: null, placed: null };
    const { rep } = best(candidates.map((r) => ({ rep: r, key: this.coldKey(r, adapter, busy(r), least) })));
    return { replica: rep.id, placed: ["free", "over", "evict", "over", "wait"][this.coldKind(rep)] };
  }

  coldKind(rep) {
    const count = rep.held.size + rep.loading.size;
    const line = this.line(rep);
    if (this.capped(rep)) return 4;
    if (count < line) return 0;
    if (rep.idle.size === 0) return count < line + this.overflow ? 1 : 3;
    return 2;
  }

  coldKey(rep, adapter, busy, least) {
    const last = [busy, rep.served, -rendezvous(adapter, rep.id)];
    const kind = this.coldKind(rep);
    if (least) return [kind === 4, ...last];
    if (kind !== 2) return [kind, busy, 0, 0, ...last.slice(1)];
    // The least busy first, then the victim's demand weight, then its idle stamp (a listed adapter's,
    // below 0, read as 0: every router reads a listed adapter alike).
    const victim = this.victim(rep);
    return [2, busy, this.weight(victim), Math.max(0, rep.idle.get(victim)), ...last.slice(1)];
  }

  // -- helpers ------------------------------------------------------------------------------------

  newOp() {
    const op = this.nextOp;
    this.nextOp += 1n;
    return op;
  }

  tick() {
    this.logical += 1;
    return this.logical;
  }

  fail(ticket, rep, fault, message) {
    rep.inFlight -= 1;
    this.failures[fault] = (this.failures[fault] ?? 0) + 1;
    return { type: "fail", ticket, fault, message };
  }
}

function count(counts, key) {
  counts[key] = (counts[key] ?? 0) + 1;
}

// The first of the least keys (SPEC's [place]: every key ends with the rendezvous hash, so ties are rare).
function best(keyed) {
  return keyed.reduce((a, b) => (compareKeys(b.key, a.key) < 0 ? b : a), keyed[0]);
}

function compareKeys(a, b) {
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

const MASK = 0xffffffffffffffffn;

// FNV-1a, 64 bits, of the UTF-8 bytes of a name.
function fnv(name) {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(name, "utf8")) h = ((h ^ BigInt(byte)) * 0x100000001b3n) & MASK;
  return h;
}

// SplitMix64's output from the state x.
function mix(x) {
  let z = (x + 0x9e3779b97f4a7c15n) & MASK;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

function rendezvous(adapter, replica) {
  return mix(fnv(adapter) ^ fnv(replica));
}
