"""The Kubernetes example (deploy/kubernetes/lorafleet.yaml), read: its objects and what is in them."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from yamlish import load_all

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "deploy" / "kubernetes" / "lorafleet.yaml"
REAL_VLLM = Path(__file__).resolve().parent / "real_vllm.py"


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """The manifest's objects by (kind, name)."""
    out = {}
    for doc in load_all(MANIFEST.read_text(encoding="utf-8")):
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, f"{key} twice"
        out[key] = doc
    return out


def router_toml() -> dict[str, Any]:
    text = objects()[("ConfigMap", "lorafleet-router")]["data"]["router.toml"]
    return tomllib.loads(text)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def port_number(box: dict[str, Any], port: int | str) -> int:
    """A probe's or a Service's port in ``box`` (a container): a number, or a named port's number."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in box["ports"] if p.get("name") == port]
    assert isinstance(number, int)
    return number


def flags(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` and bare ``--flag`` in ``args``."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        assert args[i].startswith("--"), args[i]
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            out[args[i]] = None
            i += 1
    return out


def secret_env(box: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """A container's env vars set from a Secret: name to (secret, key)."""
    out = {}
    for var in box.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            out[var["name"]] = (ref["name"], ref["key"])
    return out


def real_vllm_flags() -> set[str]:
    """The flags tests/real_vllm.py starts the real engine with (its ``VllmServer.start``)."""
    tree = ast.parse(REAL_VLLM.read_text(encoding="utf-8"))
    (start,) = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "VllmServer"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "start"
    ]
    return {
        node.value
        for node in ast.walk(start)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--")
    }
