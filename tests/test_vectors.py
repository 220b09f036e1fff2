"""The conformance vectors: each is valid against the schema and replays exactly on the machine."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lorafleet import AdapterStateMachine, Command, Event, Released, Requested
from lorafleet.vectors import replay

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
SCHEMA = json.loads((VECTORS / "schema.json").read_text())
jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
"""Built once: ``jsonschema.validate`` builds one per call, most of each vector's time."""
FILES = sorted(VECTORS.glob("hand/*.json")) + sorted(VECTORS.glob("hypothesis/*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_vector_replays(path: Path) -> None:
    vector = load(path)
    VALIDATOR.validate(vector)
    assert vector["name"] == path.stem
    problems = replay(vector)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


class Spelled:
    """A machine fed its requests and releases through ``request`` and ``release``, whose fast paths
    skip ``handle`` (``request`` checks a [hit] by code of its own): every event else goes to
    ``handle``, every other attribute is the machine's."""

    def __init__(self, machine: AdapterStateMachine) -> None:
        self.machine = machine

    def handle(self, event: Event) -> list[Command]:
        match event:
            case Requested():
                m = self.machine
                return m.request(event.ticket, replica=event.replica, adapter=event.adapter, path=event.path)
            case Released():
                return self.machine.release(event.ticket)
            case _:
                return self.machine.handle(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.machine, name)


def test_every_vector_replays_alike_through_request_and_release() -> None:
    problems = {}
    for path in FILES:
        vector = load(path)
        spelled = Spelled(AdapterStateMachine(**vector["config"]))
        found = replay(vector, spelled)  # type: ignore[arg-type]
        if found:
            problems[path.name] = found
    assert not problems


def test_there_are_several_hundred_vectors_covering_every_rule_and_seed_fault() -> None:
    assert len(FILES) >= 300
    hand = [load(p) for p in VECTORS.glob("hand/*.json")]
    covered = {rule for vector in hand for rule in vector["rules"]}
    assert covered == set(SCHEMA["$defs"]["rule"]["enum"])


def test_the_hand_vectors_are_what_the_generator_writes() -> None:
    sys.path.insert(0, str(VECTORS))
    import generate

    for vector in generate.hand_vectors():
        path = VECTORS / "hand" / f"{vector['name']}.json"
        assert path.read_text() == generate.dump(vector), f"{path.name} is stale: run vectors/generate.py"


def test_a_difference_names_the_step() -> None:
    vector = load(VECTORS / "hand" / "join-waits-for-the-one-load-and-is-granted-joined.json")
    step = next(s for s in vector["steps"] if s.get("commands") and s["commands"][0]["type"] == "grant")
    step["commands"][0]["how"] = "hit"
    (problem,) = replay(vector)
    assert problem.startswith(f"step {vector['steps'].index(step)}: ")
    assert '"how": "hit"' in problem
    assert '"how": "loaded"' in problem


NAMED = VECTORS / "hand" / "reading-a-reading-naming-another-adapter-keeps-all-it-names-out-of-idle.json"
"""A vector that asks what a reading names, and gets an answer that is not empty."""


def as_format_1(vector: dict[str, Any]) -> dict[str, Any]:
    """``vector`` as format /1 wrote it: the query ``named`` was called ``reported`` (SPEC.md 6.3)."""
    steps = [{**s, "query": "reported"} if s.get("query") == "named" else s for s in vector["steps"]]
    return {**vector, "format": "lorafleet-vector/1", "steps": steps}


def test_a_format_1_vector_still_replays_reading_reported_as_named() -> None:
    old = as_format_1(load(NAMED))
    assert {"query": "reported", "replica": "r", "result": ["a", "x"]} in old["steps"]
    assert replay(old) == []
    wrong = copy.deepcopy(old)
    next(s for s in wrong["steps"] if s.get("query") == "reported")["result"] = ["a"]
    assert replay(wrong) != []  # the alias is asked, not skipped


def test_format_2_has_no_query_reported() -> None:
    vector = {**as_format_1(load(NAMED)), "format": "lorafleet-vector/2"}
    index = next(i for i, s in enumerate(vector["steps"]) if s.get("query") == "reported")
    assert replay(vector) == [
        f"step {index}: lorafleet-vector/2 has no query 'reported', the lorafleet-vector/1 name of 'named'"
    ]
    assert not VALIDATOR.is_valid(vector)


def node() -> str:
    """The Node.js binary; the test is skipped without it, except in CI, which must run it."""
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the vectors on Node.js, but node is not on PATH")
        pytest.skip("the checks in another language run on Node.js")
    return found


def run_node(script: str, *folders: Path, ok: bool = True) -> str:
    """Run ``script`` on ``folders`` (the vectors by default); it must succeed, or with ``ok`` False fail."""
    done = subprocess.run(
        [node(), str(VECTORS / script), *map(str, folders or (VECTORS / "hand", VECTORS / "hypothesis"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stdout


def test_an_independent_reader_in_another_language_accepts_every_vector() -> None:
    assert f"{len(FILES)} passed, 0 failed" in run_node("check.mjs")


def test_a_second_implementation_written_from_the_spec_replays_every_vector() -> None:
    """vectors/port/, in JavaScript from SPEC.md alone: the proof that the spec and the vectors suffice."""
    last = run_node("port/replay.mjs").splitlines()[-1]
    assert last == f"{len(FILES)} passed, 0 failed"


def test_every_mutant_of_the_port_fails_a_vector() -> None:
    """vectors/port/mutants.mjs: each bug planted in the port fails a vector; a survivor wants one more."""
    out = run_node("port/mutants.mjs").splitlines()
    caught = sum(line.startswith("caught   ") for line in out)
    assert not [line for line in out if line.startswith(("SURVIVED", "BROKEN"))]
    assert caught > 0
    assert out[-1] == f"caught {caught}/{caught}"


def test_the_port_and_the_reader_take_format_1_and_refuse_reported_in_format_2(tmp_path: Path) -> None:
    """SPEC.md 6.3 in another language: /1's query ``reported`` is ``named``; /2 has no such query."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    vector = as_format_1(load(NAMED))
    (old / NAMED.name).write_text(json.dumps(vector))
    (new / NAMED.name).write_text(json.dumps({**vector, "format": "lorafleet-vector/2"}))
    assert run_node("port/replay.mjs", old).splitlines()[-1] == "1 passed, 0 failed"
    assert run_node("check.mjs", old).splitlines()[-1] == "1 passed, 0 failed"
    refused = run_node("port/replay.mjs", new, ok=False)
    assert 'lorafleet-vector/2 has no query "reported", the lorafleet-vector/1 name of "named"' in refused
    assert "query reported in lorafleet-vector/2" in run_node("check.mjs", new, ok=False)
