"""[load], [place]: a hot adapter gets a second copy once its replica's engine queues, with the shipped
defaults (nothing told of the engines' concurrency), against a real vLLM and against stand-ins whose
queue gauges are vLLM's (``test_standin_conformance.py::test_the_stand_in_reports_its_queue_as_vllm_does``).

Two replicas of one model: ``narrow`` runs two requests at once (``--max-num-seqs 2``), ``wide`` many.
Requests for one adapter go out one at a time, each once the engines count it, and stay unfinished
until the test ends: the stand-ins hold their streams; a real engine generates 1,800 tokens for
each, far longer than the test takes, and drops them when the test closes the streams.

The fleet learns ``narrow``'s capacity from a reading that shows a queue ([load]); the next request
goes to ``wide``, which loads the adapter and runs it at once, and the ones after it join it there
while ``narrow`` stays full.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import attrs
import httpx
import pytest

from lorafleet import vllm
from lorafleet_fleet import Fleet, How, Lease, Reading, Replica
from lorafleet_standin import StandInServer

from conftest import KEY, idle_and_bare, quiet, settled

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_task_left_running")]

MODEL = "tiny"
ADAPTER = "lora-0"
TOKENS = 1800


PREMISE_ATTEMPTS = 3
"""Runs of the scenario a real engine gets: on a machine loaded far past its cores, a request can
reach vLLM's engine only once the one before it has finished (1 run in 15 beside two CPU burners)."""


class PremiseLostError(Exception):
    """An engine finished a request before it counted the one sent after it: nothing was ever busy."""


@attrs.frozen
class Engine:
    """One replica's server, as the test reads it."""

    id: str
    url: str
    key: str | None

    def replica(self) -> Replica:
        return Replica(self.id, self.url, MODEL, 2, api_key=self.key)

    async def counts(self, requests: int, what: str, streams: Callable[[], list[str]] = list) -> None:
        """Wait until the engine has ``requests`` requests, running or waiting.

        Args:
            streams: what became of each stream the test sent, said when the engine never gets there.
        """
        seen: list[tuple[int, int]] = []
        with anyio.move_on_after(300):
            while sum(now := await self.requests()) < requests:
                if not seen or seen[-1] != now:
                    seen.append(now)
                ended = [
                    state
                    for state in streams()
                    if state.startswith(f"{self.id}: ") and state.endswith(", ended")
                ]
                if ended:
                    raise PremiseLostError(f"{self.id} finished {ended} before it had {requests} for {what}")
                await anyio.sleep(0.02)
            return
        raise AssertionError(
            f"{self.id} never had {requests} requests for {what}; it had {seen}; the streams: {streams()}; "
            f"its gauges: {await self.gauges()}"
        )

    async def gauges(self) -> list[str]:
        """The engine's request and LoRA gauges as its ``/metrics`` has them now, for a failure's message."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        try:
            async with httpx.AsyncClient(timeout=60) as client:
                answer = await client.get(f"{self.url}/metrics", headers=headers)
        except httpx.HTTPError as error:
            return [f"no answer: {error!r}"]
        wanted = ("vllm:num_requests_", "vllm:lora_requests_info{")
        return [line for line in answer.text.splitlines() if line.startswith(wanted)]

    async def requests(self) -> tuple[int, int]:
        """(running, waiting), as the engine's ``/metrics`` says now."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.get(f"{self.url}/metrics", headers=headers)
        running, waiting = vllm.engine_queue(answer.content)
        assert running is not None, answer.text[:500]
        assert waiting is not None, answer.text[:500]
        return running, waiting


@attrs.frozen
class Pair:
    narrow: Engine
    wide: Engine
    adapters: Path
    hold: Callable[[], None]
    """Keep the requests about to go out unfinished on their engines."""
    let_go: Callable[[], None]
    reset: Callable[[], None]
    """Bring both engines back to idle with no adapter, for another run of the scenario."""


@pytest.fixture(params=["standin", "vllm"])
def pair(request: pytest.FixtureRequest, serve: Callable[..., StandInServer], built_adapters: Path) -> Pair:
    if request.param == "vllm":
        return real_pair(request)
    narrow = serve(max_num_seqs=2, max_model_len=4096)
    wide = serve(api_key=KEY, max_model_len=4096)
    servers = (narrow, wide)

    def hold() -> None:
        for server in servers:
            server.app.hold_streams()

    def let_go() -> None:
        for server in servers:
            server.app.release()

    def reset() -> None:
        for server in servers:
            server.app.restart()  # it forgets its adapters

    return Pair(
        Engine("narrow", narrow.url, None), Engine("wide", wide.url, KEY), built_adapters, hold, let_go, reset
    )


def real_pair(request: pytest.FixtureRequest) -> Pair:
    """The open vLLM (``--max-num-seqs 2``) as ``narrow`` and the keyed one as ``wide``, idle and bare."""
    servers = request.getfixturevalue("vllm_servers")
    engine = request.getfixturevalue("real_engine")
    narrow, wide = servers["open"], servers["keyed"]

    def reset() -> None:
        idle_and_bare(narrow, wide)

    reset()
    return Pair(
        Engine("narrow", narrow.url, None),
        Engine("wide", wide.url, KEY),
        engine.build / "adapters",
        lambda: None,
        lambda: None,
        reset,
    )


@attrs.define
class Streams:
    """The streams the test sent, and what became of each (for a failure's message)."""

    start: Callable[[Lease], None]
    states: list[str] = attrs.field(factory=list)

    def said(self) -> list[str]:
        return list(self.states)


@contextlib.asynccontextmanager
async def streams(pair: Pair) -> AsyncIterator[Streams]:
    """Start, for a granted lease, a long streamed completion on its replica, ended with the block."""
    async with anyio.create_task_group() as tasks:
        states: list[str] = []

        async def stream(lease: Lease) -> None:
            index = len(states)
            states.append(f"{lease.replica.id}: sent")
            body = {"model": ADAPTER, "prompt": "hello world", "max_tokens": TOKENS, "temperature": 0}
            body |= {"stream": True, "ignore_eos": True}
            key = pair.wide.key if lease.replica.id == "wide" else pair.narrow.key
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            try:
                async with (
                    httpx.AsyncClient(timeout=None) as client,  # the block ends it
                    client.stream(
                        "POST", f"{lease.replica.url}/v1/completions", json=body, headers=headers
                    ) as got,
                ):
                    states[index] = f"{lease.replica.id}: answered {got.status_code}"
                    assert got.status_code == 200, await got.aread()
                    lines = 0
                    async for _ in got.aiter_lines():
                        lines += 1
                        states[index] = f"{lease.replica.id}: {lines} lines"
                    states[index] += ", ended"
            except BaseException as error:
                states[index] += f", {error!r}"
                raise
            finally:
                lease.release()

        def start(lease: Lease) -> None:
            tasks.start_soon(stream, lease)

        try:
            yield Streams(start, states)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(pair.let_go)
            tasks.cancel_scope.cancel()


@attrs.frozen
class Spilled:
    """What one run of the scenario saw."""

    placed: list[tuple[str, How]]
    learned_at: int | None
    narrow_queue: tuple[int, int]
    wide_queue: tuple[int, int]
    reading: Reading | None


async def test_a_hot_adapter_spills_to_a_second_replica_when_its_engine_queues(
    fleet_type: type[Fleet], pair: Pair
) -> None:
    lost: list[str] = []
    for _ in range(PREMISE_ATTEMPTS):
        try:
            run = await spill(fleet_type, pair)
        except* PremiseLostError as group:
            lost += [str(error) for error in group.exceptions]
            await anyio.to_thread.run_sync(pair.reset)
        else:
            break
    else:
        pytest.fail(f"each run, an engine finished a request before it counted the next: {lost}")
    placed, learned_at, reading = run.placed, run.learned_at, run.reading
    seen = f"placed {placed}, narrow's engine {run.narrow_queue}, wide's {run.wide_queue}, reading {reading}"
    assert learned_at is not None, seen
    assert reading is not None, seen
    assert reading.capacity == 2, seen
    # Until the fleet knew narrow's capacity it sent every request there; the next went to wide and
    # loaded the adapter there, and those after it ran there too.
    before, after = placed[:learned_at], placed[learned_at:]
    assert all(replica == "narrow" for replica, _ in before), seen
    assert after[0] == ("wide", How.LOADED), seen
    assert all(replica == "wide" for replica, _ in after), seen
    assert run.wide_queue[1] == 0, seen  # nothing waited on wide: no request waited for a load behind a queue
    assert run.narrow_queue[0] == 2, seen


async def spill(fleet_type: type[Fleet], pair: Pair) -> Spilled:
    """The scenario, once."""
    await anyio.to_thread.run_sync(pair.hold)
    leases: list[Lease] = []
    learned_at: int | None = None
    async with fleet_type(
        replicas=[pair.narrow.replica(), pair.wide.replica()], adapters=pair.adapters
    ) as fleet:
        # The adapter starts on narrow alone: wide is removed while the first request loads it.
        fleet.set_replicas([pair.narrow.replica()])
        async with fleet.route(ADAPTER) as lease:
            assert (lease.replica.id, lease.how) == ("narrow", How.LOADED)
        fleet.set_replicas([pair.narrow.replica(), pair.wide.replica()])
        with anyio.fail_after(300):
            while not (wide := fleet.replica_statistics("wide")) or not wide.met:
                await anyio.sleep(0.01)
        async with streams(pair) as sent_streams:
            for sent in range(1, 8):
                lease = await fleet.route(ADAPTER)
                leases.append(lease)
                sent_streams.start(lease)
                on = pair.narrow if lease.replica.id == "narrow" else pair.wide
                here = sum(1 for held in leases if held.replica.id == lease.replica.id)
                what = f"request {sent} ({lease.how.value}), {[h.replica.id for h in leases]}"
                await on.counts(here, what, sent_streams.said)
                reading = fleet.reading("narrow")
                assert reading is not None
                if learned_at is None and reading.capacity is not None:
                    learned_at = sent
                if learned_at is not None and sent >= learned_at + 3:
                    break
            placed = [(held.replica.id, held.how) for held in leases]
            narrow_queue = await pair.narrow.requests()
            wide_queue = await pair.wide.requests()
            reading = fleet.reading("narrow")
        with anyio.fail_after(30):
            while not settled(fleet) or fleet.statistics().leases:
                await anyio.sleep(0.01)
        quiet(fleet)
    return Spilled(placed, learned_at, narrow_queue, wide_queue, reading)
