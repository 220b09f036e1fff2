"""Every fenced block of docs/serve.md and docs/vllm.md, run or read as what it claims to be.

- ``toml``: a router's file, checked by ``lorafleet serve --config FILE --check``;
- ``python``: run, and what it prints must be what its ``print(...)  # comment`` lines say;
- ``sh``: each command by its kind: ``export``, ``lorafleet serve`` (run with ``--check``), ``pip
  install`` (pip's ``--dry-run``, from the repository), and vLLM's own command lines, whose every flag
  must be in a real vLLM 0.32's ``--help`` and every ``VLLM_`` variable among vLLM's.

A block of another kind, or a command of another kind, fails the test: say how to run it here first.
Paths the docs use for a real deployment (``/srv/adapters``, ``/path/to/lorafleet``) are taken for
folders made here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from lorafleet._cli import main as lorafleet

from conftest import make_adapter

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "serve.md", ROOT / "docs" / "vllm.md")
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


@attrs.frozen
class Block:
    doc: Path
    line: int
    kind: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc.name}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    found = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"```(\S*)\s*", lines[i])
        if opening:
            start, body = i + 1, []
            i += 1
            while lines[i] != "```":
                body.append(lines[i])
                i += 1
            found.append(Block(doc, start, opening.group(1), "\n".join(body) + "\n"))
        i += 1
    return found


ALL = [block for doc in DOCS for block in blocks(doc)]


def commands(text: str) -> Iterator[list[str]]:
    """The shell block's commands, continuation lines joined, comments dropped, as words."""
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            yield words


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The docs' paths, as folders here: the adapters they name, and the keys' variables set."""
    adapters = tmp_path / "srv-adapters"
    for name in ("sql", "chat"):
        make_adapter(adapters / name)
    monkeypatch.setenv("VLLM_KEY", "change-me")
    monkeypatch.setenv("ROUTER_KEY", "change-me")
    return {"/srv/adapters": str(adapters), "/path/to/lorafleet": str(ROOT)}


def placed(text: str, deployment: dict[str, str]) -> str:
    for path, here in deployment.items():
        text = text.replace(path, here)
    return text


def test_the_docs_hold_only_blocks_this_test_runs() -> None:
    assert ALL, "no blocks found"
    assert {b.kind for b in ALL} <= {"sh", "toml", "python"}, [(b.name, b.kind) for b in ALL]


def check_serve(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """``lorafleet serve ARGS`` with ``--check``: it must accept them."""
    if "--check" not in args:
        args = [*args, "--check"]
    code = lorafleet(["serve", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "error" not in err
    return out, err


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "toml"], ids=lambda b: b.name)
def test_a_toml_block_is_a_router_file_that_checks(
    block: Block, tmp_path: Path, deployment: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "router.toml"
    path.write_text(placed(block.text, deployment))
    out, _ = check_serve(["--config", str(path)], capsys)
    assert out.startswith("replicas: ")


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "python"], ids=lambda b: b.name)
def test_a_python_block_runs_and_prints_what_it_says(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.text)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    said = [
        line.split("  # ", 1)[1] for line in block.text.splitlines() if "print(" in line and "  # " in line
    ]
    assert done.stdout.splitlines() == said


@pytest.fixture(scope="session")
def vllm_flags(real_engine: object) -> tuple[set[str], str]:
    """Every flag the real vLLM's API server takes (from its ``--help``), and its variables' source."""
    python = real_engine.python  # type: ignore[attr-defined]
    done = subprocess.run(
        [str(python), "-m", VLLM_MODULE, "--help"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    flags = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", done.stdout))
    (envs,) = Path(python).parent.parent.glob("lib/python3*/site-packages/vllm/envs.py")
    return flags, envs.read_text()


def vllm_command(words: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """The variables set before a vLLM command line, and its arguments; None for another command."""
    variables = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        variables[name] = value
    if words[:2] == ["vllm", "serve"]:
        return variables, words[2:]
    if words[:3] == ["python", "-m", VLLM_MODULE]:
        return variables, words[3:]
    return None


SH = [b for b in ALL if b.kind == "sh"]


@pytest.mark.parametrize("block", SH, ids=lambda b: b.name)
def test_a_shell_block_runs(
    block: Block,
    request: pytest.FixtureRequest,
    deployment: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    toml = next((b for b in ALL if b.doc == block.doc and b.kind == "toml"), None)
    if toml is not None:  # "router.toml" in a command is the doc's file
        (tmp_path / "router.toml").write_text(placed(toml.text, deployment))
    for words in commands(placed(block.text, deployment)):
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            os.environ[name] = value  # the deployment fixture's monkeypatch restores it
            continue
        if words[:2] == ["lorafleet", "serve"]:
            args = [str(tmp_path / "router.toml") if w == "router.toml" else w for w in words[2:]]
            _, err = check_serve(args, capsys)
            if "max_cpu_loras=4" in block.text:  # serve.md's sizing example: the warning it promises
                assert "can put 10 adapters on its engine" in err
            continue
        if words[:2] == ["pip", "install"]:
            pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet"]
            done = subprocess.run(
                [*pip, "--disable-pip-version-check", *words[2:]],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=600,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            continue
        vllm = vllm_command(list(words))
        assert vllm is not None, f"{block.name}: a command this test cannot run: {shlex.join(words)}"
        flags, envs = request.getfixturevalue("vllm_flags")
        variables, args = vllm
        unknown = [a.split("=", 1)[0] for a in args if a.startswith("--") and a.split("=", 1)[0] not in flags]
        assert not unknown, f"{block.name}: vLLM has no {unknown}"
        for name in variables:
            assert f'"{name}"' in envs, f"{block.name}: vLLM reads no {name}"
