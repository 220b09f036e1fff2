"""The benchmark scripts still run against the public API: smoke runs, no figures judged.

Speed is measured by ``bench/bench.py`` and ``bench/serve_bench.py`` themselves, never asserted here:
a timed assertion fails on a busy machine and passes on a quiet one for the same code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
    ]
    assert serve_bench.main(argv) == 0
    streamed = capsys.readouterr().out
    assert "| router |" in streamed
    assert "{'direct': 10, 'router': 10}" in streamed


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
