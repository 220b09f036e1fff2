"""The shell's contract with a router, over real HTTP against the stand-in, under asyncio and trio.

What comes out of ``async with Fleet()``, what a ``Replica`` may be and what a changed one means, one
error story for misuse, and metrics read from the machine's own counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import lorafleet
import lorafleet_asyncio
import lorafleet_fleet
import lorafleet_trio
from lorafleet import How
from lorafleet_fleet import (
    EnteredTwiceError,
    Fleet,
    FleetClosedError,
    InvalidValueError,
    OutsideBlockError,
    Replica,
    ReplicaConflictError,
    ReplicaError,
    UsageError,
)
from lorafleet_standin import StandInServer

from conftest import calls_reach, quiet


def replica(server: StandInServer, limit: int = 2, rid: str = "r0") -> Replica:
    return Replica(rid, server.url, "tiny", limit)


# -- what comes out of the block ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_replica_error_from_the_block_comes_out_as_itself(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.answer("load", 500, '{"error":{"message":"EngineCore encountered an issue.","code":500}}')
    # The router's own except clause around the block: it must see a ReplicaError, not a group.
    with pytest.raises(ReplicaError, match="EngineCore") as caught:
        async with fleet_type() as fleet, fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
    assert type(caught.value) is ReplicaError


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_plain_exception_from_the_block_comes_out_as_itself(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)

    fleet = fleet_type()

    async def route() -> None:
        async with fleet:
            await fleet.sync_unknown([r])
            async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                raise ValueError("the router's own bug")

    with pytest.raises(ValueError, match="the router's own") as caught:
        await route()
    assert type(caught.value) is ValueError
    assert fleet.statistics().leases == 0  # the lease was released on the way out


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_cancellation_of_the_block_comes_out_as_itself(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    standin.app.hang("load")
    seen: list[BaseException] = []
    with anyio.CancelScope() as scope:
        try:
            async with fleet_type() as fleet:
                await fleet.sync_unknown([r])

                async def cancel_when_loading() -> None:
                    await calls_reach(standin, "load", 1)
                    scope.cancel()

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(cancel_when_loading)
                    async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
                        pytest.fail("the cancelled request got a lease")
        except BaseException as exc:
            seen.append(exc)
            raise
    assert scope.cancelled_caught
    # The task group the router wrote may wrap the cancel; the fleet's own must add nothing around it.
    (out,) = seen
    while isinstance(out, BaseExceptionGroup) and len(out.exceptions) == 1:
        inner = out.exceptions[0]
        assert not isinstance(inner, BaseExceptionGroup), "the fleet wrapped the cancel again"
        out = inner
    assert isinstance(out, anyio.get_cancelled_exc_class())


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_cancel_that_reaches_the_fleet_block_directly_is_not_wrapped(
    fleet_type: type[Fleet], standin: StandInServer
) -> None:
    r = replica(standin)
    seen: list[BaseException] = []
    with anyio.CancelScope() as scope:
        try:
            async with fleet_type() as fleet:
                await fleet.sync_unknown([r])
                scope.cancel()
                await anyio.sleep_forever()
        except BaseException as exc:
            seen.append(exc)
            raise
    assert scope.cancelled_caught
    assert [type(e) for e in seen] == [anyio.get_cancelled_exc_class()]


# -- replicas ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"id": ""}, "id must be a non-empty str"),
        ({"id": 3}, "id must be a non-empty str"),
        ({"model": ""}, "model must be a non-empty str"),
        ({"limit": 0}, "limit must be an int of at least 1"),
        ({"limit": 2.0}, "limit must be an int of at least 1"),
        ({"limit": True}, "limit must be an int of at least 1"),
        ({"url": "10.0.0.5:8000"}, "http(s) URL with a host"),
        ({"url": "ftp://host:8000"}, "http(s) URL with a host"),
        ({"url": "http://"}, "http(s) URL with a host"),
        ({"url": "http://host:port"}, "http(s) URL"),
        ({"url": "http://host:8000/?a=1"}, "no query or fragment"),
        ({"url": "http://host:8000/v1"}, "give the server's root URL, without /v1"),
        ({"url": "http://host:8000/v1/"}, "give the server's root URL, without /v1"),
        ({"api_key": b"k"}, "api_key must be a str or None"),
    ],
)
def test_a_replica_is_checked_when_made(fields: dict[str, Any], words: str) -> None:
    good: dict[str, Any] = {"id": "r0", "url": "http://10.0.0.5:8000", "model": "llama", "limit": 4}
    with pytest.raises(InvalidValueError) as caught:
        Replica(**(good | fields))
    assert words in str(caught.value)
    assert isinstance(caught.value, UsageError)
    assert "b'k'" not in str(caught.value)


def test_a_replica_url_is_kept_without_its_trailing_slash() -> None:
    assert Replica("r0", "https://gpu-0.internal/vllm/", "llama", 4).url == "https://gpu-0.internal/vllm"


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_listing_404_says_the_url_is_wrong(
    fleet_type: type[Fleet], standin: StandInServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = Replica("r0", standin.url + "/openai", "tiny", 2)  # not the server's root
    async with fleet_type() as fleet:
        await fleet.sync_unknown([wrong])  # met: the listing failed, and said why
    assert "could not read the adapters of r0" in caplog.text
    assert "give the server's root URL, without /v1" in caplog.text
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in caplog.text


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_known_id_with_another_url_is_another_server(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    old, new = serve(), serve()
    new.app.register("a1", str(adapter_dir / "a1"))
    async with fleet_type() as fleet:
        await fleet.sync_unknown([replica(old)])
        async with fleet.acquire(replica(old), "a0", str(adapter_dir / "a0")):
            moved = replica(new)  # the same id, now at another server's URL, while a request runs
            await fleet.sync_unknown([moved])  # its listing is read afresh, and waited for
            assert fleet.statistics().replicas["r0"].held == {"a1": 0}
            async with fleet.acquire(moved, "a0", str(adapter_dir / "a0")) as lease:
                assert lease.how is How.LOADED  # not a hit on what the old server held
        quiet(fleet)
    assert len(new.app.calls_to("models")) == 1
    assert [c.body["lora_name"] for c in new.app.calls_to("load")] == ["a0"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_request_waiting_on_a_replica_whose_url_changed_fails_with_a_replica_error(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    old, new = serve(), serve()
    old.app.hang("load")
    errors: list[ReplicaError] = []

    async def waits_on_the_old_server() -> None:
        with pytest.raises(ReplicaError) as caught:
            async with fleet.acquire(replica(old), "a0", str(adapter_dir / "a0")):
                pass
        errors.append(caught.value)
        assert caught.value.message == lorafleet_fleet.REPLICA_REMOVED

    async with fleet_type() as fleet:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(waits_on_the_old_server)
            await calls_reach(old, "load", 1)
            async with fleet.acquire(replica(new), "a0", str(adapter_dir / "a0")) as lease:
                assert lease.how is How.LOADED
        old.app.release()
        quiet(fleet)
    assert len(errors) == 1


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_known_id_and_url_with_another_limit_sets_the_limit(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([replica(standin, limit=2)])
        for name in ("a0", "a1"):
            async with fleet.acquire(replica(standin, limit=2), name, str(adapter_dir / name)):
                pass
        async with fleet.acquire(replica(standin, limit=1), "a2", str(adapter_dir / "a2")):
            pass
        assert fleet.statistics().replicas["r0"].limit == 1
        assert fleet.statistics().replicas["r0"].held == {"a2": 0}  # the new limit applied at this load
        with pytest.raises(ReplicaConflictError):  # the same server cannot serve another model
            await fleet.sync_unknown([Replica("r0", standin.url, "other", 1)])
        assert fleet.statistics().replicas["r0"].model == "tiny"
        quiet(fleet)
    assert "replica r0 may now hold 1 adapters" in caplog.text
    assert len(standin.app.calls_to("models")) == 1


# -- one error story ---------------------------------------------------------------------------


@pytest.mark.parametrize("package", [lorafleet_fleet, lorafleet_trio, lorafleet_asyncio])
def test_the_shells_export_the_usage_errors_a_router_can_meet(package: Any) -> None:
    for name in ("UsageError", "InvalidValueError", "ReplicaConflictError"):
        assert getattr(package, name) is getattr(lorafleet, name)
    for name in ("OutsideBlockError", "EnteredTwiceError"):
        assert issubclass(getattr(package, name), lorafleet.UsageError)
    assert package.REPLICA_REMOVED == lorafleet.REPLICA_REMOVED  # what a removal's ReplicaError says


@pytest.mark.parametrize("face", [lorafleet_trio, lorafleet_asyncio])
def test_the_runtime_faces_export_exactly_the_fleets_names(face: Any) -> None:
    def public(module: Any) -> dict[str, Any]:
        return {name: value for name, value in vars(module).items() if not name.startswith("_")}

    assert public(face) == public(lorafleet_fleet)


@pytest.mark.parametrize("value", [0, -1.5, float("nan"), float("inf"), "5"])
def test_a_bad_timeout_is_a_usage_error(value: Any) -> None:
    for name in ("load_timeout", "listing_timeout", "listing_interval"):
        with pytest.raises(InvalidValueError, match=name):
            Fleet(**{name: value})


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_misuse_of_the_fleet_raises_usage_errors(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    fleet = fleet_type()
    with pytest.raises(OutsideBlockError, match="async with"):
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass
    with pytest.raises(OutsideBlockError):
        await fleet.sync_unknown([r])
    async with fleet:
        with pytest.raises(EnteredTwiceError, match="entered once"):
            async with fleet:
                pass
        lease = fleet.acquire(r, "a0", str(adapter_dir / "a0"))
        with pytest.raises(OutsideBlockError):
            lease.how  # noqa: B018 -- reading it is the misuse
        async with lease:
            with pytest.raises(EnteredTwiceError, match="acquire"):
                async with lease:
                    pass
        with pytest.raises(InvalidValueError):
            fleet.set_limit("tiny", 0)
        with pytest.raises(InvalidValueError):
            async with fleet.acquire(r, "", str(adapter_dir / "a0")):
                pass
        quiet(fleet)
    with pytest.raises(EnteredTwiceError):
        async with fleet:
            pass


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_request_after_closing_is_told_the_fleet_is_closed(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])

    async def request() -> None:
        async with fleet.acquire(r, "a0", str(adapter_dir / "a0")):
            pass

    for attempt in (request, lambda: fleet.sync_unknown([r])):
        with pytest.raises(FleetClosedError, match="the fleet is closed") as caught:
            await attempt()
        assert "async with" not in str(caught.value)
        assert not isinstance(caught.value, UsageError)


# -- metrics -----------------------------------------------------------------------------------


class Recorder:
    """A FleetMetrics of the router's own: the fleet hands it itself and each load's time."""

    def __init__(self) -> None:
        self.fleets: list[Fleet] = []
        self.loads: list[tuple[str, float]] = []

    def watch(self, fleet: Fleet) -> None:
        self.fleets.append(fleet)

    def load_took(self, model: str, seconds: float) -> None:
        self.loads.append((model, seconds))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_metrics_read_the_machines_counts_and_time_only_loads(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    recorder = Recorder()
    r = replica(standin, limit=1)
    async with fleet_type(metrics=recorder) as fleet:
        for name in ("a0", "a0", "a1"):
            async with fleet.acquire(r, name, str(adapter_dir / name)):
                pass
        quiet(fleet)
    assert recorder.fleets == [fleet]
    assert dict(fleet.statistics().grants) == {"hit": 1, "joined": 0, "loaded": 2}
    assert [model for model, _ in recorder.loads] == ["tiny", "tiny"]
    assert all(seconds >= 0 for _, seconds in recorder.loads)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_prometheus_sums_the_fleets_it_watches(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    from prometheus_client import CollectorRegistry

    from lorafleet_fleet import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    servers = [serve(), serve()]
    async with fleet_type(metrics=metrics) as one, fleet_type(metrics=metrics) as two:
        for fleet, server in zip((one, two), servers, strict=True):
            r = replica(server)
            for name in ("a0", "a0"):
                async with fleet.acquire(r, name, str(adapter_dir / name)):
                    pass

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("lorafleet_grants_total", how="hit") == 2
    assert value("lorafleet_grants_total", how="loaded") == 2
    assert value("lorafleet_grants_total", how="joined") == 0
    assert value("lorafleet_loads_total", model="tiny", outcome="loaded") == 2
    assert value("lorafleet_load_seconds_count", model="tiny") == 2


# -- the engine lost an adapter ----------------------------------------------------------------


async def ask(server: StandInServer, adapter: str) -> int:
    """Forward a completion for ``adapter``, as the router would; the status it gets."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        answer = await client.post(
            "/v1/completions", json={"model": adapter, "prompt": "hi", "max_tokens": 2}
        )
        return answer.status_code


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_lease_reports_its_adapter_missing_and_the_next_request_loads_it(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    path = str(adapter_dir / "a0")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", path) as first, fleet.acquire(r, "a0", path) as second:
            assert (first.how, second.how) == (How.LOADED, How.HIT)
            standin.app.restart()  # the engine loses a0 under two running requests
            assert await ask(standin, "a0") == 404
            first.adapter_missing()
            # While both still run on the lost copy, the next request loads a0 again.
            async with fleet.acquire(r, "a0", path) as third:
                assert third.how is How.LOADED
                assert await ask(standin, "a0") == 200
                # The second request heard its 404 before the new copy came: its report is about the
                # old copy, and leaves the new one held.
                second.adapter_missing()
                assert fleet.statistics().replicas["r0"].held == {"a0": 1}
            async with fleet.acquire(r, "a0", path) as fourth:
                assert fourth.how is How.HIT
        with pytest.raises(OutsideBlockError, match="inside"):
            first.adapter_missing()
        quiet(fleet)
    assert [c.body["lora_name"] for c in standin.app.calls_to("load")] == ["a0", "a0"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_forget_without_a_lease_drops_the_adapter_in_use_or_not(
    fleet_type: type[Fleet], standin: StandInServer, adapter_dir: Path
) -> None:
    r = replica(standin)
    path = str(adapter_dir / "a0")
    async with fleet_type() as fleet:
        await fleet.sync_unknown([r])
        async with fleet.acquire(r, "a0", path):
            standin.app.restart()
            fleet.forget(r, "a0")
            assert fleet.statistics().replicas["r0"].held == {}
            async with fleet.acquire(r, "a0", path) as again:
                assert again.how is How.LOADED
        quiet(fleet)
