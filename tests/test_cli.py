"""The ``lorafleet`` command: its dispatcher, the messages for missing extras, and ``lorafleet demo``."""

from __future__ import annotations

import io
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet import How
from lorafleet._cli import SUBCOMMANDS, Subcommand, main
from lorafleet_fleet import Fleet
from lorafleet_serve import ReplicaConfig
from lorafleet_standin import StandInServer
from lorafleet_standin._demo import FIRST, ROWS, Progress, Report, least_loaded_router, parse, send_stream

from conftest import eventually


@pytest.fixture
def modules() -> Iterator[None]:
    """Let a test hide or replace modules in ``sys.modules``; everything is as before afterwards."""
    saved = dict(sys.modules)
    yield
    for name in [n for n in sys.modules if n not in saved]:
        del sys.modules[name]
    sys.modules.update(saved)


def hide(*names: str) -> None:
    """Make the packages ``names`` look not installed, and forget lorafleet's shells and stand-in so
    that a subcommand imports them again (``modules`` puts everything back)."""
    ours = (
        "lorafleet_standin",
        "lorafleet_trio",
        "lorafleet_asyncio",
        "lorafleet_fleet",
        "lorafleet_sim",
        "lorafleet_serve",
    )
    for name in list(sys.modules):
        if name.partition(".")[0] in (*ours, *names):
            del sys.modules[name]
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]


# -- the dispatcher ----------------------------------------------------------------------------


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lorafleet ")
    listed = {
        line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line.startswith("  ")
    }
    for command in SUBCOMMANDS:
        assert listed[command.name] == command.summary


def test_no_arguments_print_the_help_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "demo" in captured.err
    assert "simulate" in captured.err


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve-all"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: lorafleet ")
    assert "unknown command 'serve-all' (choose from demo, simulate" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import lorafleet

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"lorafleet {lorafleet.__version__}\n"


@pytest.mark.usefixtures("modules")
@pytest.mark.parametrize("missing", ["hypercorn", "httpx", "anyio", "prometheus_client"])
def test_demo_without_its_extras_names_them(missing: str, capsys: pytest.CaptureFixture[str]) -> None:
    hide(missing)
    assert main(["demo"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"lorafleet demo needs the stand-in and the reference router ({missing} is not installed): "
        "pip install 'lorafleet[standin,serve,trio]'\n"
    )
    assert captured.out == ""


@pytest.mark.usefixtures("modules")
@pytest.mark.parametrize("missing", ["hypercorn", "httpx", "anyio", "prometheus_client"])
def test_serve_without_its_extras_names_them(missing: str, capsys: pytest.CaptureFixture[str]) -> None:
    hide(missing)
    assert main(["serve", "--help"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"lorafleet serve needs the reference router's server and a shell ({missing} is not installed): "
        "pip install 'lorafleet[serve]'\n"
    )
    assert captured.out == ""


@pytest.mark.usefixtures("modules")
def test_simulate_not_installed_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    hide("lorafleet_sim")
    assert main(["simulate", "--help"]) == 2
    assert capsys.readouterr().err == (
        "lorafleet simulate is not installed: this lorafleet has no lorafleet_sim package\n"
    )


@pytest.mark.usefixtures("modules")
def test_simulate_forwards_its_arguments_to_lorafleet_sim() -> None:
    seen: list[list[str]] = []

    def sim_main(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    sim = types.ModuleType("lorafleet_sim")
    sim.main = sim_main  # type: ignore[attr-defined]
    sys.modules["lorafleet_sim"] = sim
    assert main(["simulate", "--replicas", "3", "--policy", "lru"]) == 7
    assert seen == [["--replicas", "3", "--policy", "lru"]]


@pytest.mark.usefixtures("modules")
def test_a_module_missing_from_an_installed_package_is_a_bug_and_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = Subcommand(name="demo", summary="", module="lorafleet._no_such_module", needs="x", install="y")
    monkeypatch.setattr("lorafleet._cli.SUBCOMMANDS", (broken,))
    with pytest.raises(ModuleNotFoundError, match=r"lorafleet\._no_such_module"):
        main(["demo"])


def test_the_dispatcher_imports_nothing_but_the_standard_library_and_attrs() -> None:
    import ast
    from pathlib import Path

    import lorafleet._cli

    tree = ast.parse(Path(lorafleet._cli.__file__).read_text())
    imported = {
        alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - set(sys.stdlib_module_names) <= {"__future__", "attrs", "lorafleet"}


def test_every_subcommand_is_an_entry_point_of_the_commands_group() -> None:
    from importlib.metadata import entry_points

    from lorafleet._cli import ABOUT, GROUP

    registered = {entry.name: entry.value for entry in entry_points(group=GROUP)}
    assert {s.name: s.module for s in SUBCOMMANDS} == registered
    assert [s.name for s in SUBCOMMANDS] == list(ABOUT)  # lorafleet's own, in the help's order


def test_the_dispatcher_names_no_package_upstairs() -> None:
    """Where a subcommand's code lives is pyproject.toml's to say (its entry point), not the core's."""
    import lorafleet._cli

    assert "lorafleet_" not in Path(lorafleet._cli.__file__).read_text()


def test_a_subcommand_another_distribution_registers_is_listed_and_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from importlib.metadata import EntryPoint, EntryPoints, entry_points

    import lorafleet._cli

    ours = list(entry_points(group=lorafleet._cli.GROUP))
    theirs = EntryPoint("zzz", "test_cli:_zzz_main", lorafleet._cli.GROUP)
    monkeypatch.setattr("lorafleet._cli.entry_points", lambda group: EntryPoints([theirs, *ours]))
    monkeypatch.setattr("lorafleet._cli.SUBCOMMANDS", lorafleet._cli.discover())
    assert [s.name for s in lorafleet._cli.SUBCOMMANDS] == ["demo", "simulate", "serve", "zzz"]
    assert main(["--help"]) == 0
    assert "  zzz       from another package\n" in capsys.readouterr().out
    assert main(["zzz", "a", "b"]) == 3


def _zzz_main(argv: list[str]) -> int:
    return len(argv) + 1


def test_with_no_subcommand_registered_the_error_says_to_reinstall(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("lorafleet._cli.SUBCOMMANDS", ())
    assert main(["serve"]) == 2
    assert (
        "unknown command 'serve' (no lorafleet.commands entry points: reinstall)" in capsys.readouterr().err
    )


# -- lorafleet demo's command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--skew", "nan"], "argument --skew: must be a finite number, 0 or more, not nan"),
        (["--skew", "inf"], "argument --skew: must be a finite number, 0 or more, not inf"),
        (["--skew", "-1"], "argument --skew: must be a finite number, 0 or more, not -1"),
        (["--load-ms", "-5"], "argument --load-ms: must be a finite number, 0 or more, not -5"),
        (["--load-ms", "nan"], "argument --load-ms: must be a finite number, 0 or more, not nan"),
        (["--replicas", "0"], "argument --replicas: must be at least 1, not 0"),
        (["--requests", "many"], "argument --requests: not a whole number: 'many'"),
        (["--runtime", "curio"], "argument --runtime: invalid choice: 'curio'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_demo_flags_are_checked_with_the_demos_usage(
    flags: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: lorafleet demo ")
    assert f"lorafleet demo: error: {complaint}" in err
    assert "Traceback" not in err


def test_demo_help_describes_it_and_what_the_seed_fixes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: lorafleet demo ")
    assert (
        "lorafleet's router against holders-first and least-loaded ones, in front of stand-in vLLM replicas."
        in out
    )
    assert "not the timing of a run over real HTTP" in out


def test_zero_skew_and_zero_load_time_are_allowed() -> None:
    args = parse(["--skew", "0", "--load-ms", "0"])
    assert (args.skew, args.load_ms) == (0.0, 0.0)


@pytest.mark.usefixtures("modules")
def test_demo_runs_on_asyncio_when_trio_is_not_installed(capsys: pytest.CaptureFixture[str]) -> None:
    hide("trio")
    assert parse([]).runtime == "asyncio"
    assert main(["demo", "--runtime", "trio"]) == 2
    assert (
        capsys.readouterr().err == "lorafleet demo --runtime trio needs trio: pip install 'lorafleet[trio]'\n"
    )


# -- lorafleet demo's output ---------------------------------------------------------------------


def report_of(replicas: int) -> Report:
    """A report where replica i served i hits, one load and i % 3 failures."""
    report = Report([f"replica-{i}" for i in range(replicas)])
    for i in range(replicas):
        report.how[f"replica-{i}"][How.HIT] += i
        report.how[f"replica-{i}"][How.LOADED] += 1
        report.failures[f"replica-{i}"] += i % 3
        report.evictions[f"replica-{i}"] = 1
    return report


def cells(line: str) -> list[str]:
    return line.split()


def test_a_small_fleet_gets_a_row_per_replica_and_the_total() -> None:
    lines = report_of(ROWS).table()
    assert len(lines) == 1 + ROWS + 1
    assert cells(lines[0]) == ["replica", "requests", "hits", "joins", "loads", "evictions", "failures"]
    assert cells(lines[3]) == ["replica-2", "5", "2", "0", "1", "1", "2"]
    hits = sum(range(ROWS))
    failures = sum(i % 3 for i in range(ROWS))
    assert cells(lines[-1]) == [
        "all",
        str(hits + ROWS + failures),
        str(hits),
        "0",
        str(ROWS),
        str(ROWS),
        str(failures),
    ]


def test_past_a_screenful_the_rest_are_summed_on_one_line() -> None:
    lines = report_of(200).table()
    assert len(lines) == 1 + FIRST + 1 + 1
    assert [cells(line)[0] for line in lines[1 : FIRST + 1]] == [f"replica-{i}" for i in range(FIRST)]
    rest = range(FIRST, 200)
    hits, failures = sum(rest), sum(i % 3 for i in rest)
    assert cells(lines[-2]) == [
        f"{200 - FIRST}",
        "more",
        str(hits + len(rest) + failures),
        str(hits),
        "0",
        str(len(rest)),
        str(len(rest)),
        str(failures),
    ]
    all_hits = sum(range(200))
    assert cells(lines[-1])[:4] == [
        "all",
        str(all_hits + 200 + sum(i % 3 for i in range(200))),
        str(all_hits),
        "0",
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_a_terminal_is_a_line_every_few_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(10, out, clock=clock, every=2.0)
    for _ in range(10):
        clock.now += 0.5
        progress.step()
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines() == [
        "lorafleet demo: 4/10 requests done",
        "lorafleet demo: 8/10 requests done",
        "lorafleet demo: 10/10 requests done",
    ]


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place() -> None:
    out = Terminal()
    progress = Progress(100, out, clock=Clock())
    for _ in range(100):
        progress.step()
    assert out.getvalue() == (f"\r[{'#' * 20}{'.' * 20}] 50/100\r[{'#' * 40}] 100/100\n")


@pytest.mark.parametrize("runtime", ["trio", "asyncio"])
def test_the_demo_runs_end_to_end(runtime: str, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--replicas", "2", "--limit", "2", "--adapters", "5", "--requests", "40", "--load-ms", "0"]
    assert main(["demo", *flags, "--concurrency", "4", "--runtime", runtime]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err  # captured output is not a terminal
    assert "CTRL + C" not in captured.err + captured.out  # hypercorn's start-up lines are not the demo's
    done = [line for line in captured.err.splitlines() if line.endswith("40/40 requests done")]
    assert done == [
        "lorafleet demo: lorafleet router: 40/40 requests done",
        "lorafleet demo: holders-first router: 40/40 requests done",
        "lorafleet demo: least-loaded router: 40/40 requests done",
    ]
    rows = {cells(line)[0]: cells(line) for line in captured.out.splitlines() if line.strip()}
    assert set(rows) >= {"replica", "replica-0", "replica-1", "all", "loads", "evictions", "requests/s"}
    assert rows["all"][1] == "40"
    assert rows["all"][-1] == "0"  # no failures
    assert f"through lorafleet's router ({runtime})" in captured.out
    table = [line.split("  ") for line in captured.out.splitlines() if line.startswith("failed requests")]
    assert [cell.strip() for cell in table[0] if cell.strip()] == ["failed requests", "0", "0", "0"]


# -- the demo's baseline: lorafleet's fleet behind least-loaded placement ---------------------------


def settled(fleet: Fleet) -> bool:
    """No load or unload is out (a landed load's victims are unloaded after its grant: [evict])."""
    return not any(r.loading or r.unloading for r in fleet.statistics().replicas.values())


@pytest.mark.anyio
async def test_the_baseline_loads_and_evicts_through_a_fleet(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    servers = [serve(model="tiny") for _ in range(2)]
    replicas = [
        ReplicaConfig(id=f"replica-{i}", url=s.url, model="tiny", limit=2) for i, s in enumerate(servers)
    ]
    stream = [f"a{k}" for k in (0, 1, 0, 2, 3, 0, 4, 1, 5, 0, 2, 0) * 5]
    async with least_loaded_router(replicas, adapter_dir) as proxy:
        run = await send_stream(proxy.url, stream, 6, Progress(len(stream), io.StringIO()))
        await eventually(lambda: settled(proxy.fleet))
        stats = proxy.fleet.statistics()
    assert [o.status for o in run.outcomes] == [200] * len(stream)
    assert {o.replica for o in run.outcomes} == {"replica-0", "replica-1"}
    # Every load and unload the stand-ins were asked for is one the fleet's machine made, and the
    # grants it counted are the ones the proxy's answers report.
    assert sum(len(s.app.calls_to("load")) for s in servers) == sum(stats.loads.values()) > 0
    assert sum(len(s.app.calls_to("unload")) for s in servers) == sum(stats.evictions.values()) > 0
    assert Counter(o.how for o in run.outcomes) == {how: n for how, n in stats.grants.items() if n}


@pytest.mark.anyio
async def test_the_baseline_evicts_as_the_machine_does(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """The baseline's evictions are the fleet's machine's ([evict]): a2's load goes out at once, taking
    the least recently used idle adapter as its victim, and the victim's name goes once it lands,
    where a baseline of its own would unload first and load after."""
    server = serve(model="tiny")
    replicas = [ReplicaConfig(id="replica-0", url=server.url, model="tiny", limit=2)]
    hows = []
    async with (
        least_loaded_router(replicas, adapter_dir) as proxy,
        httpx.AsyncClient(base_url=proxy.url) as client,
    ):
        # One at a time: the proxy ends each lease before it answers, so each adapter is idle by then.
        for name in ("a0", "a0", "a0", "a1", "a2"):
            body = {"model": name, "prompt": "hi", "max_tokens": 1}
            answer = await client.post("/v1/completions", json=body)
            assert answer.status_code == 200
            hows.append(answer.headers["x-lorafleet-how"])
        await eventually(lambda: settled(proxy.fleet))
        held = proxy.fleet.statistics().replicas["replica-0"].held
    assert hows == ["loaded", "hit", "hit", "loaded", "loaded"]
    # a0 idle longest, though in the most demand: the victim is the least recently used.
    routes = {"/v1/load_lora_adapter": "load", "/v1/unload_lora_adapter": "unload"}
    calls = [(routes[c.path], c.body["lora_name"]) for c in server.app.calls if c.path in routes]
    assert calls == [("load", "a0"), ("load", "a1"), ("load", "a2"), ("unload", "a0")]
    assert sorted(held) == ["a1", "a2"]
