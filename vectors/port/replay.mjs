// Replays the conformance vectors on the JavaScript port (machine.mjs), as SPEC.md §6.1 says a port must.
//
//   node vectors/port/replay.mjs vectors/hand vectors/hypothesis
//
// Prints each vector that fails, with its first difference, then `N passed, M failed` alone on the last
// line; exits non-zero on any failure (or when there was nothing to replay). Node.js only, no packages.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Machine, UsageError } from "./machine.mjs";

// JSON, with integers (numbers written without a fraction or an exponent) read as BigInt: JavaScript has
// one number type, and SPEC §1.1 tells `2` (an integer) from `2.0` (not one).
export function parse(text) {
  let at = 0;
  const token = /\s*(?:([{}[\]:,])|("(?:[^"\\]|\\.)*")|(true|false|null)|(-?\d+)(\.\d+)?([eE][-+]?\d+)?)/y;
  function next() {
    token.lastIndex = at;
    const m = token.exec(text);
    if (!m) throw new SyntaxError(`bad JSON at ${at}`);
    at = token.lastIndex;
    return m;
  }
  function value(m = next()) {
    if (m[2]) return JSON.parse(m[2]);
    if (m[3]) return JSON.parse(m[3]);
    if (m[4]) return m[5] || m[6] ? Number(m[0]) : BigInt(m[4]);
    if (m[1] === "[") {
      const list = [];
      for (let t = next(); t[1] !== "]"; t = next()) {
        if (t[1] === ",") t = next();
        list.push(value(t));
      }
      return list;
    }
    if (m[1] === "{") {
      const object = {};
      for (let t = next(); t[1] !== "}"; t = next()) {
        if (t[1] === ",") t = next();
        const key = JSON.parse(t[2]);
        next(); // the colon
        object[key] = value();
      }
      return object;
    }
    throw new SyntaxError(`unexpected ${m[0]} at ${at}`);
  }
  return value();
}

// Equal as JSON values (SPEC §6.1): numbers by value, whatever their writing (30 == 30.0, 3n == 3).
export function equal(a, b) {
  const numeric = (v) => typeof v === "number" || typeof v === "bigint";
  if (numeric(a) && numeric(b)) return a == b; // eslint-disable-line eqeqeq -- BigInt against Number
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => equal(x, b[i]));
  }
  if (a !== null && b !== null && typeof a === "object" && typeof b === "object") {
    const keys = Object.keys(a);
    if (keys.length !== Object.keys(b).length) return false;
    return keys.every((k) => Object.hasOwn(b, k) && equal(a[k], b[k]));
  }
  return a === b;
}

const show = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? Number(x) : x));

function query(machine, step) {
  switch (step.query) {
    case "view": return machine.view(step.replicas, step.adapter);
    case "statistics": return machine.statistics();
    case "next_due": return machine.next_due();
    case "is_met": return machine.is_met(step.replica);
    case "named": return machine.named(step.replica);
    case "reading": return machine.reading(step.replica);
    case "demand": return machine.demand(step.adapter);
    case "refusal": return machine.refusal(step.adapter);
    case "blame": return machine.blame(step.replica, step.failed);
    case "place":
      return machine.place(step.adapter, { model: step.model, exclude: step.exclude, load: step.load });
    case "place_base":
      return machine.place_base(step.model, {
        exclude: step.exclude, load: step.load, turn: step.turn, healthy: step.healthy,
      });
    default: throw new Error(`unknown query ${step.query}`);
  }
}

// The formats replayed, each with its names of the queries format /2 renamed (SPEC §6.3).
const FORMATS = {
  "lorafleet-vector/2": {},
  "lorafleet-vector/1": { reported: "named" },
};

// The first difference between the vector and the port, or null when it replays exactly.
export function replay(vector) {
  if (!Object.hasOwn(FORMATS, vector.format)) return `format ${vector.format}`;
  const renamed = FORMATS[vector.format];
  const machine = new Machine(vector.config);
  for (const [index, step] of vector.steps.entries()) {
    const at = `step ${index}`;
    if ("query" in step) {
      const name = Object.hasOwn(renamed, step.query) ? renamed[step.query] : step.query;
      if (name === "reported") {
        return `${at}: ${vector.format} has no query "reported", the lorafleet-vector/1 name of "named"`;
      }
      const got = query(machine, { ...step, query: name });
      if (equal(got, step.result)) continue;
      return `${at}: ${step.query} expected ${show(step.result)}, got ${show(got)}`;
    }
    const call = "hit" in step ? () => machine.hit(step.hit) : () => machine.handle(step.event);
    const what = "hit" in step ? `hit ${show(step.hit)}` : show(step.event);
    // §4.2: a refused call changes nothing that statistics or next_due can show.
    const before = [machine.statistics(), machine.next_due()];
    let got;
    try {
      got = call();
    } catch (error) {
      if (!(error instanceof UsageError)) throw error;
      if (error.name !== step.error) return `${at}: ${what} raised ${error.name}: ${error.message}`;
      const after = [machine.statistics(), machine.next_due()];
      if (!equal(after, before)) {
        return `${at}: ${what} raised ${error.name} but changed ${show(before)} to ${show(after)}`;
      }
      continue;
    }
    if ("error" in step) return `${at}: ${what} should raise ${step.error}, gave ${show(got)}`;
    const want = "hit" in step ? step.result : step.commands;
    if (!equal(got, want)) return `${at}: ${what}\n    expected ${show(want)}\n    got      ${show(got)}`;
  }
  return null;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  let passed = 0, failed = 0;
  for (const folder of process.argv.slice(2)) {
    for (const file of readdirSync(folder).filter((f) => f.endsWith(".json")).sort()) {
      let problem;
      try {
        problem = replay(parse(readFileSync(join(folder, file), "utf8")));
      } catch (error) {
        problem = `crashed: ${error.stack}`;
      }
      if (problem === null) passed += 1;
      else {
        failed += 1;
        console.log(`${join(folder, file)}: ${problem}`);
      }
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  // exitCode, not exit(): exit() drops what a pipe has not taken yet, and a slow reader (mutants.mjs on a
  // loaded machine) then misses the summary.
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}
