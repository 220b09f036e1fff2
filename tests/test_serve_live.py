"""``lorafleet serve`` following its replicas live: DNS names re-resolved (a real DNS server on
127.0.0.1, tests/dns_server.py), and the configuration file read again when it changes, under asyncio
and trio; SIGHUP with the command as a process.

Replicas are stand-ins at 127.0.0.2, 127.0.0.3... (Linux routes 127.0.0.0/8 to the loopback) on one
port, as a headless Service's pods are, or on ports of their own behind SRV records.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

from lorafleet._cli import main as lorafleet
from lorafleet_serve import Config, DiscoverConfig, ReplicaConfig, RouterServer, read_toml
from lorafleet_serve._config import build
from lorafleet_serve._dns import addresses
from lorafleet_standin import StandInServer

from conftest import eventually
from dns_server import DnsServer

Serve = Callable[..., StandInServer]
HELLO = {"prompt": "hello", "max_tokens": 4}


@pytest.fixture
def dns() -> Iterator[DnsServer]:
    server = DnsServer().start()
    yield server
    server.stop()


def found_by(dns: DnsServer, name: str, port: int | None = None, **options: Any) -> DiscoverConfig:
    return DiscoverConfig(
        dns=name, port=port, model="tiny", limit=2, resolver=dns.address, interval=0.1, **options
    )


def config_of(adapter_dir: Path, *discover: DiscoverConfig, **options: Any) -> Config:
    return Config(discover=discover, adapter_root=adapter_dir, port=0, shutdown_timeout=1.0, **options)


def logged(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


async def states(client: httpx.AsyncClient) -> dict[str, str]:
    said: dict[str, str] = (await client.get("/health")).json()["replicas"]
    return said


async def all_ok(client: httpx.AsyncClient, ids: set[str]) -> None:
    """Wait until /health says exactly ``ids``, each ok (a new replica is "starting" until its listing)."""
    with anyio.fail_after(10):
        while await states(client) != dict.fromkeys(ids, "ok"):
            await anyio.sleep(0.01)


async def sse_words(answer: httpx.Response) -> list[str]:
    words: list[str] = []
    async for line in answer.aiter_lines():
        if line == "data: [DONE]":
            return words
        if line.startswith("data: "):
            words.append(json.loads(line.removeprefix("data: "))["choices"][0]["text"])
    raise AssertionError("the stream ended without [DONE]")


# -- DNS: addresses ------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_replicas_follow_a_name_while_traffic_runs_and_streams_outlive_a_removal(
    serve: Serve, adapter_dir: Path, dns: DnsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    first = serve(host="127.0.0.2")
    port = first.port
    servers = {"127.0.0.2": first, **{a: serve(host=a, port=port) for a in ("127.0.0.3", "127.0.0.4")}}
    rid = {address: f"{address}:{port}" for address in servers}
    dns.set("vllm.test", "A", ["127.0.0.2", "127.0.0.3"])
    config = config_of(adapter_dir, found_by(dns, "vllm.test", port))
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        contextlib.AsyncExitStack() as held,
    ):
        assert logged(caplog, "replicas: ") == [f"replicas: added {rid['127.0.0.2']}, {rid['127.0.0.3']}"]
        await all_ok(client, {rid["127.0.0.2"], rid["127.0.0.3"]})
        for standin in servers.values():
            standin.app.hold_streams()
        streams = []
        for adapter in ("a0", "a1", "a2", "a3"):
            body = {"model": adapter, "stream": True, **HELLO}
            streams.append(
                await held.enter_async_context(client.stream("POST", "/v1/completions", json=body))
            )
        where = {s.headers["x-lorafleet-replica"] for s in streams}
        assert where == {rid["127.0.0.2"], rid["127.0.0.3"]}  # a stream runs on each

        dns.set("vllm.test", "A", ["127.0.0.2", "127.0.0.4"])  # .3 goes, .4 comes
        change = f"replicas: added {rid['127.0.0.4']}; removed {rid['127.0.0.3']}"
        await eventually(lambda: change in logged(caplog, "replicas: "))
        # /health and /metrics show it at once: .3 drains (its stream runs on), .4 is there.
        said = await states(client)
        assert said[rid["127.0.0.3"]] == "draining"
        assert said[rid["127.0.0.4"]] in ("starting", "ok")
        metrics = (await client.get("/metrics")).text
        assert f'lorafleet_adapters_held{{replica="{rid["127.0.0.4"]}"}}' in metrics
        assert f'replica="{rid["127.0.0.3"]}"' not in metrics
        # Another limit for the name's replicas, while the streams run: they are changed, not new.
        entry = config.discover[0]
        assert await server.reload(attrs.evolve(config, discover=(attrs.evolve(entry, limit=3),)))
        assert logged(caplog, "replicas: ")[-1] == f"replicas: changed {rid['127.0.0.2']}, {rid['127.0.0.4']}"
        assert server.fleet.replica_statistics(rid["127.0.0.2"]).limit == 3  # type: ignore[union-attr]
        # Nothing new goes to .3, while its stream still runs.
        for adapter in ("a0", "a1", "a2", "a3", "a4", "a5"):
            answer = await client.post("/v1/completions", json={"model": adapter, **HELLO})
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-lorafleet-replica"] != rid["127.0.0.3"]
        for standin in servers.values():
            standin.app.release()
        for stream in streams:  # every stream held across the change ends whole
            assert stream.status_code == 200
            assert len(await sse_words(stream)) == 4
        await eventually(lambda: server.router.health()[1].get(rid["127.0.0.3"]) is None)
        await all_ok(client, {rid["127.0.0.2"], rid["127.0.0.4"]})
        assert len(logged(caplog, "replicas: ")) == 3  # one line per change
    assert servers["127.0.0.3"].app.calls_to("unload") == []  # a drain unloads nothing
    assert len(servers["127.0.0.3"].app.calls_to("completions")) == sum(
        s.headers["x-lorafleet-replica"] == rid["127.0.0.3"] for s in streams
    )


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_failed_resolution_changes_nothing_and_an_empty_answer_drains_them(
    serve: Serve, adapter_dir: Path, dns: DnsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    standin = serve(host="127.0.0.2")
    ident = f"127.0.0.2:{standin.port}"
    dns.set("vllm.test", "A", ["127.0.0.2"])
    config = config_of(adapter_dir, found_by(dns, "vllm.test", standin.port))
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        await all_ok(client, {ident})
        dns.mode = "servfail"
        await eventually(lambda: logged(caplog, "discover[0] ('vllm.test'): cannot resolve it") != [])
        asked = len(dns.questions)
        await eventually(lambda: len(dns.questions) > asked + 4)  # asked again, and again...
        assert logged(caplog, "discover[0] ('vllm.test'): cannot resolve it") == [
            f"discover[0] ('vllm.test'): cannot resolve it: {dns.address} answered SERVFAIL for vllm.test; "
            "its 1 replicas stand"
        ]  # ...said once
        assert (await client.post("/v1/completions", json={"model": "a0", **HELLO})).status_code == 200
        dns.mode = "silent"
        await eventually(lambda: len(logged(caplog, "discover[0] ('vllm.test'): cannot resolve it")) == 2)
        assert "no answer from" in logged(caplog, "discover[0] ('vllm.test'): cannot resolve it")[1]
        assert await states(client) == {ident: "ok"}
        dns.mode = "answer"
        await eventually(lambda: logged(caplog, "discover[0] ('vllm.test'): resolves again") != [])
        assert logged(caplog, "replicas: ") == [f"replicas: added {ident}"]

        dns.set("vllm.test", "A", [])  # no such name now: believed, the replica drains
        await eventually(lambda: f"replicas: removed {ident}" in logged(caplog, "replicas: "))
        health = await client.get("/health")
        assert (health.status_code, health.json()) == (503, {"status": "unavailable", "replicas": {}})
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.status_code == 503

        dns.set("vllm.test", "A", ["127.0.0.2"])
        await all_ok(client, {ident})
        assert (await client.post("/v1/completions", json={"model": "a0", **HELLO})).status_code == 200


# -- DNS: SRV, IPv6, TCP, the system's resolver -----------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
@pytest.mark.parametrize("glue", [True, False], ids=["addresses-given", "addresses-asked"])
async def test_srv_records_give_each_replica_its_port(
    serve: Serve, adapter_dir: Path, dns: DnsServer, glue: bool
) -> None:
    a, b = serve(), serve()
    dns.glue = glue
    dns.set(
        "_http._tcp.vllm.test",
        "SRV",
        [
            (10, 1, a.port, "pod-a.vllm.test."),
            (10, 1, b.port, "pod-b.vllm.test."),
            (20, 1, 9, "backup.test."),
        ],
    )
    for pod in ("pod-a", "pod-b", "backup"):
        dns.set(f"{pod}.vllm.test" if pod != "backup" else "backup.test", "A", ["127.0.0.1"])
    config = config_of(adapter_dir, found_by(dns, "_http._tcp.vllm.test", srv=True))
    ids = {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}  # the backup's priority is not the lowest
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        assert {r.id for r in server.router.replicas} == ids
        await all_ok(client, ids)
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.headers["x-lorafleet-replica"] in ids
    asked = {(name, kind) for _, name, kind in dns.questions}
    assert (("pod-a.vllm.test", "A") in asked) is not glue


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_an_ipv6_address_is_a_replica_in_brackets(
    serve: Serve, adapter_dir: Path, dns: DnsServer
) -> None:
    standin = serve(host="::1")
    dns.set("v6.test", "AAAA", ["::1"])
    config = config_of(adapter_dir, found_by(dns, "v6.test", standin.port))
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        (replica,) = server.router.replicas
        assert (replica.id, replica.url) == (f"[::1]:{standin.port}", f"http://[::1]:{standin.port}")
        await all_ok(client, {replica.id})
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert (answer.status_code, answer.headers["x-lorafleet-replica"]) == (200, replica.id)


@pytest.mark.anyio
async def test_a_truncated_answer_is_asked_again_over_tcp(dns: DnsServer) -> None:
    many = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(60)]
    dns.set("many.test", "A", many)
    dns.truncate = True
    found = await addresses([("127.0.0.1", dns.port)], ["many.test"], 2.0)
    assert found == many
    assert ("tcp", "many.test", "A") in dns.questions
    assert await addresses([("127.0.0.1", dns.port)], ["nothing.test"], 2.0) is None  # NXDOMAIN


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_without_a_resolver_the_systems_resolves_the_name(serve: Serve, adapter_dir: Path) -> None:
    """No ``resolver``: getaddrinfo, which reads /etc/hosts ("localhost" is 127.0.0.1 there)."""
    standin = serve()
    entry = DiscoverConfig(dns="localhost", port=standin.port, model="tiny", limit=2)
    async with RouterServer(config_of(adapter_dir, entry), environ={}) as server:
        assert f"127.0.0.1:{standin.port}" in {r.id for r in server.router.replicas}


# -- the configuration file, read again ------------------------------------------------------------------


FILE = """\
[server]
port = 0

[timeouts]
shutdown = 1
load = {load}

[adapters]
root = "{root}"
{replicas}"""


def replica_table(rid: str, url: str, limit: int = 2) -> str:
    return f'\n[[replicas]]\nid = "{rid}"\nurl = "{url}"\nmodel = "tiny"\nlimit = {limit}\n'


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_file_is_read_again_when_it_changes_a_configmaps_symlink_swap_included(
    serve: Serve, adapter_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    a, b = serve(), serve()
    # As Kubernetes mounts a ConfigMap: router.toml -> ..data/router.toml, ..data -> ..<version>.
    (tmp_path / "..v1").mkdir()
    (tmp_path / "..v1" / "router.toml").write_text(
        FILE.format(load=120, root=adapter_dir, replicas=replica_table("r0", a.url))
    )
    (tmp_path / "..data").symlink_to("..v1")
    path = tmp_path / "router.toml"
    path.symlink_to("..data/router.toml")

    def source() -> Config:
        return build(read_toml(path))

    async with (
        RouterServer(source(), environ={}, source=source, watch=path, watch_interval=0.02) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        await all_ok(client, {"r0"})
        # A new version, swapped in: r1 added.
        (tmp_path / "..v2").mkdir()
        (tmp_path / "..v2" / "router.toml").write_text(
            FILE.format(
                load=120, root=adapter_dir, replicas=replica_table("r0", a.url) + replica_table("r1", b.url)
            )
        )
        (tmp_path / "..data_tmp").symlink_to("..v2")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        await eventually(lambda: "replicas: added r1" in logged(caplog, "replicas: "))
        await all_ok(client, {"r0", "r1"})
        # Edited in place: a broken file changes nothing, and says so once.
        target = tmp_path / "..v2" / "router.toml"
        target.write_text(target.read_text() + "[oops\n")
        await eventually(lambda: logged(caplog, "configuration: ") != [] and "nothing changed" in caplog.text)
        (broken,) = [line for line in logged(caplog, "configuration: ") if "nothing changed" in line]
        assert "not valid TOML" in broken
        assert await states(client) == {"r0": "ok", "r1": "ok"}
        # Mended, with the model's limit raised and a setting that waits for a restart.
        both = replica_table("r0", a.url, 3) + replica_table("r1", b.url, 3)
        target.write_text(FILE.format(load=60, root=adapter_dir, replicas=both))
        await eventually(lambda: "replicas: changed r0, r1" in logged(caplog, "replicas: "))
        assert server.fleet.replica_statistics("r1").limit == 3  # type: ignore[union-attr]
        assert (
            "configuration: timeouts.load changed, which takes effect when lorafleet serve restarts; the "
            "replicas, limits and peers are applied now"
        ) in logged(caplog, "configuration: ")
        assert server.config.load_timeout == 120  # as it runs
        answer = await client.post("/v1/completions", json={"model": "a0", **HELLO})
        assert answer.status_code == 200
    assert logged(caplog, "replicas: ") == ["replicas: added r1", "replicas: changed r0, r1"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_reload_in_a_program_applies_a_config_or_refuses_it_whole(
    serve: Serve, adapter_dir: Path, dns: DnsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lorafleet.serve")
    a = serve(host="127.0.0.2")
    b = serve(host="127.0.0.3", port=a.port)
    static = (ReplicaConfig(id="r0", url=a.url, model="tiny", limit=2),)
    config = Config(replicas=static, adapter_root=adapter_dir, port=0, shutdown_timeout=1.0)
    dns.set("vllm.test", "A", ["127.0.0.3"])
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        # A name to discover replicas by, beside the static one: resolved now.
        entry = DiscoverConfig(
            dns="vllm.test", port=a.port, model="tiny", limit=2, resolver=dns.address, interval=3600
        )
        assert await server.reload(
            Config(replicas=static, discover=(entry,), adapter_root=adapter_dir, port=0)
        )
        assert logged(caplog, "replicas: ") == [f"replicas: added 127.0.0.3:{a.port}"]
        await all_ok(client, {"r0", f"127.0.0.3:{a.port}"})
        # Another limit for the model in one place only: refused whole, nothing changes.
        wrong = attrs.evolve(entry, limit=3)
        assert not await server.reload(
            Config(replicas=static, discover=(wrong,), adapter_root=adapter_dir, port=0)
        )
        assert logged(caplog, "configuration: ")[-1].startswith(
            "configuration: discover[0] ('vllm.test'): limit 3, but another replica of 'tiny' has 2"
        )
        assert logged(caplog, "configuration: ")[-1].endswith("; nothing changed")
        # Without the name: its replica drains away.
        assert await server.reload(Config(replicas=static, adapter_root=adapter_dir, port=0))
        assert logged(caplog, "replicas: ")[-1] == f"replicas: removed 127.0.0.3:{a.port}"
    assert b.app.calls_to("unload") == []


# -- the command: flags, and SIGHUP --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (
            "dns=llm.test,model=m,limit=2",
            "discover[0] ('llm.test') needs port (the replicas' port), or srv = true",
        ),
        # A limit may now follow from max_cpu_loras: which of them is missing is known only once
        # every flag is read, and the entry is named as the configuration names it.
        ("dns=llm.test,port=8000,model=m", "discover[0] ('llm.test') needs limit or max_cpu_loras"),
        ("dns=llm.test,port=x,model=m,limit=2", "port must be a whole number, not 'x'"),
        ("dns=llm.test,port=8000,model=m,limit=2,srv=maybe", "srv must be true or false, not 'maybe'"),
        (
            "dns=llm.test,port=8000,model=m,limit=2,interval=0",
            "interval must be a positive number of seconds",
        ),
        (
            "dns=llm.test,port=8000,model=m,limit=2,resolver=dns.local:53",
            "resolver must be a DNS server's address",
        ),
        ("dns=llm.test,port=8000,model=m,limit=2,ttl=5", "unknown field 'ttl'"),
        (
            "dns=llm.test,port=8000,model=m,limit=2,api_key=sk-1",
            "a key is never written in the configuration",
        ),
        (
            "dns=llm.test,port=8000,model=m,limit=2,api_key_env=NOT_SET_HERE",
            "NOT_SET_HERE, which is not set",
        ),
    ],
)
def test_a_bad_discover_flag_is_named(spec: str, complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = lorafleet(["serve", "--discover", spec, "--adapter", "x=/x", "--check"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert complaint in err
    assert "sk-1" not in err


def test_the_file_takes_discover_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        '[[discover]]\ndns = "vllm.ns.svc.cluster.local"\nport = 8000\nmodel = "llama"\nlimit = 4\n'
        'interval = 2.5\nmax_cpu_loras = 6\n\n[[discover]]\ndns = "_http._tcp.vllm.ns.svc"\nsrv = true\n'
        'model = "llama"\nlimit = 4\nresolver = "[fd00::a]:5353"\n\n[adapters.paths]\nsql = "/srv/sql"\n'
    )
    assert lorafleet(["serve", "--config", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "replicas: none listed; discovered by address: 'vllm.ns.svc.cluster.local' port 8000 of 'llama'; "
        "discovered by SRV: '_http._tcp.vllm.ns.svc' of 'llama'; adapters: 1 named"
    )
    first, second = read_toml(path)["discover"]
    assert (first.interval, first.max_cpu_loras, first.srv) == (2.5, 6, False)
    assert (second.srv, second.resolver, second.port) == (True, "[fd00::a]:5353", None)


@pytest.mark.parametrize("runtime", ["asyncio", "trio"])
def test_sighup_reads_the_settings_again_and_resolves_every_name_now(
    runtime: str, serve: Serve, adapter_dir: Path, dns: DnsServer, tmp_path: Path
) -> None:
    first = serve(host="127.0.0.2")
    serve(host="127.0.0.3", port=first.port)
    dns.set("vllm.test", "A", ["127.0.0.2"])
    path = tmp_path / "router.toml"
    path.write_text(
        f'[server]\nport = 0\n\n[adapters]\nroot = "{adapter_dir}"\n\n[[discover]]\ndns = "vllm.test"\n'
        f'port = {first.port}\nmodel = "tiny"\nlimit = 2\nresolver = "{dns.address}"\ninterval = 3600\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorafleet_serve", "--config", str(path), "--runtime", runtime],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        logged: list[str] = []

        def until(text: str) -> str:
            for line in proc.stderr:  # type: ignore[union-attr]
                logged.append(line)
                if text in line:
                    return line
            raise AssertionError(f"lorafleet serve ended before {text!r}: {''.join(logged)}")

        url = until("ready on ").split("ready on ")[1].split()[0]
        dns.set("vllm.test", "A", ["127.0.0.2", "127.0.0.3"])  # an hour before it would be asked again
        proc.send_signal(signal.SIGHUP)
        until(f"replicas: added 127.0.0.3:{first.port}")
        with httpx.Client(base_url=url, timeout=30) as client:
            health = client.get("/health").json()["replicas"]
        assert set(health) == {f"127.0.0.2:{first.port}", f"127.0.0.3:{first.port}"}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    text = "".join(logged) + (proc.stderr.read() if proc.stderr else "")
    assert "SIGHUP: reading the settings again" in text
    assert "Traceback" not in text


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_replica_serving_another_model_is_another_replica(
    serve: Serve, adapter_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same id and URL with another model: the server was redeployed; it is read afresh."""
    caplog.set_level(logging.INFO, "lorafleet.serve")
    old = serve()
    config = Config(
        replicas=(ReplicaConfig(id="r0", url=old.url, model="tiny", limit=2),),
        adapter_root=adapter_dir,
        port=0,
        shutdown_timeout=1.0,
    )
    async with (
        RouterServer(config, environ={}) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        moved = ReplicaConfig(id="r0", url=old.url, model="other", limit=2)
        assert await server.reload(attrs.evolve(config, replicas=(moved,)))
        assert logged(caplog, "replicas: ") == ["replicas: changed r0"]
        await all_ok(client, {"r0"})
        models = [card["id"] for card in (await client.get("/v1/models")).json()["data"]]
        assert "other" in models
        assert "tiny" not in models
