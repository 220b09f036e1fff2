"""deploy/kubernetes/lorafleet.yaml: the names, ports, keys and flags of its objects agree with each
other, with ``lorafleet serve``'s settings and with the vLLM flags the real-engine tests run.

The manifests are read with tests/yamlish.py (a strict subset of YAML, stdlib only). The ConfigMap's
router.toml is read by serve's own loader and checks, its ``[[discover]]`` tables included; the
router's probes are tried on a running router under asyncio and trio.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lorafleet import limit_for
from lorafleet_fleet import HEADROOM
from lorafleet_serve import ReplicaConfig, RouterServer
from lorafleet_serve._config import build, settings_of
from lorafleet_standin import StandInServer

from manifests import (
    MANIFEST,
    container,
    flags,
    objects,
    port_number,
    real_vllm_flags,
    router_toml,
    secret_env,
)
from yamlish import YamlSubsetError, load_all

LORA_FLAGS = {"--enable-lora", "--max-loras", "--max-cpu-loras", "--max-lora-rank"}


def test_the_router_toml_loads_with_serves_loader(tmp_path: Path) -> None:
    """The whole file, its [[discover]] tables too, through serve's loader and its checks."""
    data = router_toml()
    settings = settings_of(data, "router.toml")
    assert len(settings["discover"]) == 1
    config = build({**settings, "adapter_root": tmp_path})  # the adapters' volume is the pod's
    assert config.host == "0.0.0.0"  # in a pod, traffic comes to the pod's address
    assert settings["adapter_root"] == Path("/srv/adapters")


def test_the_names_ports_and_keys_agree() -> None:
    objs = objects()
    data = router_toml()
    (discover,) = data["discover"]
    server = data["server"]
    router = objs[("Deployment", "lorafleet-router")]
    router_box = container(router)
    vllm = objs[("Deployment", "vllm")]
    vllm_box = container(vllm)
    headless = objs[("Service", "vllm")]
    front = objs[("Service", "lorafleet")]

    # The headless Service is what the router's DNS name names, in the namespace "default".
    assert headless["spec"]["clusterIP"] == "None"
    assert discover["dns"] == f"{headless['metadata']['name']}.default.svc.cluster.local"
    assert not discover.get("srv", False)  # A records, with the port from the table
    (vllm_port,) = headless["spec"]["ports"]
    assert vllm_port["port"] == discover["port"]
    assert port_number(vllm_box, vllm_port["targetPort"]) == discover["port"]
    assert headless["spec"]["selector"].items() <= vllm["spec"]["template"]["metadata"]["labels"].items()
    assert vllm["spec"]["selector"]["matchLabels"] == vllm["spec"]["template"]["metadata"]["labels"]

    # The router runs serve with the ConfigMap's file, and listens where its probes and Service look.
    volumes = {v["name"]: v for v in router["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in router_box["volumeMounts"]}
    (config_volume,) = [
        n for n, v in volumes.items() if v.get("configMap", {}).get("name") == "lorafleet-router"
    ]
    assert router_box["command"] == ["lorafleet", "serve", "--config", f"{mounts[config_volume]}/router.toml"]
    assert port_number(router_box, "http") == server["port"]
    ready, alive = router_box["readinessProbe"]["httpGet"], router_box["livenessProbe"]["httpGet"]
    assert (port_number(router_box, ready["port"]), ready["path"]) == (server["port"], "/health")
    # Liveness on the admin interface's own port, which no Service names, and which listens on the
    # pod's address (the kubelet probes that) with a key of its own.
    admin = data["admin"]
    assert (port_number(router_box, alive["port"]), alive["path"]) == (admin["port"], "/live")
    assert admin["host"] == "0.0.0.0"
    for service in (objs[("Service", "lorafleet")], headless):
        assert admin["port"] not in [
            port_number(router_box, p["targetPort"]) for p in service["spec"]["ports"]
        ]
    (front_port,) = front["spec"]["ports"]
    assert port_number(router_box, front_port["targetPort"]) == server["port"]
    assert front["spec"]["selector"].items() <= router["spec"]["template"]["metadata"]["labels"].items()
    assert router["spec"]["selector"]["matchLabels"] == router["spec"]["template"]["metadata"]["labels"]
    # Two routers that find each other by their own headless Service: one decides, the other relays
    # ([share] off: one router's memory is every slot); a drain takes one at a time; each gets its
    # shutdown time before it is killed.
    assert router["spec"]["replicas"] == 2
    assert "routers" not in data.get("fleet", {})
    peers = data["peers"]
    routers = objs[("Service", "lorafleet-routers")]
    assert routers["spec"]["clusterIP"] == "None"
    assert peers["dns"] == f"{routers['metadata']['name']}.default.svc.cluster.local"
    (peer_port,) = routers["spec"]["ports"]
    assert peer_port["port"] == peers["port"] == server["port"]
    assert port_number(router_box, peer_port["targetPort"]) == server["port"]
    assert routers["spec"]["selector"].items() <= router["spec"]["template"]["metadata"]["labels"].items()
    budget = objs[("PodDisruptionBudget", "lorafleet-router")]["spec"]
    assert budget["minAvailable"] == 1
    assert (
        budget["selector"]["matchLabels"].items() <= router["spec"]["template"]["metadata"]["labels"].items()
    )
    shutdown = data.get("timeouts", {}).get("shutdown", 10)
    assert router["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > shutdown

    # Keys: every variable the file names comes from the one Secret, the pods' from the same key.
    router_keys = secret_env(router_box)
    keys = (
        server["api_key_env"],
        server["metrics_api_key_env"],
        admin["api_key_env"],
        discover["api_key_env"],
    )
    for name in keys:
        assert name in router_keys, name
    assert len({router_keys[name] for name in keys[:3]}) == 3  # clients', Prometheus's, the operator's
    vllm_keys = secret_env(vllm_box)
    assert vllm_keys["VLLM_API_KEY"] == router_keys[discover["api_key_env"]]
    assert {secret for secret, _ in (*router_keys.values(), *vllm_keys.values())} == {"lorafleet-keys"}

    # The adapters are one volume, at the same path in both: the router checks a name's folder, the
    # engine loads the path the router sends.
    root = data["adapters"]["root"]
    claims = {}
    for deployment, box in ((router, router_box), (vllm, vllm_box)):
        by_name = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        (mount,) = [m for m in box["volumeMounts"] if m["mountPath"] == root]
        claims[deployment["metadata"]["name"]] = by_name[mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert len(set(claims.values())) == 1, claims


def test_the_engine_pods_run_as_the_real_engine_tests_do() -> None:
    objs = objects()
    (discover,) = router_toml()["discover"]
    fleet = router_toml().get("fleet", {})
    vllm_box = container(objs[("Deployment", "vllm")])
    args = flags(vllm_box["args"])
    assert vllm_box["command"] == ["vllm", "serve"]
    # Every flag is one the real-engine tests start vLLM 0.32 with, and the LoRA ones are all there.
    assert set(args) <= real_vllm_flags(), sorted(set(args) - real_vllm_flags())
    assert set(args) >= LORA_FLAGS
    assert args["--enable-lora"] is None
    env = {var["name"]: var.get("value") for var in vllm_box["env"]}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert args["--served-model-name"] == discover["model"]
    assert int(args["--port"] or 0) == discover["port"] == port_number(vllm_box, "http")
    assert vllm_box["readinessProbe"]["httpGet"]["path"] == "/health"
    assert port_number(vllm_box, vllm_box["readinessProbe"]["httpGet"]["port"]) == discover["port"]
    # docs/routers.md, "Sizing": the routers are told the pods' --max-cpu-loras, and what a replica
    # may hold at worst stays within it, filling it with one router.
    max_cpu_loras = int(args["--max-cpu-loras"] or 0)
    assert discover["max_cpu_loras"] == max_cpu_loras
    routers, headroom = fleet.get("routers", 1), fleet.get("headroom", HEADROOM)
    limit = discover.get("limit", limit_for(max_cpu_loras, headroom, routers))
    worst = limit + (routers - 1) * math.ceil(limit / routers) + routers * headroom
    assert worst <= max_cpu_loras, (worst, max_cpu_loras)
    assert worst == max_cpu_loras or routers > 1, "one router leaves none of the memory empty"
    assert int(args["--max-loras"] or 0) <= max_cpu_loras


def test_the_manifest_reader_refuses_what_kubernetes_reads_otherwise() -> None:
    for text in (
        "env:\n- name: X\n  value: True\n",  # a boolean where the env var wants a string
        "a: yes\n",
        "a: &anchor 1\nb: *anchor\n",
        "a:\n  b: 1\n  b: 2\n",
    ):
        with pytest.raises(YamlSubsetError):
            load_all(text)
    assert load_all('a: "True"\nb: [1, "x"]\nc: |\n  x = 1\n  # kept\n---\n- - x\n') == [
        {"a": "True", "b": [1, "x"], "c": "x = 1\n# kept\n"},
        [["x"]],
    ]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_task_left_running")
async def test_the_router_answers_its_probes_as_the_manifest_expects(
    serve: Callable[..., StandInServer], adapter_dir: Path
) -> None:
    """Readiness follows the replicas; liveness answers without a key, with every replica down;
    /metrics wants Prometheus's key, the admin interface the operator's."""
    objs = objects()
    data = router_toml()
    (discover,) = data.pop("discover")
    data.pop("peers")  # no cluster DNS here: this router decides alone
    box = container(objs[("Deployment", "lorafleet-router")])
    ready, alive = box["readinessProbe"]["httpGet"]["path"], box["livenessProbe"]["httpGet"]["path"]
    standin = serve(api_key="pod-key")
    settings = settings_of(data, "router.toml")
    replica = ReplicaConfig(
        id="vllm-0",
        url=standin.url,
        model=discover["model"],
        max_cpu_loras=discover["max_cpu_loras"],
        api_key_env=discover["api_key_env"],
    )
    here = {"host": "127.0.0.1", "port": 0, "admin_host": "127.0.0.1", "admin_port": 0}
    config = build({**settings, "replicas": (replica,), "adapter_root": adapter_dir, **here})
    server_keys = data["server"]
    environ = {
        server_keys["api_key_env"]: "router-key",
        server_keys["metrics_api_key_env"]: "metrics-key",
        data["admin"]["api_key_env"]: "admin-key",
        discover["api_key_env"]: "pod-key",
    }
    async with (
        RouterServer(config, environ=environ) as server,
        httpx.AsyncClient(base_url=server.url) as client,
        httpx.AsyncClient(base_url=server.admin_url) as admin,
    ):
        assert (await client.get(ready)).status_code == 200
        assert (await admin.get(alive)).status_code == 200
        assert (await client.get("/v1/models")).status_code == 401  # the key is the Secret's
        assert (await client.get("/metrics")).status_code == 401
        assert (
            await client.get("/metrics", headers={"Authorization": "Bearer router-key"})
        ).status_code == 401
        assert (
            await client.get("/metrics", headers={"Authorization": "Bearer metrics-key"})
        ).status_code == 200
        assert (await admin.get("/replicas")).status_code == 401
        assert (
            await admin.get("/replicas", headers={"Authorization": "Bearer admin-key"})
        ).status_code == 200
        server.fleet.replica_failed("vllm-0", "down, for the test")
        assert (await client.get(ready)).status_code == 503
        assert (await admin.get(alive)).status_code == 200


def test_no_tabs_and_one_object_per_name() -> None:
    text = MANIFEST.read_text(encoding="utf-8")
    assert "\t" not in text
    kinds = re.findall(r"^kind: (\w+)$", text, flags=re.MULTILINE)
    assert sorted(kinds) == sorted(kind for kind, _ in objects())
