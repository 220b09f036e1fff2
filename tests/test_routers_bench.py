"""bench/routers_bench.py on a small stream: three ``lorafleet serve`` processes, one killed halfway and
started again, in front of stand-ins, against one router; what it counts is what the stand-ins saw."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_scripts import load

bench = load("routers_bench")


@pytest.mark.parametrize("peers", [False, True], ids=["each-decides", "peers"])
def test_a_small_run_counts_every_request_once_and_the_kill_moves_none_to_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], peers: bool
) -> None:
    out = tmp_path / "routers.md"
    argv = ["--requests", "240", "--runs", "1", "--adapters", "12", "--memory", "4", "--token-ms", "2"]
    argv += ["--down", "0.5", "--out", str(out)]
    if peers:
        argv.append("--peers")  # the first router, killed, is the one that decides
    assert bench.main(argv) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| 1 |")]
    assert [r[1].strip() for r in rows] == ["1 router", "3 routers"]
    distinct = len(set(bench.stream_for(12, 1.0, 240, 1)))
    for row in rows:
        assert row[2].strip() == "0"  # failed: a 404 from another router's unload is placed again
        loads = int(row[4].split("+")[0])
        assert loads >= distinct  # each adapter asked for was loaded somewhere, the stand-ins say
    assert rows[0][4].split("+")[1].strip() == "0"  # one router's held set is its engines' memory
    assert rows[0][3].strip() == "0"  # one router is never killed: nothing moved
    # Every router lists each stand-in when it starts, and reads it after: the stand-ins counted them.
    assert all(float(row[10]) > 0 for row in rows)
    assert "failed requests 0 (target 0: met)" in text
    assert ("each told the others (`--peer`)" in text) is peers


def test_a_request_cut_by_a_router_going_away_goes_to_another() -> None:
    live = bench.Live(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    rng = bench.random.Random(0)
    assert {live.pick(rng, "http://127.0.0.1:1") for _ in range(20)} == {"http://127.0.0.1:2"}
    live.remove("http://127.0.0.1:2")
    assert live.urls == ["http://127.0.0.1:1"]
    live.remove("http://127.0.0.1:1")  # the last live router stays: a client has nowhere else to go
    assert live.urls == ["http://127.0.0.1:1"]


def test_the_relay_hop_is_measured_on_hits_through_both_routers(tmp_path: Path) -> None:
    hop = load("relay_hop")
    out = tmp_path / "hop.md"
    assert hop.main(["--rounds", "10", "--out", str(out)]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| the one")]
    assert [r.split("|")[1].strip() for r in rows] == ["the one that decides", "the one that relays to it"]
    for r in rows:
        whole, there = float(r.split("|")[2]), float(r.split("|")[5])
        assert 0 < there < whole  # the stand-in read each request after it was sent, before its answer
    assert "The hop: " in text
    assert "of it on the way to the engine" in text
