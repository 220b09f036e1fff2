"""[blame] in the shell: a forwarded request's server error (a 5xx) is the replica's fault until a second
replica answers the same request so, and a replica that failed is avoided only once another served it.

Over real HTTP against stand-ins, under asyncio and trio: ``route(after=...)`` passes over the replicas
a request tried, ``Lease.server_error`` says whose fault a 5xx is, and a retry's lease released after a
good answer sends ``ServedElsewhere`` (watched on the fleet's machine, every event's one way in).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import httpx
import pytest

from lorafleet import Command, Event, ReplicaFailed, ServedElsewhere
from lorafleet_fleet import (
    Fault,
    Fleet,
    InvalidValueError,
    Lease,
    OutsideBlockError,
    Replica,
    ReplicaError,
)
from lorafleet_standin import StandInServer

from conftest import quiet

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

Serve = Callable[..., StandInServer]
POISON = "make the engine fail"
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@attrs.define
class Blames:
    """The [blame] events a fleet's machine was given, in order (it wraps ``handle``, changing nothing)."""

    events: list[ServedElsewhere | ReplicaFailed] = attrs.field(factory=list)

    @classmethod
    def of(cls, fleet: Fleet) -> Blames:
        blames = cls()
        handle = fleet._machine.handle

        def watched(event: Event) -> list[Command]:
            if isinstance(event, ServedElsewhere | ReplicaFailed):
                blames.events.append(event)
            return handle(event)

        fleet._machine.handle = watched  # type: ignore[method-assign]
        return blames

    @property
    def served_elsewhere(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(e.replica, e.failed) for e in self.events if isinstance(e, ServedElsewhere)]


def replicas_of(servers: list[StandInServer], limit: int = 2) -> dict[str, Replica]:
    return {f"r{i}": Replica(f"r{i}", s.url, "tiny", limit) for i, s in enumerate(servers)}


def failing(fleet: Fleet) -> set[str]:
    """The replicas placement avoids now."""
    return {rid for rid, r in fleet.statistics().replicas.items() if r.failing_until is not None}


async def forward(lease: Lease, prompt: str = "hello") -> httpx.Response:
    """Forward a completion to the lease's replica, as a router would."""
    async with httpx.AsyncClient(base_url=lease.replica.url) as client:
        body = {"model": lease.adapter, "prompt": prompt, "max_tokens": 2}
        return await client.post("/v1/completions", json=body)


# -- the stand-in's request that makes every engine fail ------------------------------------------


async def test_the_stand_in_fails_every_completion_whose_prompt_holds_the_text(serve: Serve) -> None:
    standin = serve()
    standin.app.fail_prompts(POISON)
    standin.app.fail_prompts("teapot", status=503, body='{"error": {"message": "busy"}}')
    async with httpx.AsyncClient(base_url=standin.url) as client:

        async def ask(route: str, text: str) -> httpx.Response:
            if route == "completions":
                body = {"model": "tiny", "prompt": f"say {text} now", "max_tokens": 2}
            else:
                body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
            return await client.post(PATHS[route], json=body)

        for route in ("completions", "chat"):
            for _ in range(2):  # every time
                failed = await ask(route, POISON)
                assert failed.status_code == 500
                error = failed.json()["error"]  # vLLM 0.32's answer to a request its engine failed on
                assert error["message"].startswith("EngineCore encountered an issue.")
                assert (error["type"], error["param"], error["code"]) == ("InternalServerError", None, 500)
            assert (await ask(route, "hello")).status_code == 200
            busy = await ask(route, "teapot")
            assert (busy.status_code, busy.json()) == (503, {"error": {"message": "busy"}})
        # vLLM turns a bad body away before its engine sees the prompt.
        bad = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": POISON, "max_tokens": "x"}
        )
        assert bad.status_code == 400
        assert [c.misbehaviour is not None for c in standin.app.calls_to("completions")][:2] == [True, True]
        standin.app.clear_prompts()
        assert (await ask("completions", POISON)).status_code == 200
        standin.app.fail_prompts(POISON)
        standin.app.clear_faults()
        assert (await ask("chat", POISON)).status_code == 200


# -- route(after=...) --------------------------------------------------------------------------


async def test_a_retry_passes_over_every_replica_its_request_tried(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    replicas = replicas_of([serve(), serve(), serve()])
    async with fleet_type(replicas=replicas.values(), adapters=adapter_dir) as fleet:
        blames = Blames.of(fleet)
        first = await fleet.route("a0")
        first.release()
        second = await fleet.route("a0", after=first)  # held, and a retry's previous attempt still
        third = await fleet.route("a0", after=second)
        seen = [first.replica.id, second.replica.id, third.replica.id]
        assert sorted(seen) == ["r0", "r1", "r2"]
        assert (second.how.value, third.how.value) == ("loaded", "loaded")
        second.release()
        third.release()
        # attempts=3: the request tried every replica; none is left, and none was asked.
        with pytest.raises(ReplicaError, match="no healthy replica left to try: the request tried") as caught:
            await fleet.route("a0", after=third)
        assert caught.value.tried == ()
        # A request that is no retry takes the held copy at once.
        async with fleet.route("a0") as again:
            assert again.how.value == "hit"
        assert blames.events == []  # nothing went wrong: nobody is blamed
        assert failing(fleet) == set()
        quiet(fleet)


async def test_a_retry_after_a_lost_adapter_loads_it_again_where_it_was(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    """A replica that lost the adapter is not passed over: the retry loads it there again, and carries
    the replicas that answered the request with a server error before."""
    servers = [serve(), serve()]
    async with fleet_type(replicas=replicas_of(servers).values(), adapters=adapter_dir) as fleet:
        blames = Blames.of(fleet)
        for standin in servers:
            standin.app.fail_prompts(POISON)
        first = await fleet.route("a0")
        answer = await forward(first, POISON)
        assert answer.status_code == 500
        assert first.server_error(answer.text) is False
        first.release()
        second = await fleet.route("a0", after=first)
        assert second.replica.id != first.replica.id
        servers[int(second.replica.id[1])].app.restart()  # it loses a0
        answer = await forward(second)
        assert second.check_answer(answer.status_code, answer.content) is True
        second.release()
        third = await fleet.route("a0", after=second)
        assert (third.replica.id, third.how.value) == (second.replica.id, "loaded")
        assert (await forward(third)).status_code == 200
        third.release()
        assert blames.served_elsewhere == [(third.replica.id, (first.replica.id,))]
        assert failing(fleet) == {first.replica.id}
        quiet(fleet)


async def test_after_must_be_a_lease_of_this_fleet(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = Replica("r0", standin.url, "tiny", 2)
    async with fleet_type(replicas=[r], adapters=adapter_dir) as fleet, fleet_type() as other:
        with pytest.raises(InvalidValueError, match="after must be a lease"):
            await fleet.route("a0", after="r0")  # type: ignore[arg-type]
        foreign = other.acquire(r, "a0", str(adapter_dir / "a0"))
        with pytest.raises(InvalidValueError, match="after must be a lease"):
            await fleet.route("a0", after=foreign)
        with pytest.raises(InvalidValueError, match="after must be a lease"):
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0"), after=foreign):
                pass
        never = fleet.route("a1")
        with pytest.raises(OutsideBlockError, match="server_error"):
            never.server_error()
        quiet(fleet)


# -- server_error and ServedElsewhere ----------------------------------------------------------


async def test_a_second_replica_failing_the_request_blames_the_request_and_no_replica(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve(), serve()]
    async with fleet_type(replicas=replicas_of(servers).values(), adapters=adapter_dir) as fleet:
        blames = Blames.of(fleet)
        for standin in servers:
            standin.app.fail_prompts(POISON)
        first = await fleet.route("a0")
        answer = await forward(first, POISON)
        assert answer.status_code == 500
        assert first.server_error(f"HTTP 500: {answer.text}") is False  # try another
        first.release()
        assert failing(fleet) == set()  # not before another serves the request
        second = await fleet.route("a0", after=first)
        assert second.replica.id != first.replica.id
        answer = await forward(second, POISON)
        assert second.server_error(f"HTTP 500: {answer.text}") is True  # the request's fault
        second.release()  # the router answers the client; nobody is blamed
        assert blames.events == []
        assert failing(fleet) == set()
        # Good requests go on as ever, to the copies the retries loaded.
        async with fleet.route("a0") as good:
            assert (await forward(good)).status_code == 200
        assert blames.events == []
        quiet(fleet)


async def test_a_retry_served_elsewhere_blames_the_replica_that_failed_it(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    async with fleet_type(replicas=replicas_of(servers).values(), adapters=adapter_dir) as fleet:
        blames = Blames.of(fleet)
        first = await fleet.route("a0")
        sick = first.replica.id
        servers[int(sick[1])].app.answer("completions", 500, '{"error": {"message": "engine dead"}}')
        answer = await forward(first)
        assert first.server_error(answer.text) is False
        first.release()
        async with fleet.route("a0", after=first) as retry:
            assert retry.replica.id != sick
            assert (await forward(retry)).status_code == 200
            assert blames.events == []  # not before the release: the answer may yet fail
        assert blames.served_elsewhere == [(retry.replica.id, (sick,))]  # exactly once
        assert failing(fleet) == {sick}
        retry.release()  # again: nothing more
        # The sick replica is avoided: the next request goes to the copy that served at once.
        async with fleet.route("a0") as after:
            assert (after.replica.id, after.how.value) == (retry.replica.id, "hit")
        assert len(blames.served_elsewhere) == 1
        quiet(fleet)


async def test_a_retry_that_got_no_good_answer_blames_no_replica(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    """Released unserved (the client went away), out of its block by an exception, or itself marked:
    no ServedElsewhere."""
    servers = [serve(), serve(), serve()]
    async with fleet_type(replicas=replicas_of(servers).values(), adapters=adapter_dir, attempts=5) as fleet:
        blames = Blames.of(fleet)
        first = await fleet.route("a0")
        assert first.server_error() is False
        first.release()

        retry = await fleet.route("a0", after=first)
        retry.release(served=False)

        with pytest.raises(ValueError, match="the router's own"):
            async with fleet.route("a0", after=first):
                raise ValueError("the router's own bug")

        async with fleet.route("a0", after=first) as lost:
            lost.adapter_missing()  # marked: its release is no good answer

        async with fleet.route("a0", after=first) as dead:
            dead.replica_failed("connection refused")  # no answer: a failure at once, itself
        assert blames.served_elsewhere == []
        assert [e.replica for e in blames.events] == [dead.replica.id]
        assert failing(fleet) == {dead.replica.id}
        quiet(fleet)


async def test_a_chosen_replicas_lease_carries_its_request_too(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    """``acquire(after=...)``: a router that places requests itself gets the same judgement."""
    servers = [serve(), serve()]
    r0, r1 = replicas_of(servers).values()
    path = str(adapter_dir / "a0")
    async with fleet_type(replicas=[r0, r1]) as fleet:
        blames = Blames.of(fleet)
        async with fleet.acquire(r0, "a0", path) as first:
            assert first.server_error() is False
        async with fleet.acquire(r1, "a0", path, after=first) as second:
            assert second.server_error() is True
        async with fleet.acquire(r1, "a0", path, after=first) as served:
            pass
        assert served.how.value == "hit"
        assert blames.served_elsewhere == [("r1", ("r0",))]
        assert failing(fleet) == {"r0"}
        quiet(fleet)


# -- traffic that holds no lease ---------------------------------------------------------------


async def test_blame_and_served_elsewhere_without_a_lease(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    replicas = replicas_of([serve(), serve(), serve()])
    async with fleet_type(replicas=replicas.values()) as fleet:
        blames = Blames.of(fleet)
        assert fleet.blame("r0") is Fault.REPLICA
        assert fleet.blame("r0", ["r0"]) is Fault.REPLICA
        assert fleet.blame(replicas["r1"], [replicas["r0"]]) is Fault.REQUEST
        assert fleet.blame("r2", ("r0", "r1")) is Fault.REQUEST
        assert blames.events == []  # a question changes nothing
        fleet.served_elsewhere(replicas["r2"], ["r0", replicas["r1"], "r2", "gone"])
        assert blames.served_elsewhere == [("r2", ("r0", "r1", "r2", "gone"))]
        assert failing(fleet) == {"r0", "r1"}
        with pytest.raises(InvalidValueError, match="not one str"):
            fleet.served_elsewhere("r2", "r0")
        quiet(fleet)


async def test_a_replica_that_gives_no_answer_fails_at_once(
    fleet_type: type[Fleet], serve: Serve, adapter_dir: Path
) -> None:
    servers = [serve(), serve()]
    async with fleet_type(replicas=replicas_of(servers).values(), adapters=adapter_dir) as fleet:
        first = await fleet.route("a0")
        dead = first.replica.id
        servers[int(dead[1])].stop()
        with pytest.raises(httpx.ConnectError):
            await forward(first)
        first.replica_failed("connection refused")
        first.release()
        assert failing(fleet) == {dead}  # no need to wait for another replica to serve it
        async with fleet.route("a0", after=first) as retry:
            assert retry.replica.id != dead
            assert (await forward(retry)).status_code == 200
        async with fleet.route("a1") as other:
            assert other.replica.id != dead  # passed over by every placement
        quiet(fleet)
