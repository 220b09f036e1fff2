"""The stand-in answers by content: its text under an adapter depends on the adapter's weights files as
the engine read them, so a test can tell which version of an adapter answered.

Over real HTTP against a stand-in in its own thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from lorafleet_standin import StandInServer, generated, weights_digest

from conftest import make_adapter

PROMPT = "hello"


def text(client: httpx.Client, model: str) -> str:
    answer = client.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 6})
    assert answer.status_code == 200, answer.text
    said: str = answer.json()["choices"][0]["text"]
    return said


def load(client: httpx.Client, name: str, folder: Path) -> None:
    answer = client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)})
    assert answer.status_code == 200, answer.text


def unload(client: httpx.Client, name: str) -> None:
    answer = client.post("/v1/unload_lora_adapter", json={"lora_name": name})
    assert answer.status_code == 200, answer.text


def retrain(folder: Path, weights: bytes) -> None:
    """New weights in ``folder``, as a training run writes them."""
    (folder / "adapter_model.safetensors").write_bytes(weights)


def test_an_adapter_answers_by_the_weights_it_was_loaded_with(
    serve: Callable[..., StandInServer], tmp_path: Path
) -> None:
    folder = make_adapter(tmp_path / "sql")
    server = serve()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        load(client, "sql", folder)
        old = weights_digest(folder)
        assert text(client, "sql") == "".join(generated("sql", PROMPT, 6, old))
        retrain(folder, b"\1" * 64)
        new = weights_digest(folder)
        assert new != old
        # The engine holds what it read: the copy in memory answers, whatever the folder holds now.
        assert text(client, "sql") == "".join(generated("sql", PROMPT, 6, old))
        unload(client, "sql")
        load(client, "sql", folder)
        assert text(client, "sql") == "".join(generated("sql", PROMPT, 6, new))
        assert "".join(generated("sql", PROMPT, 6, new)) != "".join(generated("sql", PROMPT, 6, old))
        # The base model has no weights of its own here: its text is the model's and the prompt's.
        assert text(client, "tiny") == "".join(generated("tiny", PROMPT, 6))


def test_two_folders_with_the_same_weights_differ_by_name_and_one_without_weights_by_name_alone(
    serve: Callable[..., StandInServer], tmp_path: Path
) -> None:
    a, b = make_adapter(tmp_path / "a"), make_adapter(tmp_path / "b")
    assert weights_digest(a) == weights_digest(b) != ""
    assert weights_digest(tmp_path / "nowhere") == ""
    server = serve()
    server.app.register("x", str(tmp_path / "nowhere"))  # as another router would; no files to read
    with httpx.Client(base_url=server.url, timeout=10) as client:
        load(client, "a", a)
        load(client, "b", b)
        assert text(client, "a") != text(client, "b")
        assert text(client, "x") == "".join(generated("x", PROMPT, 6))


def test_an_adapter_read_back_from_disk_reads_what_its_folder_holds_then(
    serve: Callable[..., StandInServer], tmp_path: Path
) -> None:
    """vLLM drops an adapter from its memory (``--max-cpu-loras``) and reads it back from the path it
    was loaded from at its next request: new weights written there meanwhile are what it reads."""
    folders = {name: make_adapter(tmp_path / name) for name in ("a", "b")}
    server = serve(max_cpu_loras=1)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        load(client, "a", folders["a"])
        before = text(client, "a")
        load(client, "b", folders["b"])  # memory for one: a is dropped, its name still registered
        retrain(folders["a"], b"\2" * 64)
        after = text(client, "a")
    assert server.app.memory().rereads == 1
    assert after != before
    assert after == "".join(generated("a", PROMPT, 6, weights_digest(folders["a"])))
