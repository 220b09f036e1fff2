"""The benchmark scripts still run against the public API: smoke runs, no figures judged.

Speed is measured by ``bench/bench.py`` and ``bench/serve_bench.py`` themselves, never asserted here:
a timed assertion fails on a busy machine and passes on a quiet one for the same code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench_scripts import load


def test_bench_quick_writes_every_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("bench")
    out = tmp_path / "results.md"
    only = "hit,victim,routed,placements,warmup,shell-asyncio,loopback-trio"
    assert bench.main(["--quick", "--only", only, "--out", str(out)]) == 0
    text = out.read_text()
    assert "How to read it" in text
    assert "load average" in text
    assert "| core hit path (hit + release), 1 replica, 4 held" in text
    assert "routed cold request by route(), 100 replicas" in text
    assert "## Placements per second per core" in text
    assert "## A fleet just started" in text
    assert "| 100 | 1-100 |" in text  # the first batch of the warm-up table
    assert "trio shell cold load + eviction via the stand-in (loopback)" in text
    assert "| victim choice, 256 held vs 4, ≤ 1.5x |" in text
    assert "x floor" in capsys.readouterr().out


def test_bench_rejects_an_unknown_row() -> None:
    with pytest.raises(SystemExit):
        load("bench").main(["--only", "nothing"])


def test_zipf_stream_is_seeded_and_in_range() -> None:
    bench = load("bench")
    a, b = bench.Zipf(10_000_000, seed=3), bench.Zipf(10_000_000, seed=3)
    draws = [a.draw() for _ in range(2000)]
    assert draws == [b.draw() for _ in range(2000)]
    assert all(1 <= d <= 10_000_000 for d in draws)
    assert max(draws) > 100_000  # the tail past the exact table is drawn too
    assert draws.count(1) > draws.count(2) > 0  # rank 1 the most asked for


def test_serve_bench_one_short_run(tmp_path: Path) -> None:
    serve_bench = load("serve_bench")
    out = tmp_path / "serve.md"
    argv = ["--runs", "1", "--rounds", "2", "--requests", "5", "--seconds", "0.1", "--out", str(out)]
    assert serve_bench.main(argv) == 0
    text = out.read_text()
    assert "| 1 |" in text
    assert "targets met in" in text
    assert "load average" in text


def test_serve_bench_sweep_and_streams_short(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue-38 modes end and print their tables (vllm-router left out: its install is the bench's)."""
    serve_bench = load("serve_bench")
    argv = ["--sweep", "1,2", "--rounds", "1", "--seconds", "0.1", "--no-peer"]
    assert serve_bench.main(argv) == 0
    swept = capsys.readouterr().out
    assert "| 2 | router |" in swept
    assert "vllm-router not asked for" in swept
    argv = [
        "--streams",
        "5",
        "--stream-interval",
        "0.01",
        "--stream-seconds",
        "0.05",
        "--rounds",
        "2",
        "--no-peer",
        *("--baseline", sys.executable),  # this checkout's router again, as another's would run
    ]
    assert serve_bench.main(argv) == 0
    streamed = capsys.readouterr().out
    assert "| router |" in streamed
    assert "| baseline |" in streamed
    assert "{'direct': 10, 'router': 10, 'baseline': 10}" in streamed


def test_weights_lanes_weigh_as_the_core_and_the_table_is_written(tmp_path: Path) -> None:
    """bench/weights.py at a small size: it checks its lanes against the core's weight before it counts."""
    weights = load("weights")
    out = tmp_path / "weights.md"
    # 300 adapters over 40 replicas: some may fall outside the bar by chance, so 0 or 1.
    assert weights.main(
        ["--adapters", "300", "--replicas", "40", "--shapes", "r,http", "--out", str(out)]
    ) in (0, 1)
    table = out.read_text()
    assert table.count("| FNV-1a, no mixing (before) |") == 2
    assert table.count("| SplitMix64 of FNV-1a (shipped) |") == 2


def test_weights_lanes_give_every_shape_the_cores_first() -> None:
    from lorafleet._rendezvous import weight

    weights = load("weights")
    for _, make in weights.SHAPES.values():
        ids = [make(i) for i in range(60)]
        fleet = weights.Fleet(ids)
        for i in range(30):
            adapter = f"x{i}é"
            shipped = [weight(adapter, r) for r in ids]
            before = [weights.old_weight(adapter, r) for r in ids]
            assert fleet.first_shipped(adapter) == shipped.index(max(shipped))
            assert fleet.first_fnv(adapter) == before.index(max(before))


@pytest.mark.parametrize("argv", [["--shapes", "nope"], ["--replicas", "1"], ["--adapters", "0"]])
def test_weights_refuses_bad_arguments(argv: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        load("weights").main([*argv, "--out", str(tmp_path / "x.md")])
    assert exc.value.code == 2


# -- bench/replay.py: what the real-engine replay derives from a run -------------------------------


def test_replay_sizes_say_their_max_loras_or_take_the_memory() -> None:
    replay = load("replay")
    assert replay._size("2x8") == replay.Size(2, 8, 8)
    assert replay._size("3x4/2") == replay.Size(3, 4, 2)
    assert (str(replay.Size(3, 4, 2)), replay.Size(3, 4, 2).slug) == ("3 x 4/2", "3x4-2")
    for bad in ("2x", "2x4/", "x4", "2x4/8", "0x4"):
        with pytest.raises(Exception, match=repr(bad)):
            replay._size(bad)


def test_replay_refuses_a_max_loras_the_stand_ins_would_not_hold_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    replay = load("replay")
    assert replay.parse(["--engine", "vllm", "--sizes", "2x4/2"]).sizes == [replay.Size(2, 4, 2)]
    with pytest.raises(SystemExit):
        replay.parse(["--sizes", "2x4/2"])
    assert "never hold a request back for --max-loras" in capsys.readouterr().err


def test_replay_load_time_is_the_wait_of_the_requests_that_started_a_load() -> None:
    replay = load("replay")

    def line(how: str | None, wait: float | None, status: int = 200) -> str:
        return json.dumps(
            {"adapter": "a" if how != "base" else None, "how": how, "wait": wait, "status": status}
        )

    lines = [
        line("loaded", 0.3),
        line("hit", 0.0),  # no load: not one
        line("joined", 0.1),  # waited on another's load, part of it: not one
        line("loaded", 0.1),
        line("loaded", 9.0, status=503),  # not answered: not one
        line("loaded", 0.2),
        line("base", None),
        "",
    ]
    found = replay.load_time(lines)
    assert (found.mean, found.median, found.loads) == (pytest.approx(0.2), pytest.approx(0.2), 3)
    skewed = replay.load_time([line("loaded", 0.01), line("loaded", 0.01), line("loaded", 0.1)])
    assert (skewed.mean, skewed.median) == (pytest.approx(0.04), pytest.approx(0.01))  # a step waited out
    assert replay.load_time([line("hit", 0.0)]) is None
    assert replay.mean_wait(lines) == pytest.approx((0.3 + 0.1 + 0.1 + 9.0 + 0.2) / 6)


def test_replay_engine_reads_are_timed_by_the_instrument_or_not_at_all() -> None:
    replay = load("replay")
    timed = [
        json.dumps({"t": 1.0, "ev": "read", "id": 1, "seconds": 0.004}),
        json.dumps({"t": 2.0, "ev": "drop", "id": 1}),
        json.dumps({"t": 3.0, "ev": "read", "id": 1, "seconds": 0.002}),
        json.dumps({"t": 4.0, "ev": "read", "id": 2, "seconds": 0.009}),
    ]
    assert replay.read_seconds(timed) == pytest.approx(0.004)
    assert replay.read_seconds([json.dumps({"t": 1.0, "ev": "read", "id": 1})]) is None


def test_demo_arms_runs_every_arm_on_every_seed_and_writes_the_table(tmp_path: Path) -> None:
    arms = load("demo_arms")
    out = tmp_path / "arms.md"
    flags = [
        "--requests",
        "40",
        "--adapters",
        "6",
        "--replicas",
        "2",
        "--concurrency",
        "4",
        "--load-ms",
        "10",
    ]
    assert arms.main(["--seeds", "1,2", "--out", str(out), *flags]) == 0
    text = out.read_text()
    medians = [
        line.split("|")[1].strip()
        for line in text.split("Every run:")[0].splitlines()
        if line.startswith("| ")
    ]
    assert medians == ["arm", *arms.ARMS]
    runs = [
        line.split("|") for line in text.split("Every run:")[1].splitlines() if line[:3] in ("| 1", "| 2")
    ]
    assert sorted((r[1].strip(), r[2].strip()) for r in runs) == sorted(
        (s, a) for s in "12" for a in arms.ARMS
    )
    from lorafleet_standin._demo import parse, stream_of

    for r in runs:
        distinct = len(set(stream_of(parse([*flags, "--seed", r[1].strip()]))))
        loads, waited = int(r[3]), int(r[4])
        assert distinct <= loads <= 40  # each adapter asked for loaded at least once, no more than asked
        assert waited >= loads  # each load was waited for by the request that started it


@pytest.mark.parametrize("argv", [["--seeds", "one"], ["--seeds", "1,,2"], ["--seed", "3"], ["--seed=3"]])
def test_demo_arms_refuses_bad_seeds(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load("demo_arms").main(argv)
    assert "seed" in capsys.readouterr().err
