"""vLLM's listing and runtime LoRA routes: /v1/models, /v1/load_lora_adapter, /v1/unload_lora_adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._asgi import Send, respond, respond_json
from ._engine import Engine
from ._family import Family, rejection_type
from ._weights import weights_digest


def listing(engine: Engine) -> dict[str, Any]:
    """``/v1/models``: the base model, then every adapter, in registration order."""
    cards = [_card(engine, engine.model, engine.model_root, None)]
    cards += [_card(engine, name, path, engine.model) for name, path in engine.adapters.items()]
    return {"object": "list", "data": cards}


def _card(engine: Engine, name: str, root: str, parent: str | None) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": engine.created,
        "owned_by": "vllm",
        "root": root,
        "parent": parent,
        "max_model_len": engine.max_model_len if parent is None else None,
        "permission": [
            {
                "id": f"modelperm-{engine.next_id():016x}",
                "object": "model_permission",
                "created": engine.created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }


async def load(engine: Engine, send: Send, body: Any, headers: dict[str, str]) -> None:
    family = engine.family
    bad = _bad_request(family, body, headers, ("lora_name", "lora_path"))
    if bad is not None:
        await respond_json(send, 400, bad)
        return
    name, path = body["lora_name"], body["lora_path"]
    if not name or not path:
        message = "Both 'lora_name' and 'lora_path' must be provided."
        await respond_json(send, 400, family.error(400, message, "InvalidUserInput"))
        return
    if family.refuses_the_base_models_name and name == engine.model:
        message = f"The lora adapter '{name}' conflicts with a served base model."
        await respond_json(send, 400, family.error(400, message, "InvalidUserInput"))
        return
    if engine.has(name):
        await respond_json(send, 400, family.error(400, family.already_loaded(name), "InvalidUserInput"))
        return
    if family.checks_at_load:
        refused = refusal(engine, name, path)
        if refused is not None:
            await respond_json(send, *refused)
            return
    weights = weights_digest(path)  # what the engine reads, and its answers under the adapter depend on
    await engine.read_from_disk()
    if not engine.register(name, path, weights):  # another call won the race while the files were read
        await respond_json(send, 400, family.error(400, family.already_loaded(name), "InvalidUserInput"))
        return
    await respond(send, 200, f"Success: LoRA adapter '{name}' added successfully.".encode(), None)


def refusal(engine: Engine, name: str, path: str) -> tuple[int, dict[str, Any]] | None:
    """What the engine says of an adapter directory, as vLLM validates it; None if it loads."""
    family = engine.family
    if not engine.enable_lora:
        disabled = "LoRA is not enabled. Use --enable-lora to enable LoRA."
        status = family.rejection_status
        return status, family.error(status, family.rejected(disabled), rejection_type(status))
    folder = Path(path).expanduser()
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        status = family.missing_status
        type_ = "NotFoundError" if status == 404 else "BadRequestError"
        return status, family.error(status, family.missing(name, path), type_)
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        config = {}
    reason: str | None = None
    rank = max([int(config.get("r", 0))] + [int(v) for v in (config.get("rank_pattern") or {}).values()])
    if "r" not in config:
        reason = "Missing required configuration fields: {'r'}"
    elif rank > engine.max_lora_rank:
        reason = f"LoRA rank {rank} is greater than max_lora_rank {engine.max_lora_rank}."
    elif config.get("use_dora"):
        reason = "vLLM does not yet support DoRA."
    elif config.get("bias", "none") != "none":
        reason = "Adapter bias is not supported."
    elif not any(folder.glob("adapter_model.*")):
        reason = f"{family.sanitise(str(folder))} doesn't contain tensors"
    if reason is None:
        return None
    status = family.rejection_status
    return status, family.error(status, family.rejected(reason), rejection_type(status))


def _bad_request(
    family: Family, body: Any, headers: dict[str, str], fields: tuple[str, ...]
) -> dict[str, Any] | None:
    """FastAPI's answer to a body that is not the JSON the route wants, or None when it is."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if family.checks_content_type and content_type != "application/json":
        message = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
        return family.error(400, message, "Bad Request")
    for field in fields:
        if not isinstance(body, dict) or not isinstance(body.get(field), str):
            message = (
                "1 validation error:\n  {'type': 'missing', 'loc': 'body."
                f"{field}', 'msg': 'Field required', 'input': '<dict of {len(body or {})} items>'}}"
            )
            return family.error(400, message, "Bad Request", f"body.{field}")
    return None


async def unload(engine: Engine, send: Send, body: Any, headers: dict[str, str]) -> None:
    family = engine.family
    bad = _bad_request(family, body, headers, ("lora_name",))
    if bad is not None:
        await respond_json(send, 400, bad)
        return
    name = body["lora_name"]
    if not name:
        await respond_json(send, 400, family.error(400, family.unload_without_name(), "InvalidUserInput"))
        return
    if not engine.unregister(name):
        status = family.unload_not_found_status
        type_ = "NotFoundError" if status == 404 else "InvalidUserInput"
        message = f"The lora adapter '{name}' cannot be found."
        await respond_json(send, status, family.error(status, message, type_))
        return
    await respond(send, 200, f"Success: LoRA adapter '{name}' removed successfully.".encode(), None)


def make_adapters(root: Path, names: list[str]) -> None:
    """A folder under ``root`` for each of ``names`` that the stand-in's load route takes as an
    adapter (rank 8, a few bytes of weights): what a demo or a benchmark serves."""
    for name in names:
        folder = root / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
