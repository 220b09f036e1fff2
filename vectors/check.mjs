// An independent reader of the conformance vectors: Node.js, no lorafleet, no dependencies.
//
//   node vectors/check.mjs vectors/hand vectors/hypothesis
//
// It shows that the format needs nothing of Python, and checks what a vector must satisfy on its own:
// its shape, that new tickets rise, that operation numbers are unique and rise in the order the calls
// go out, that every finish names a call issued before it and not yet finished, that each request ends
// at most once and only after it was made, and that queries hold plain JSON values.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const EVENTS = {
  replica_added: ["replica", "model", "limit"], replicas_removed: ["replicas"], limit_set: ["model", "limit"],
  time_advanced: ["now"], standing_by: ["on"], requested: ["ticket", "replica", "adapter", "path"], released: ["ticket"],
  cancelled: ["ticket"], load_finished: ["load", "outcome", "message"], unload_finished: ["unload", "outcome", "message"],
  listing_received: ["listing", "adapters"], listing_failed: ["listing", "message"], adapter_missing: ["replica", "adapter", "ticket"],
  replica_failed: ["replica", "message"], served_elsewhere: ["replica", "failed"], adapter_pinned: ["adapter", "path", "copies", "model"],
  adapter_unpinned: ["adapter"], refusal_forgotten: ["adapter"], adapter_changed: ["adapter"],
  adapter_dismissed: ["replica", "adapter"], routed: ["ticket", "adapter", "path", "model", "exclude"],
  reading_received: ["read", "adapters", "running", "waiting", "max_loras"], reading_failed: ["read", "message"],
};
const COMMANDS = {
  issue_load: ["load", "replica", "adapter", "path"], issue_unload: ["unload", "replica", "adapter"],
  read_listing: ["listing", "replica"], read_engine: ["read", "replica"], assign: ["ticket", "replica", "placed"],
  grant: ["ticket", "how"], fail: ["ticket", "fault", "message"], mark_met: ["replica"],
};
// The queries of each format: /1, still accepted, called `named` "reported" (SPEC.md §6.3).
const QUERIES = {
  "lorafleet-vector/2": [
    "view", "statistics", "next_due", "is_met", "named", "reading", "demand", "refusal", "blame", "place", "place_base",
  ],
  "lorafleet-vector/1": ["view", "statistics", "next_due", "is_met", "reported", "reading", "blame", "place"],
};
const OPERATION = { issue_load: "load", issue_unload: "unload", read_listing: "listing", read_engine: "read" };
const FINISH = { load_finished: ["load", "issue_load"], unload_finished: ["unload", "issue_unload"],
  listing_received: ["listing", "read_listing"], listing_failed: ["listing", "read_listing"],
  reading_received: ["read", "read_engine"], reading_failed: ["read", "read_engine"] };

// Fields an event may leave out (SPEC.md 6.3), each with the check a written one must pass.
const OPTIONAL = {
  routed: { now: (v) => v === null || typeof v === "number" },
  adapter_pinned: { until_held: (v) => typeof v === "boolean" },
};

function fields(kind, object, table) {
  const want = table[object.type];
  if (!want) throw new Error(`unknown ${kind} type ${JSON.stringify(object.type)}`);
  const optional = (kind === "event" && OPTIONAL[object.type]) || {};
  for (const [name, ok] of Object.entries(optional)) {
    if (name in object && !ok(object[name])) throw new Error(`${object.type} has ${name} ${JSON.stringify(object[name])}`);
  }
  const keys = Object.keys(object).filter((k) => k !== "type" && !(k in optional)).sort();
  if (JSON.stringify(keys) !== JSON.stringify([...want].sort())) {
    throw new Error(`${object.type} has fields ${keys}, wants ${want}`);
  }
}

function check(vector) {
  for (const key of ["format", "name", "description", "rules", "config", "steps"]) {
    if (!(key in vector)) throw new Error(`no ${key}`);
  }
  if (!Object.hasOwn(QUERIES, vector.format)) throw new Error(`format ${vector.format}`);
  const queries = QUERIES[vector.format];
  let lastTicket = 0, lastOp = 0;
  const issued = new Map(), finished = new Set(), ended = new Set(), asked = new Set();
  vector.steps.forEach((step, i) => {
    const at = `step ${i}`;
    try {
      if ("query" in step) {
        if (!queries.includes(step.query)) throw new Error(`query ${step.query} in ${vector.format}`);
        return;
      }
      if ("hit" in step) {
        // The shortcut for a warm request: true is a request granted at once, false changed nothing.
        if ("error" in step || step.result === false) return;
        const ticket = step.hit.ticket;
        if (!Number.isInteger(ticket) || ticket <= lastTicket) throw new Error(`ticket ${ticket} does not rise`);
        lastTicket = ticket;
        asked.add(ticket);
        ended.add(ticket);
        return;
      }
      const event = step.event;
      if ("error" in step) return; // a refused event changes nothing
      fields("event", event, EVENTS);
      if (event.type === "requested" || event.type === "routed") {
        if (!Number.isInteger(event.ticket) || event.ticket <= lastTicket) throw new Error(`ticket ${event.ticket} does not rise`);
        lastTicket = event.ticket;
        asked.add(event.ticket);
      }
      const finish = FINISH[event.type];
      if (finish) {
        const op = event[finish[0]];
        if (issued.get(op) !== finish[1]) throw new Error(`${event.type} ${op} was not issued as ${finish[1]}`);
        if (finished.has(op)) throw new Error(`${event.type} ${op} finished twice`);
        finished.add(op);
      }
      for (const command of step.commands) {
        fields("command", command, COMMANDS);
        const opKey = OPERATION[command.type];
        if (opKey) {
          const op = command[opKey];
          if (!Number.isInteger(op) || issued.has(op)) throw new Error(`operation ${op} reused`);
          issued.set(op, command.type);
          lastOp = Math.max(lastOp, op);
        } else if (command.type === "mark_met") {
          // a replica's first listing was answered: nothing to check on its own
        } else if (command.type === "assign") {
          // a routed request goes to a replica: it must have been asked, and not have ended
          if (!asked.has(command.ticket) || ended.has(command.ticket)) throw new Error(`assign of ticket ${command.ticket}`);
        } else {
          if (!asked.has(command.ticket)) throw new Error(`${command.type} for ticket ${command.ticket}, never requested`);
          if (ended.has(command.ticket)) throw new Error(`ticket ${command.ticket} ended twice`);
          ended.add(command.ticket);
        }
      }
    } catch (error) {
      throw new Error(`${at}: ${error.message}`);
    }
  });
}

let count = 0, bad = 0;
for (const folder of process.argv.slice(2)) {
  for (const file of readdirSync(folder).filter((f) => f.endsWith(".json")).sort()) {
    count += 1;
    try {
      check(JSON.parse(readFileSync(join(folder, file), "utf8")));
    } catch (error) {
      bad += 1;
      console.log(`${join(folder, file)}: ${error.message}`);
    }
  }
}
console.log(`${count - bad} passed, ${bad} failed`);
process.exit(bad === 0 && count > 0 ? 0 : 1);
