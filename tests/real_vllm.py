"""Real vLLM for the tests: set up the engine (engine/setup.sh), start servers on 127.0.0.1, stop them.

A server runs in its own process group (API server, EngineCore, worker) and is stopped by group. A
server that fails to start raises with the tail of its log.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import httpx

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "engine" / "setup.sh"
MODEL = "tiny"
UNAVAILABLE = 3
"""engine/setup.sh's exit code when this machine cannot run vLLM (no torch +cpu wheel)."""


class EngineUnavailableError(Exception):
    """This machine cannot run the real engine; the message says why."""


@attrs.frozen
class Engine:
    venv: Path
    build: Path
    setup_seconds: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def adapter(self, name: str) -> str:
        """The folder of a built adapter: lora-0..5, rank64, broken."""
        return str(self.build / "adapters" / name)


def set_up() -> Engine:
    """Run engine/setup.sh: seconds when cached, a few minutes the first time.

    Raises:
        EngineUnavailable: the machine lacks what vLLM needs here.
        RuntimeError: setup broke; the message has the end of its output.
    """
    started = time.monotonic()
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, check=False)
    log = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("WARNING: Location"))
    if done.returncode == UNAVAILABLE:
        raise EngineUnavailableError(
            log.strip().splitlines()[-1] if log.strip() else "engine/setup.sh: unavailable"
        )
    if done.returncode != 0:
        raise RuntimeError(
            f"engine/setup.sh failed ({done.returncode}):\n" + "\n".join(log.splitlines()[-30:])
        )
    venv, build = done.stdout.split()
    return Engine(Path(venv), Path(build), time.monotonic() - started)


def _die_with_parent() -> Callable[[], None] | None:
    """For the child: SIGTERM when this process dies, however it dies (a killed pytest left three
    servers running for an hour, each a CPU's worth). Linux only, and only from the main thread:
    the signal comes when the thread that started the child ends."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above: nobody would signal
            os._exit(1)

    return arm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """One vLLM server on 127.0.0.1, started like ``vllm serve`` with the runtime LoRA routes.

    Args:
        engine: what set_up() made.
        logs: folder for the server's log.
        api_key: passed as --api-key.
        runtime_lora: VLLM_ALLOW_RUNTIME_LORA_UPDATING.
        dev_mode: VLLM_SERVER_DEV_MODE, for ``pause`` and ``resume``.
        max_model_len: passed as --max-model-len (at most the model's 4,096 positions).
        max_num_seqs: passed as --max-num-seqs (vLLM's default on a CPU is 128).
        extra: more flags, after the others (``["--runner", "pooling", "--convert", "embed"]``).
        max_loras: passed as --max-loras.
        max_cpu_loras: passed as --max-cpu-loras.
        env: more of the server's environment (bench/peer_bench.py's instrument and LoRA resolver).
    """

    def __init__(
        self,
        engine: Engine,
        logs: Path,
        *,
        api_key: str | None = None,
        runtime_lora: bool = True,
        dev_mode: bool = False,
        max_model_len: int = 2048,
        max_num_seqs: int = 128,
        extra: tuple[str, ...] = (),
        max_loras: int = 2,
        max_cpu_loras: int = 4,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.extra = extra
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        self.env = dict(env or {})
        self.max_num_seqs = max_num_seqs
        self.api_key = api_key
        self.runtime_lora = runtime_lora
        self.dev_mode = dev_mode
        self.max_model_len = max_model_len
        self.port = free_port()
        self.log = logs / f"vllm-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.startup_seconds: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(
            os.environ,
            VLLM_ALLOW_RUNTIME_LORA_UPDATING="True" if self.runtime_lora else "False",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_HOST_IP="127.0.0.1",  # the engine's own sockets stay on loopback
            # With the default "auto" binding, the API server answers /metrics and /pause only once the
            # engine stops generating (10 s for a 2,000-token request on 2 cores): nothing could read
            # a busy engine's queue. Unbound, /metrics answers in about 60 ms while it generates.
            VLLM_CPU_OMP_THREADS_BIND="nobind",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env.update(self.env)
        # `vllm serve` is broken in vllm-cpu 0.32.0 (it looks up a package named "vllm"); the module
        # entry point takes the same flags, with --model instead of a positional argument.
        command = [
            str(self.engine.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.engine.build / "model"),
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-lora",
            "--max-loras",
            str(self.max_loras),
            "--max-cpu-loras",
            str(self.max_cpu_loras),
            "--max-lora-rank",
            "16",
            "--dtype",
            "bfloat16",
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--enforce-eager",
        ]
        if self.api_key:
            command += ["--api-key", self.api_key]
        command += self.extra
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        self.started_at = time.monotonic()

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until /health answers 200; raise with the log's tail if the server dies or never answers."""
        assert self._process is not None
        deadline = self.started_at + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self._process.returncode}) while starting:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.startup_seconds.append(time.monotonic() - self.started_at)
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM did not answer /health within {timeout:.0f} s:\n{self.tail()}")
            # The engine takes tens of seconds to come up; ask twice a second.
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        except ProcessLookupError:
            pass

    def restart(self) -> None:
        self.stop()
        self.start()
        self.wait_ready()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def pause(self) -> None:
        """Freeze the engine where it is: requests in flight stay unfinished, and so do vLLM's figures of
        them (``/pause?mode=keep``, dev mode). Loads, unloads, listings and ``/metrics`` still answer."""
        assert self.dev_mode, "pause needs a server started with dev_mode"
        with self.client() as client:
            answer = client.post("/pause", params={"mode": "keep"}, timeout=300)
        assert answer.status_code == 200, answer.text

    def resume(self) -> None:
        """Let a paused engine go on (answered 200 when it was not paused too)."""
        assert self.dev_mode, "resume needs a server started with dev_mode"
        with self.client() as client:
            answer = client.post("/resume", timeout=300)
        assert answer.status_code == 200, answer.text

    def unload_everything(self) -> None:
        """Forget every runtime-loaded adapter, so that each test starts from a bare engine."""
        with self.client() as client:
            for card in client.get("/v1/models").json()["data"]:
                if card.get("parent"):
                    client.post("/v1/unload_lora_adapter", json={"lora_name": card["id"]})
