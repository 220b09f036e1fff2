"""deploy/grafana/lorafleet.json: a dashboard Grafana can import, whose every query reads series that
exist: lorafleet's, as a running ``lorafleet serve`` exports them after traffic over stand-ins, under
asyncio and trio; vLLM's, as vLLM 0.32 exports them (tests/fixtures/vllm-0.32-metrics.txt, a verbatim
``/metrics`` of the cached real engine; ``test_the_vllm_fixture_is_what_vllm_exports`` scrapes a
live one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lorafleet_standin import StandInServer

from exposition import exported, selectors
from router_scrape import router_scrape

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "lorafleet.json"
VLLM_METRICS = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32-metrics.txt"
PANEL_TYPES = {"timeseries", "stat", "table"}
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def targets() -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every query of the dashboard."""
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def test_the_dashboard_is_one_grafana_can_import() -> None:
    board = dashboard()
    assert isinstance(board["title"], str)
    assert board["title"]
    assert isinstance(board["uid"], str)
    assert 0 < len(board["uid"]) <= 40
    assert isinstance(board["schemaVersion"], int)
    # The datasource is a variable: chosen on import, and a provisioned copy finds its own.
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids)
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        title = panel["title"]
        assert panel["type"] in PANEL_TYPES, title
        assert panel["datasource"] == DATASOURCE, title
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"}, title
        assert all(type(grid[k]) is int and grid[k] >= 0 for k in grid), title
        assert min(grid["w"], grid["h"]) > 0, title
        assert grid["x"] + grid["w"] <= 24, title
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{title} overlaps another panel"
        cells |= mine
        assert panel["targets"], title
        refs = [target["refId"] for target in panel["targets"]]
        assert len(set(refs)) == len(refs), title
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title
            assert isinstance(target["expr"], str), title
            assert target["expr"].strip(), title


# -- the PromQL reader, on its own ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names", "grouping"),
    [
        ("vllm:num_requests_waiting", {"vllm:num_requests_waiting"}, set()),
        (
            'histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="}",b=~"[a-z]+"}[$__rate_interval])))',
            {"x_bucket"},
            {"le"},
        ),
        ("sum(rate(a_total[5m])) / sum(rate(b_total[5m] offset 1h))", {"a_total", "b_total"}, set()),
        ("a * on (replica) group_left (model) b > bool 0", {"a", "b"}, {"replica", "model"}),
        (
            "topk(10, sum without (instance) (increase(c_total[$__range]))) or vector(0)",
            {"c_total"},
            {"instance"},
        ),
        ('label_replace(up, "dst", "$1", "src", "(.*)") and on() Inf', {"up"}, set()),
        ("sum(rate(q[5m:1m])) by (job)", {"q"}, {"job"}),
        ("max_over_time(vllm:kv_cache_usage_perc[1h]) @ end()", {"vllm:kv_cache_usage_perc"}, set()),
    ],
    ids=[f"promql{i}" for i in range(8)],  # not the expressions: "vllm" in an id counts as a real engine's
)
def test_promql_names_and_grouping(expr: str, names: set[str], grouping: set[str]) -> None:
    query = selectors(expr)
    assert {s.name for s in query.selectors} == names
    assert query.grouping == grouping


def test_promql_matcher_labels() -> None:
    query = selectors('rate(m_total{outcome=~"loaded|x", adapter!="_other"}[5m])')
    assert [(s.name, s.labels) for s in query.selectors] == [("m_total", frozenset({"outcome", "adapter"}))]


@pytest.mark.parametrize("expr", ['rate(x{a="b}[5m])', "sum(x[5m)", "x{a}", "x # y", 'x{a="b'])
def test_promql_the_reader_refuses_what_it_cannot_read(expr: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 -- any refusal: the point is that it is not a guess
        selectors(expr)


def test_exposition_names_follow_the_types() -> None:
    text = (
        "# TYPE h histogram\n# TYPE c counter\n# TYPE t_total counter\n# TYPE g gauge\n# TYPE s summary\n"
        'x{a="1",b="q\\"}"} 2\n'
    )
    names = exported(text)
    assert set(names) == {
        "h_bucket",
        "h_sum",
        "h_count",
        "c_total",
        "t_total",
        "g",
        "s",
        "s_sum",
        "s_count",
        "x",
    }
    assert names["x"] == {"a", "b", "job", "instance"}
    assert "le" in names["h_bucket"]


# -- every query against what is exported -----------------------------------------------------------


@pytest.fixture
async def router_metrics(serve: Callable[..., StandInServer], adapter_dir: Path) -> str:
    return await router_scrape(serve, adapter_dir)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_every_query_reads_series_that_are_exported(router_metrics: str) -> None:
    router = exported(router_metrics)
    vllm = exported(VLLM_METRICS.read_text(encoding="utf-8"))
    read: set[str] = set()
    for title, expr in targets():
        query = selectors(expr)
        assert query.selectors, f"{title}: {expr} reads no metric"
        labels: set[str] = set()
        for selector in query.selectors:
            source, where = (
                (vllm, "vLLM 0.32") if selector.name.startswith("vllm:") else (router, "lorafleet serve")
            )
            assert selector.name in source, f"{title}: {expr}: {where} exports no {selector.name}"
            missing = sorted(selector.labels - source[selector.name])
            assert not missing, f"{title}: {expr}: {selector.name} has no label {missing}"
            labels |= source[selector.name]
            read.add(selector.name)
        assert query.grouping <= labels, f"{title}: {expr}: no series has {sorted(query.grouping - labels)}"
    # What the dashboard is for: each of these is read by some panel.
    wanted = {
        "lorafleet_loads_total",
        "lorafleet_evictions_total",
        "lorafleet_grants_total",
        "lorafleet_adapter_wait_seconds_bucket",
        "lorafleet_replica_healthy",
        "lorafleet_adapters_held",
        "lorafleet_adapters_limit",
        "lorafleet_adapter_loads_total",
        "lorafleet_adapter_requests_total",
        "lorafleet_serve_requests_total",
        "lorafleet_serve_time_to_first_token_seconds_bucket",
        "lorafleet_serve_request_duration_seconds_bucket",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
    }
    assert wanted <= read, sorted(wanted - read)


def test_the_vllm_fixture_is_what_vllm_exports(vllm_servers: dict[str, Any]) -> None:
    """The fixture's families are a live vLLM 0.32's (its labels too, for the series the dashboard reads)."""
    server = vllm_servers["open"]
    with server.client() as client:
        live = exported(client.get("/metrics").text)
    fixture = exported(VLLM_METRICS.read_text(encoding="utf-8"))
    names = {s.name for _, expr in targets() for s in selectors(expr).selectors if s.name.startswith("vllm:")}
    for name in names:
        assert name in live, name
        assert fixture[name] <= live[name] | {"job", "instance"}, name
    families = {n for n in fixture if n.startswith("vllm:")}
    assert families <= set(live), sorted(families - set(live))
