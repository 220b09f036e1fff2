"""``lorafleet serve``'s sizing: the most adapters a configuration can put on one engine, said by
``--check`` and at start-up, and a warning for each engine whose declared ``max_cpu_loras`` is below
it; and ``concurrency``, passed to the fleet."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lorafleet import engine_refusal, most_held
from lorafleet._cli import main as lorafleet
from lorafleet_serve import Config, ConfigError, ReplicaConfig, RouterServer, read_toml
from lorafleet_serve._config import build, discover_flag, replica_flag
from lorafleet_serve._sizing import sizing
from lorafleet_standin import StandInServer

from conftest import broken_folder_warning

HELLO = {"prompt": "hello", "max_tokens": 4}


@pytest.mark.parametrize(
    ("limit", "headroom", "routers", "most"),
    [
        (4, 2, 1, 6),  # one router: limit + headroom
        (4, 0, 1, 4),
        (4, 2, 2, 10),  # 4 + 1 x 2 + 2 x 2
        (4, 2, 3, 14),  # 4 + 2 x 2 + 3 x 2
        (2, 0, 3, 4),  # 2 + 2 x 1 + 0
        (8, 1, 4, 18),  # 8 + 3 x 2 + 4 x 1
    ],
)
def test_the_most_held_is_the_bound_of_several_routers(
    limit: int, headroom: int, routers: int, most: int
) -> None:
    assert most_held(limit, headroom, routers) == most


def replicas(*cpu: int | None, limit: int = 4) -> tuple[ReplicaConfig, ...]:
    return tuple(
        ReplicaConfig(
            id=f"r{i}", url=f"http://10.0.0.{i + 1}:8000", model="llama", limit=limit, max_cpu_loras=c
        )
        for i, c in enumerate(cpu)
    )


def test_an_engine_declared_too_small_or_too_large_is_named_with_the_settings() -> None:
    """Two routers over engines of --max-cpu-loras 4 (too small for limit 4) and 10 (half empty)."""
    config = Config(replicas=replicas(4, 10, None), adapter_paths={"x": "/x"}, routers=2)
    sized = sizing(config)
    assert sized.lines == (
        "model 'llama': up to 6 adapters on one engine (limit + (routers - 1) x ceil(limit / routers) + "
        "routers x headroom, with limit 4, headroom 0, routers 2)",
    )
    assert sized.warnings == (
        "replicas[0] ('r0'): max_cpu_loras is 4, but this configuration can put 6 adapters on its engine "
        "(limit 4, fleet.headroom 0, fleet.routers 2), and past --max-cpu-loras vLLM reloads adapters "
        "inside generation steps: lower the limit or fleet.headroom, or start vLLM with --max-cpu-loras 6",
        "replicas[1] ('r1'): max_cpu_loras is 10, but this configuration puts at most 6 adapters on its "
        "engine: 4 of its memory stays empty and loads come more often; limit 6 would use it all (or "
        "leave limit out)",
    )


def test_without_a_declared_max_cpu_loras_the_line_says_it_is_not_checked() -> None:
    sized = sizing(Config(replicas=replicas(None, None, limit=2), adapter_paths={"x": "/x"}, headroom=1))
    assert sized.warnings == ()
    assert sized.lines == (
        "model 'llama': up to 3 adapters on one engine (limit + headroom, with limit 2, headroom 1, "
        "routers 1); no engine of it declares max_cpu_loras or max_loras (vLLM does not say its "
        "--max-cpu-loras), so that is not checked",
    )


def test_check_states_the_bound_and_warns(capsys: pytest.CaptureFixture[str], adapter_dir: Path) -> None:
    code = lorafleet(
        [
            "serve",
            *("--replica", "id=r0,url=http://127.0.0.1:1,model=tiny,limit=4,max_cpu_loras=5"),
            *("--replica", "id=r1,url=http://127.0.0.1:2,model=tiny,limit=4,max_cpu_loras=6"),
            *("--adapters-root", str(adapter_dir), "--check"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert out.splitlines()[1] == (
        "model 'tiny': up to 4 adapters on one engine (limit + headroom, with limit 4, headroom 0, routers 1)"
    )
    assert err.splitlines() == [
        f"lorafleet serve: warning: replicas[{i}] ('r{i}'): max_cpu_loras is {cpu}, but this configuration "
        f"puts at most 4 adapters on its engine: {cpu - 4} of its memory stays empty and loads come more "
        f"often; limit {cpu} would use it all (or leave limit out)"
        for i, cpu in ((0, 5), (1, 6))
    ] + [broken_folder_warning(adapter_dir).rstrip("\n")]


@pytest.mark.parametrize(
    ("fields", "headroom", "routers", "limit"),
    [
        ("max_cpu_loras=6", None, 1, 6),  # every adapter the engine keeps: headroom 0
        ("max_cpu_loras=6", 2, 1, 4),  # room for the headroom
        ("max_cpu_loras=6", None, 2, 4),  # 4 + ceil(4 / 2) = 6 for two routers
        ("limit=3,max_cpu_loras=6", None, 1, 3),  # a limit given stands
    ],
)
def test_the_limit_follows_from_max_cpu_loras_when_left_out(
    fields: str, headroom: int | None, routers: int, limit: int
) -> None:
    settings = {
        "replicas": (replica_flag(f"id=r0,url=http://h:1,model=m,{fields}"),),
        "adapter_paths": {"x": "/x"},
        "routers": routers,
        **({} if headroom is None else {"headroom": headroom}),
    }
    assert build(settings).replicas[0].limit == limit


def test_a_replica_needs_a_limit_or_its_max_cpu_loras() -> None:
    settings: dict[str, object] = {
        "replicas": (replica_flag("id=r0,url=http://h:1,model=m"),),
        "adapter_paths": {"x": "/x"},
    }
    with pytest.raises(ConfigError, match=r"replicas\[0\] \('r0'\) needs limit or max_cpu_loras"):
        build(settings)
    settings["headroom"] = 3
    settings["replicas"] = (replica_flag("id=r0,url=http://h:1,model=m,max_cpu_loras=2"),)
    with pytest.raises(ConfigError, match=r"replicas\[0\] \('r0'\): no limit fits an engine of 2 adapters"):
        build(settings)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("max_cpu_loras=four", "max_cpu_loras must be a whole number, not 'four'"),
        ("max_cpu_loras=0", "replicas[0] ('r0').max_cpu_loras must be at least 1, not 0"),
    ],
)
def test_a_bad_max_cpu_loras_is_named(spec: str, complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = lorafleet(
        ["serve", "--replica", f"id=r0,url=http://127.0.0.1:1,model=m,limit=2,{spec}", "--check"]
    )
    assert code == 2
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fields", "limit"),
    [
        ("max_loras=3", 3),  # vLLM without --max-cpu-loras keeps --max-loras adapters
        ("max_loras=2,max_cpu_loras=6", 6),  # the memory declared wins
    ],
)
def test_the_limit_follows_from_max_loras_where_it_is_the_memory(fields: str, limit: int) -> None:
    settings = {
        "replicas": (replica_flag(f"id=r0,url=http://h:1,model=m,{fields}"),),
        "adapter_paths": {"x": "/x"},
    }
    assert build(settings).replicas[0].limit == limit


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("max_loras=two", "max_loras must be a whole number, not 'two'"),
        ("limit=2,max_loras=0", "replicas[0] ('r0').max_loras must be at least 1, not 0"),
        (
            "max_cpu_loras=2,max_loras=4",
            "replicas[0] ('r0'): --max-cpu-loras 2 is below --max-loras 4: vLLM does not start so "
            "(max_cpu_loras must be >= max_loras); declare what the engine runs with",
        ),
    ],
)
def test_a_max_loras_vllm_would_not_start_with_is_named(
    spec: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = lorafleet(["serve", "--replica", f"id=r0,url=http://127.0.0.1:1,model=m,{spec}", "--check"])
    assert code == 2
    assert complaint in capsys.readouterr().err


def test_an_engine_whose_batch_the_settings_cannot_fill_is_warned_of() -> None:
    """max_loras 4 over a limit of 2: no batch runs more than 2 adapters; with two routers the same
    limit can put 3 there, and the warning counts that."""
    for routers, most in ((1, 2), (2, 3)):
        replica = ReplicaConfig(
            id="r0", url="http://h:1", model="llama", limit=2, max_cpu_loras=4, max_loras=4
        )
        sized = sizing(Config(replicas=(replica,), adapter_paths={"x": "/x"}, routers=routers))
        assert sized.warnings[0] == (
            f"replicas[0] ('r0'): max_loras is 4, but this configuration puts at most {most} adapters on "
            f"its engine: no batch runs more than {most} distinct adapters, so {4 - most} of the engine's "
            "LoRA slots stay empty"
        )
    full = ReplicaConfig(id="r0", url="http://h:1", model="llama", limit=4, max_cpu_loras=4, max_loras=2)
    assert sizing(Config(replicas=(full,), adapter_paths={"x": "/x"})).warnings == ()


def test_the_file_and_the_discover_flag_take_max_loras(tmp_path: Path) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        '[[replicas]]\nid = "r0"\nurl = "http://h:1"\nmodel = "m"\nmax_loras = 2\n\n'
        '[[discover]]\ndns = "vllm.test"\nport = 8000\nmodel = "m"\nmax_loras = 3\nmax_cpu_loras = 2\n'
    )
    settings = read_toml(path)
    assert settings["replicas"][0].max_loras == 2
    assert (settings["discover"][0].max_loras, settings["discover"][0].memory) == (3, 2)
    with pytest.raises(
        ConfigError, match=r"discover\[0\] \('vllm.test'\): --max-cpu-loras 2 is below --max-loras 3"
    ):
        build(settings)
    found = discover_flag("dns=vllm.test,port=8000,model=m,max_loras=5")
    assert (found.max_loras, found.memory) == (5, 5)
    assert build({"discover": (found,), "adapter_paths": {"x": "/x"}}).discover[0].limit == 5


def test_the_file_takes_max_cpu_loras_and_concurrency(tmp_path: Path) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        '[fleet]\nconcurrency = 8\n\n[[replicas]]\nid = "r0"\nurl = "http://h:1"\nmodel = "m"\nlimit = 2\n'
        "max_cpu_loras = 4\n"
    )
    settings = read_toml(path)
    assert settings["concurrency"] == 8
    assert settings["replicas"][0].max_cpu_loras == 4
    path.write_text('[fleet]\nconcurrency = "8"\n')
    with pytest.raises(ConfigError, match=r"fleet\.concurrency must be a whole number"):
        read_toml(path)


def test_a_bad_concurrency_flag_gets_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        lorafleet(["serve", "--concurrency", "0"])
    assert "argument --concurrency: must be at least 1, not 0" in capsys.readouterr().err


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_start_up_log_says_the_bound_and_warns(
    serve: Callable[..., StandInServer], adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    standin = serve()
    replica = ReplicaConfig(id="r0", url=standin.url, model="tiny", limit=4, max_cpu_loras=3)
    config = Config(replicas=(replica,), adapter_root=adapter_dir, port=0, shutdown_timeout=1.0)
    async with RouterServer(config, environ={}):
        pass
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("sizing: ")]
    assert [level for level, _ in said] == ["INFO", "WARNING"]
    assert said[0][1].startswith("sizing: model 'tiny': up to 4 adapters on one engine")
    assert said[1][1].startswith(
        "sizing: replicas[0] ('r0'): max_cpu_loras is 3, but this configuration can put 4"
    )


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize(("concurrency", "second"), [(None, "hit"), (1, "loaded")])
async def test_concurrency_is_passed_to_the_fleet(
    serve: Callable[..., StandInServer], adapter_dir: Path, concurrency: int | None, second: str
) -> None:
    """With one request at once per replica, a request for an adapter whose holder runs that many
    already gets a second copy elsewhere (and a third request, with both full, a holder)."""
    servers = [serve(), serve()]
    for standin in servers:
        standin.app.hold_streams()
    config = Config(
        replicas=tuple(
            ReplicaConfig(id=f"r{i}", url=s.url, model="tiny", limit=2) for i, s in enumerate(servers)
        ),
        adapter_root=adapter_dir,
        port=0,
        shutdown_timeout=1.0,
        concurrency=concurrency,
    )
    body = {"model": "a0", "stream": True, **HELLO}
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/v1/completions", json=body) as one,
        client.stream("POST", "/v1/completions", json=body) as two,
        client.stream("POST", "/v1/completions", json=body) as three,
    ):
        streams = (one, two, three)
        hows = [s.headers["x-lorafleet-how"] for s in streams]
        where = {s.headers["x-lorafleet-replica"] for s in streams}
        for standin in servers:
            standin.app.release()
        for stream in streams:
            await stream.aread()
    assert hows == ["loaded", second, "hit"]
    assert len(where) == (2 if second == "loaded" else 1)


def test_engine_refusal_is_vllms_own_check() -> None:
    """One rule for serve, the simulator and the docs: vLLM starts with --max-cpu-loras at least
    --max-loras, and says so otherwise."""
    assert engine_refusal(4, 4) is None
    assert engine_refusal(8, 2) is None
    assert engine_refusal(1, 2) == (
        "--max-cpu-loras 1 is below --max-loras 2: vLLM does not start so "
        "(max_cpu_loras must be >= max_loras)"
    )
