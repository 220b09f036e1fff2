"""Every fenced block of README.md and docs/*.md, run or read as what it claims to be.

(docs/operations.md has its own test, tests/test_operations_doc.py.)

- ``toml``: a router's file, checked by ``lorafleet serve --config FILE --check``;
- ``python``: run, and what it prints must be what its ``print(...)  # comment`` lines say;
- ``text``: the output of the demo command in the shell block before it: every row it shows, the demo
  prints;
- ``trace``: a ``lorafleet simulate --trace`` file, the ``requests.txt`` its doc's commands read;
- ``sh``: each command by its kind (``SHELL`` below): ``export``, ``lorafleet serve`` (run with
  ``--check``), ``curl`` (run, against ``lorafleet serve`` serving the doc's file with stand-ins for
  its replicas: its answer must be JSON and no error), ``lorafleet simulate`` (run, cut to a few
  hundred requests), ``pip install`` (pip's
  ``--dry-run``, from the repository), vLLM's own command lines, whose every flag must be in a real
  vLLM 0.32's ``--help`` and every ``VLLM_`` variable among vLLM's, the repository's scripts (run, or
  for those that run for minutes or serve until stopped, their flags found in their ``--help``), and
  the few that are not run at all, each with the reason in ``NOT_RUN``.

A block of another kind, or a command of another kind, fails the test: say how to run it here first.
Paths the docs use for a real deployment (``/srv/adapters``, ``/path/to/lorafleet``) are taken for
folders made here, and the replicas' addresses (``http://10.0.0.5:8000``, ``http://10.0.0.6:8000``) for
vLLM stand-ins serving ``llama``. Every relative link in them must lead to a file, and an anchor to a
heading of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest

from lorafleet._cli import main as lorafleet
from lorafleet_standin import StandInServer, VllmStandIn

from conftest import make_adapter

ROOT = Path(__file__).resolve().parent.parent
OWN_TEST = {"operations.md": ROOT / "tests" / "test_operations_doc.py"}
"""Docs whose blocks another test checks."""
DOCS = (ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TEST))
KINDS = {"sh", "toml", "python", "text", "trace"}
REPLICAS = ("http://10.0.0.5:8000", "http://10.0.0.6:8000")
"""The replicas' addresses in the docs' examples: stand-ins here."""
CUT = ["--requests", "300", "--seeds", "1"]
"""What a ``lorafleet simulate`` command of the docs is run with here, after its own arguments."""
DEMO_CUT = ["--requests", "40", "--adapters", "6", "--replicas", "2"]
"""What the demo is run with here, after the doc's own arguments: a few seconds rather than twenty."""
HELP_ONLY = {
    "bench/bench.py": "prints the whole table in about 1.5 minutes, and writes bench/results.md",
    "bench/serve_bench.py": "about 30 s a run, and writes bench/serve_results.md",
    "bench/metrics_read.py": "needs the real vLLM, and writes bench/metrics_results.md",
    "bench/headroom.py": "runs the simulator for minutes",
    "bench/weights.py": "weighs 200 million pairs, minutes (tests/test_bench.py runs a small one)",
    "bench/replay.py": (
        "records a request log through serve for minutes (--engine vllm: in front of real vLLM servers), "
        "and writes its results with --out"
    ),
    "bench/peer_bench.py": "starts real vLLM servers for every arm, an hour; writes bench/peer_results.md",
    "bench/peer_logs.py": "reads the logs a peer_bench.py run kept (--keep), which this machine may not have",
    "bench/routers_bench.py": (
        "starts routers and stand-ins for minutes, and writes its results with --out "
        "(tests/test_routers_bench.py runs a small one)"
    ),
    "bench/relay_hop.py": "writes its results with --out (tests/test_routers_bench.py runs a small one)",
    "bench/demo_arms.py": "runs the demo's arms for minutes (tests/test_bench.py runs a small one)",
    "-m lorafleet_standin": "serves until stopped",
    "sim/several_routers.py": "runs the simulator for minutes",
    "sim/share_routers.py": "runs the simulator for minutes",
}
"""Scripts run for minutes or until stopped: every flag the docs give them must be in their --help."""
NOT_RUN = {
    "vectors/generate.py": (
        "it rewrites vectors/hand and vectors/hypothesis (minutes of Hypothesis search); "
        "tests/test_vectors.py checks that hand/ is what it generates"
    ),
}
"""Commands the docs give that are not run here, with the reason."""
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
    assert {b.kind for b in ALL} <= KINDS, [(b.name, b.kind) for b in ALL if b.kind not in KINDS]
    for doc in DOCS:
        assert blocks(doc), f"{doc.name} has no block: is it in the right list?"


def test_every_doc_is_checked_here_or_by_its_own_test() -> None:
    for doc in (ROOT / "docs").glob("*.md"):
        assert doc in DOCS or OWN_TEST[doc.name].exists(), doc


def test_a_text_block_is_the_demo_output_the_block_before_it_runs() -> None:
    for doc in DOCS:
        found = blocks(doc)
        for i, block in enumerate(found):
            if block.kind == "text":
                before = found[i - 1] if i else None
                assert before is not None, block.name
                assert before.kind == "sh", block.name
                assert "dev.py demo" in before.text, block.name


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(
    "doc", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda d: d.name
)
def test_every_relative_link_leads_somewhere(doc: Path) -> None:
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: {target} leads nowhere"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.MULTILINE)
            assert anchor in {slug(h) for h in headings}, f"{doc.name}: {target}: no such heading"


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
    block: Block,
    tmp_path: Path,
    deployment: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in _exports(block.doc).items():  # the keys' variables the doc sets
        monkeypatch.setenv(name, value)
    path = tmp_path / "router.toml"
    path.write_text(placed(block.text, deployment))
    out, _ = check_serve(["--config", str(path)], capsys)
    assert out.startswith("replicas: ")


@pytest.fixture
def replicas() -> Iterator[dict[str, str]]:
    """The docs' replicas' addresses, as vLLM stand-ins serving their model here."""
    servers = [StandInServer(VllmStandIn(model="llama")) for _ in REPLICAS]
    for server in servers:
        server.start()
    try:
        yield {address: server.url for address, server in zip(REPLICAS, servers, strict=True)}
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "python"], ids=lambda b: b.name)
def test_a_python_block_runs_and_prints_what_it_says(
    block: Block, tmp_path: Path, deployment: dict[str, str], replicas: dict[str, str]
) -> None:
    script = tmp_path / "example.py"
    script.write_text(placed(block.text, {**deployment, **replicas}))
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
PYTHON = {"python", "python3", ".venv/bin/python"}


def flags_in_help(argv: list[str], name: str) -> None:
    """A command not run here: every flag it is given must be one its ``--help`` names."""
    done = subprocess.run(
        [sys.executable, *argv[: 2 if argv[0] == "-m" else 1], "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    named = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", done.stdout))
    unknown = [a for a in argv if a.startswith("--") and a.split("=", 1)[0] not in named]
    assert not unknown, f"{name}: {shlex.join(argv)}: its --help names no {unknown}"
    if argv[0] == "bench/bench.py" and "--only" in argv:
        rows = subprocess.run(
            [sys.executable, argv[0], "--list"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=True,
        ).stdout
        for key in argv[argv.index("--only") + 1].split(","):
            assert re.search(rf"^\s*{re.escape(key)}", rows, flags=re.MULTILINE), f"{name}: no row {key!r}"


def run_demo(args: list[str], block: Block) -> None:
    """``dev.py demo ARGS``: ``lorafleet demo``, cut short; the text block after it shows rows it prints."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lorafleet")), "demo", *args, *DEMO_CUT, "--runtime", "asyncio"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line.strip() for line in done.stdout.splitlines()]
    found = blocks(block.doc)
    after = found[found.index(block) + 1] if found.index(block) + 1 < len(found) else None
    if after is not None and after.kind == "text":
        for line in after.text.splitlines():
            label = re.split(r"\s{2,}", line.strip())[0]
            assert any(p.startswith(label) for p in printed), f"{after.name}: the demo prints no {label!r}"


def run_simulate(args: list[str], block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lorafleet simulate ARGS``, cut to a few hundred requests, in a folder holding the doc's trace."""
    from lorafleet_sim._cli import parser

    trace = next((b for b in blocks(block.doc) if b.kind == "trace"), None)
    if trace is not None:
        (tmp_path / "requests.txt").write_text(trace.text)
    monkeypatch.chdir(tmp_path)
    parsed = parser().parse_args([*args, *CUT])  # the real parser: every flag and value accepted
    assert lorafleet(["simulate", *args, *CUT]) == 0
    if parsed.out is not None:
        assert parsed.out.read_text().startswith("#")


@pytest.mark.parametrize("block", SH, ids=lambda b: b.name)
def test_a_shell_block_runs(
    block: Block,
    request: pytest.FixtureRequest,
    deployment: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    toml = next((b for b in ALL if b.doc == block.doc and b.kind == "toml"), None)
    if toml is not None:  # "router.toml" in a command is the doc's file
        (tmp_path / "router.toml").write_text(placed(toml.text, deployment))
    router: dict[str, str] | None = None  # started for the block's first curl
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)
    for words in commands(placed(block.text, deployment)):
        if words[0] == "curl":
            if router is None:
                assert toml is not None, f"{block.name}: curl wants the doc's router file"
                router = stack.enter_context(
                    doc_router(block, toml, deployment, request.getfixturevalue("replicas"), tmp_path)
                )
            run_curl(words, router, block)
            continue
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            monkeypatch.setenv(name, value)  # restored after the test
            continue
        if words[:2] == ["lorafleet", "serve"]:
            args = [str(tmp_path / "router.toml") if w == "router.toml" else w for w in words[2:]]
            _, err = check_serve(args, capsys)
            if "max_cpu_loras=4" in block.text:  # serve.md's sizing example: the warning it promises
                # limit 4 + (2 - 1) x ceil(4 / 2) + 2 x headroom 0 (the default: the whole memory)
                assert "can put 6 adapters on its engine" in err
            continue
        if words[:2] == ["lorafleet", "simulate"]:
            run_simulate(words[2:], block, tmp_path, monkeypatch)
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
        if run_script(words, block, tmp_path):
            continue
        vllm = vllm_command(list(words))
        assert vllm is not None, f"{block.name}: a command this test cannot run: {shlex.join(words)}"
        flags, envs = request.getfixturevalue("vllm_flags")
        variables, args = vllm
        unknown = [a.split("=", 1)[0] for a in args if a.startswith("--") and a.split("=", 1)[0] not in flags]
        assert not unknown, f"{block.name}: vLLM has no {unknown}"
        for name in variables:
            assert f'"{name}"' in envs, f"{block.name}: vLLM reads no {name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _exports(doc: Path) -> dict[str, str]:
    """What the doc's shell blocks ``export``, for commands that read the variables."""
    found = {}
    for block in blocks(doc):
        if block.kind == "sh":
            for words in commands(block.text):
                if words[0] == "export":
                    name, _, value = words[1].partition("=")
                    found[name] = value
    return found


@contextlib.contextmanager
def doc_router(
    block: Block, toml: Block, deployment: dict[str, str], replicas: dict[str, str], tmp_path: Path
) -> Iterator[dict[str, str]]:
    """``lorafleet serve`` with the doc's file, its replicas stand-ins, on free ports of 127.0.0.1:
    yields the addresses the doc's commands name (``http://127.0.0.1:PORT`` for the file's ports),
    mapped to where it listens, once its admin interface answers."""
    import tomllib

    path = tmp_path / "served.toml"
    path.write_text(placed(toml.text, {**deployment, **replicas}))
    settings = tomllib.loads(path.read_text())
    port, admin = _free_port(), _free_port()
    addresses = {
        f"http://127.0.0.1:{settings.get('server', {}).get('port', 8000)}": f"http://127.0.0.1:{port}"
    }
    args = ["serve", "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
    if "admin" in settings:
        addresses[f"http://127.0.0.1:{settings['admin']['port']}"] = f"http://127.0.0.1:{admin}"
        args += ["--admin-port", str(admin)]
    env = {**os.environ, **_exports(block.doc)}
    log = tmp_path / "serve.log"
    with log.open("w") as logged:
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("lorafleet")), *args], env=env, stdout=logged, stderr=logged
        )
    try:
        probe = f"http://127.0.0.1:{admin if 'admin' in settings else port}"
        probe += "/live" if "admin" in settings else "/health"
        deadline = time.monotonic() + 60
        while True:  # until it answers: the wait is on the router, bounded
            assert server.poll() is None, f"{block.name}: lorafleet serve ended: {log.read_text()[-3000:]}"
            try:
                if httpx.get(probe, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{block.name}: lorafleet serve did not answer in 60 s"
            time.sleep(0.05)
        yield addresses
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_curl(words: list[str], addresses: dict[str, str], block: Block) -> None:
    """A doc's ``curl`` command, run as written but for the router's address, its ``$VAR``s read from
    what the doc exports as a shell would: it must answer JSON, and no error."""
    env = {**os.environ, **_exports(block.doc)}
    argv = []
    for word in words:
        for doc_address, here in addresses.items():
            word = word.replace(doc_address, here)
        argv.append(re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", lambda m: env[m[1]], word))
    if unload := re.search(r"(http://[^/]+)/replicas/([^/]+)/adapters/([^/]+)/unload$", argv[-1]):
        _until_idle(unload[1], unload[2], unload[3], argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    shown = shlex.join(words)
    assert done.returncode == 0, f"{block.name}: {shown}: {done.stderr}"
    answer = json.loads(done.stdout)
    assert isinstance(answer, dict), f"{block.name}: {shown}: {done.stdout}"
    assert "error" not in answer, f"{block.name}: {shown}: {answer}"


def _until_idle(admin: str, replica: str, adapter: str, argv: list[str]) -> None:
    """Wait, bounded, until ``adapter`` is held idle on ``replica``: the request the doc made just
    before ends on the router just after its answer, and an unload before that is refused."""
    headers = {"Authorization": argv[argv.index("-H") + 1].removeprefix("Authorization: ")}
    deadline = time.monotonic() + 30
    while httpx.get(f"{admin}/adapters/{adapter}", headers=headers).json()["held"].get(replica) != 0:
        assert time.monotonic() < deadline, f"{adapter} never idle on {replica}"
        time.sleep(0.01)


def run_script(words: list[str], block: Block, tmp_path: Path) -> bool:
    """One of the repository's own commands, run or checked by its kind; False for another command."""
    words, env = list(words), dict(os.environ)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]) and not words[0].startswith("VLLM_"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words[:1] == ["timeout"]:  # a bound on a run that goes until stopped
        words = words[2:]
    if words[:1] == ["node"]:
        node = shutil.which("node")
        if node is None:
            if os.environ.get("CI") == "true":
                pytest.fail("CI must run the docs' node commands, but node is not on PATH")
            pytest.skip("node is not on PATH")
        done = subprocess.run([node, *words[1:]], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert " 0 failed" in done.stdout, done.stdout[-2000:]
        return True
    if not words or words[0] not in PYTHON:
        return False
    argv = words[1:]
    if argv[:2] == ["-m", VLLM_MODULE]:
        return False
    script = " ".join(argv[:2]) if argv[0] == "-m" else argv[0]
    if argv[:2] == ["dev.py", "test"]:  # what CI runs: running it here would run this test inside itself
        assert "\npython3 dev.py test\n" in (ROOT / ".ci" / "run").read_text(), ".ci/run runs another command"
    elif argv[:2] == ["dev.py", "demo"]:
        run_demo(argv[2:], block)
    elif argv[:2] == ["-m", "pytest"]:  # a run until stopped: its profile and paths, collected
        collect = [sys.executable, *argv, "--collect-only", "-q", "-p", "no:cacheprovider"]
        done = subprocess.run(collect, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    elif script in HELP_ONLY:
        flags_in_help(argv, block.name)
    elif script in NOT_RUN:
        assert (ROOT / script).exists(), f"{block.name}: no {script}"
    else:  # a script or a -c program that runs in seconds: run it
        done = subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return True
