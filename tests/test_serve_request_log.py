"""``lorafleet serve``'s request log: a JSON line per completion, off by default, bounded, read back by
``lorafleet simulate --trace``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from test_serve import HELLO, Serve, leases, routing, sse

from lorafleet_serve import ConfigError
from lorafleet_serve._main import config_of, parser
from lorafleet_serve._requestlog import RequestLog
from lorafleet_sim import read_trace

from conftest import eventually

FIELDS = {
    "time",
    "adapter",
    "model",
    "replica",
    "how",
    "wait",
    "ttft",
    "duration",
    "prompt_tokens",
    "completion_tokens",
    "status",
    "stream",
    "attempts",
    "end",
    "error",
    "request_id",
}


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_each_completion_is_a_line(serve: Serve, adapter_dir: Path, tmp_path: Path) -> None:
    standin = serve()
    path = tmp_path / "requests.jsonl"
    ids = []
    async with routing([standin], adapter_dir, request_log=path) as (server, client):
        for body in (
            {"model": "a0", **HELLO},
            {"model": "a0", "stream": True, **HELLO},
            {"model": "tiny", **HELLO},
            {"model": "nope", **HELLO},
        ):
            async with client.stream("POST", "/v1/completions", json=body) as answer:
                ids.append(answer.headers["x-request-id"])
                if body.get("stream"):
                    await sse(answer)
                else:
                    await answer.aread()
            await eventually(lambda: leases(server) == 0)
        await eventually(lambda: len(path.read_text().splitlines()) == 4)
    loaded, streamed, base, unknown = lines_of(path)
    assert [line["request_id"] for line in (loaded, streamed, base, unknown)] == ids
    assert len(set(ids)) == 4
    for line in (loaded, streamed, base, unknown):
        assert set(line) == FIELDS, line
        assert line["duration"] >= 0
    assert (loaded["adapter"], loaded["model"], loaded["replica"]) == ("a0", "tiny", "r0")
    assert (loaded["how"], loaded["status"], loaded["stream"]) == ("loaded", 200, False)
    assert 0 <= loaded["wait"] <= loaded["duration"]
    assert loaded["ttft"] is None  # not streamed: the whole answer comes at once
    assert (loaded["prompt_tokens"], loaded["completion_tokens"]) == (1, 4)  # as the stand-in counts
    assert (streamed["how"], streamed["stream"]) == ("hit", True)
    assert 0 <= streamed["ttft"] <= streamed["duration"]
    assert streamed["completion_tokens"] is None  # no stream_options.include_usage: the engine says none
    assert (base["adapter"], base["model"], base["how"], base["wait"]) == (None, "tiny", "base", None)
    assert (unknown["adapter"], unknown["status"], unknown["replica"]) == ("nope", 404, None)
    assert (unknown["error"], loaded["error"]) == ("model_not_found", None)
    assert loaded["time"] <= streamed["time"] <= base["time"] <= unknown["time"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_a_stream_that_asks_for_its_usage_logs_its_tokens(
    serve: Serve, adapter_dir: Path, tmp_path: Path
) -> None:
    """``stream_options.include_usage``: the engine's last chunk says the usage, as vLLM's does."""
    standin = serve()
    path = tmp_path / "requests.jsonl"
    body = {"model": "a0", "stream": True, "stream_options": {"include_usage": True}, **HELLO}
    async with routing([standin], adapter_dir, request_log=path) as (_, client):
        async with client.stream("POST", "/v1/completions", json=body) as answer:
            await sse(answer)
        await eventually(lambda: len(path.read_text().splitlines()) == 1)
    [line] = lines_of(path)
    assert (line["prompt_tokens"], line["completion_tokens"], line["stream"]) == (1, 4, True)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_log_is_bounded_and_simulate_reads_it(
    serve: Serve, adapter_dir: Path, tmp_path: Path
) -> None:
    standin = serve()
    path = tmp_path / "requests.jsonl"
    async with routing([standin], adapter_dir, request_log=path, request_log_max_bytes=1000) as (
        server,
        client,
    ):
        for i in range(13):
            answer = await client.post("/v1/completions", json={"model": f"a{i % 3}", **HELLO})
            assert answer.status_code == 200, answer.text
            await eventually(lambda: leases(server) == 0)
    old = path.with_name(path.name + ".1")
    assert old.exists()
    assert path.stat().st_size < 1000
    assert old.stat().st_size < 1300
    kept = lines_of(old) + lines_of(path)
    assert 0 < len(kept) < 13  # the oldest went with the rotation before
    workload = read_trace(path)
    assert len(workload) == len(lines_of(path))
    assert set(workload.adapters) <= {"a0", "a1", "a2"}


def test_the_request_log_is_off_unless_named(tmp_path: Path) -> None:
    args = ["--replica", "id=r0,url=http://127.0.0.1:1,model=tiny,limit=2", "--adapters-root", str(tmp_path)]
    assert config_of(parser().parse_args(args)).request_log is None
    config = config_of(
        parser().parse_args(
            [*args, "--request-log", str(tmp_path / "r.jsonl"), "--request-log-max-bytes", "9"]
        )
    )
    assert (config.request_log, config.request_log_max_bytes) == (tmp_path / "r.jsonl", 9)
    toml = tmp_path / "router.toml"
    toml.write_text('[server]\nrequest_log = "logs/r.jsonl"\n')
    with pytest.raises(
        ConfigError, match=r"server\.request_log: .*logs/r\.jsonl.* not in a folder that exists"
    ):
        config_of(parser().parse_args([*args, "--config", str(toml)]))
    (tmp_path / "logs").mkdir()
    assert (
        config_of(parser().parse_args([*args, "--config", str(toml)])).request_log
        == tmp_path / "logs/r.jsonl"
    )


def test_a_log_that_cannot_be_written_costs_lines_never_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    requests = RequestLog(tmp_path / "r.jsonl", 1 << 20)
    watch = requests.watch(_ignore)
    fields: dict[str, Any] = {
        "adapter": "a0",
        "model": "tiny",
        "replica": "r0",
        "how": "hit",
        "wait_ms": 0.1,
        "stream": False,
        "status": 200,
        "attempts": 1,
        "end": "done",
        "error": None,
    }
    requests.write(watch, **fields)
    requests._file.close()
    requests._file = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - a file it cannot write
    with caplog.at_level(logging.WARNING, "lorafleet.serve"):
        requests.write(watch, **fields)
        requests.write(watch, **fields)
    assert [r.message.count("lines are lost") for r in caplog.records] == [1]  # said once
    requests.close()
    requests.write(watch, **fields)  # a request that outlived the router: nothing written, no error
    assert len(lines_of(tmp_path / "r.jsonl")) == 1


async def _ignore(message: Any) -> None:
    return
