"""docs/operations.md: every code block is run or checked.

- ``python``: run against a fleet after traffic over a stand-in, under asyncio and trio;
- ``promql``: each line's metrics are series a running ``lorafleet serve`` exports, with their labels;
- ``yaml``: the Prometheus job finds the pods as the Kubernetes example annotates them;
- ``sh``: each command names what the Kubernetes example has (its file, Secret, keys, objects, ports)
  and routes ``lorafleet serve`` answers.

A block in any other language fails: nothing in the document goes unchecked.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from lorafleet_fleet import Fleet, Replica
from lorafleet_standin import StandInServer

from conftest import quiet
from exposition import exported, selectors
from manifests import ROOT, container, objects, port_number, router_toml, secret_env
from router_scrape import router_scrape
from yamlish import load_all

DOC = ROOT / "docs" / "operations.md"
ROUTES = {"/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions"}
"""What lorafleet serve answers (shells/lorafleet_serve/_app.py)."""
ADMIN_ROUTES = {"/live", "/adapters", "/replicas"}
"""What its admin interface answers (shells/lorafleet_serve/_admin.py), but one adapter's or replica's."""


def blocks(language: str | None = None) -> list[tuple[str, str]]:
    """The document's fenced code blocks: (language, text), of one language when given."""
    found = re.findall(
        r"^```(\w*)\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL
    )
    return [(lang, text) for lang, text in found if language is None or lang == language]


def test_every_block_is_of_a_checked_language() -> None:
    languages = [lang for lang, _ in blocks()]
    assert languages
    assert set(languages) <= {"python", "promql", "yaml", "sh"}, languages
    for language in ("python", "promql", "yaml", "sh"):
        assert language in languages  # each check below has something to check


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_python_blocks_run(
    fleet_type: type[Fleet], serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    standin = serve()
    async with fleet_type(replicas=[Replica("r0", standin.url, "tiny", 2)], adapters=adapter_dir) as fleet:
        for name in ("a0", "a0", "a1", "a2", "a3", "a4", "a5", "a5"):
            async with fleet.route(name):
                pass
        quiet(fleet)
        for _, code in blocks("python"):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, str(DOC), "exec"), {"fleet": fleet})
            lines = out.getvalue().splitlines()
            assert lines[0].startswith("a0: 2 requests, 1 hits, 1 loads, "), lines
            assert lines[-1] == "1 other adapters: 1 requests", lines


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_promql_blocks_read_what_serve_exports(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    names = exported(await router_scrape(serve, adapter_dir))
    queries = [line for _, text in blocks("promql") for line in text.splitlines() if line.strip()]
    assert queries
    for query in queries:
        read = selectors(query)
        assert read.selectors, query
        labels: set[str] = set()
        for selector in read.selectors:
            assert selector.name in names, f"{query}: no series {selector.name}"
            assert selector.labels <= names[selector.name], query
            labels |= names[selector.name]
        assert read.grouping <= labels, query


def test_the_prometheus_job_finds_the_pods_as_annotated() -> None:
    ((_, text),) = blocks("yaml")
    (config,) = load_all(text)
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    rules = job["relabel_configs"]
    keep = next(r for r in rules if r["action"] == "keep")
    path = next(r for r in rules if r.get("target_label") == "__metrics_path__")
    address = next(r for r in rules if r.get("target_label") == "__address__")
    prefix = "__meta_kubernetes_pod_annotation_"
    for name in ("lorafleet-router", "vllm"):
        deployment = objects()[("Deployment", name)]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        meta = {prefix + re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in annotations.items()}
        # Prometheus joins source labels with ";" and anchors each regex at both ends.
        assert re.fullmatch(keep["regex"], ";".join(meta[s] for s in keep["source_labels"])), name
        assert re.fullmatch(path["regex"], meta[path["source_labels"][0]]), name
        assert meta[path["source_labels"][0]] == "/metrics"
        sources = ";".join(["10.1.2.3:9999", *(meta[s] for s in address["source_labels"][1:])])
        match = re.fullmatch(address["regex"], sources)
        assert match is not None, name
        target = address["replacement"].replace("$1", match[1]).replace("$2", match[2])
        assert target == f"10.1.2.3:{port_number(container(deployment), 'http')}", name


def test_sh_blocks_name_what_the_example_has() -> None:
    objs = objects()
    secrets = {
        ref
        for name in ("lorafleet-router", "vllm")
        for ref in secret_env(container(objs[("Deployment", name)])).values()
    }
    forwarded: dict[int, int] = {}
    admin_ports: set[int] = set()
    toml = router_toml()
    router_box = container(objs[("Deployment", "lorafleet-router")])
    commands = [shlex.split(line) for _, text in blocks("sh") for line in _lines(text)]
    seen = set()
    for words in commands:
        match words:
            case ["kubectl", "create", "secret", "generic", name, *literals]:
                keys = {w.removeprefix("--from-literal=").split("=", 1)[0] for w in literals}
                assert all(w.startswith("--from-literal=") for w in literals), literals
                assert {(name, key) for key in keys} == secrets
            case ["kubectl", "apply", "-f", path]:
                assert (ROOT / path).resolve() == (
                    ROOT / "deploy" / "kubernetes" / "lorafleet.yaml"
                ).resolve()
            case ["kubectl", "rollout", "status", target]:
                kind, name = target.split("/")
                assert kind == "deployment"
                assert ("Deployment", name) in objs
            case ["kubectl", "port-forward", target, ports]:
                kind, name = target.split("/")
                local, remote = (int(p) for p in ports.split(":"))
                if kind == "service":
                    assert remote in [p["port"] for p in objs[("Service", name)]["spec"]["ports"]]
                    assert toml["server"]["port"] == remote
                else:  # the admin port, on one router pod: no Service names it
                    assert (kind, name) == ("deployment", "lorafleet-router")
                    assert remote in [p["containerPort"] for p in router_box["ports"]]
                    assert toml["admin"]["port"] == remote
                    admin_ports.add(local)
                forwarded[local] = remote
            case ["curl", *options, url]:
                headers = _curl_headers(options)
                found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url)
                assert found is not None, url
                assert int(found[1]) in forwarded, url
                if int(found[1]) in admin_ports:
                    assert found[2] in ADMIN_ROUTES, url
                    key = f"${toml['admin']['api_key_env']}"
                    assert headers == {"Authorization": f"Bearer {key}"}, headers
                    assert toml["admin"]["api_key_env"] in secret_env(router_box), key
                else:
                    assert found[2] in ROUTES, url
                    assert headers == {}, headers
            case _:
                raise AssertionError(f"a command the checks do not know: {words}")
        seen.add(tuple(words[:2]))
    assert ("kubectl", "create") in seen
    assert ("curl", "-s") in seen


def _curl_headers(options: list[str]) -> dict[str, str]:
    """The headers curl's options send (``-H "Name: value"``); any option but ``-s`` and ``-H`` fails."""
    headers: dict[str, str] = {}
    words = iter(options)
    for option in words:
        if option == "-H":
            name, _, value = next(words).partition(": ")
            headers[name] = value
        else:
            assert option == "-s", options
    return headers


def _lines(text: str) -> list[str]:
    """The commands of a block, with continued lines joined."""
    return [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]
