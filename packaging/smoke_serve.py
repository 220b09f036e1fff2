"""Smoke test of ``pip install 'lorafleet[serve]'``: the ``lorafleet serve`` command, run as a user runs
it, routes a completion to a stand-in (started in this script; the serve extra carries what it needs),
loading the adapter first, then stops on SIGINT.

Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from lorafleet_standin import StandInServer, VllmStandIn


def main() -> None:
    command = Path(sys.executable).parent / "lorafleet"
    with tempfile.TemporaryDirectory() as tmp, StandInServer(VllmStandIn(model="tiny")) as server:
        adapter = Path(tmp) / "adapters" / "sql"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text('{"r": 8}')
        (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        log = Path(tmp) / "serve.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [
                    *(str(command), "serve", "--replica", f"id=r0,url={server.url},model=tiny,limit=2"),
                    *("--adapters-root", str(adapter.parent), "--port", "0"),
                ],
                stderr=out,
            )
        try:
            deadline = time.monotonic() + 60
            while "ready on " not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            url = log.read_text().split("ready on ")[1].split()[0]
            body = json.dumps({"model": "sql", "prompt": "hello", "max_tokens": 3}).encode()
            request = urllib.request.Request(
                f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200, answer.status
                how = answer.headers["x-lorafleet-how"]
                served = json.load(answer)["model"]
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        loads = [call.body["lora_name"] for call in server.app.calls_to("load")]
        # Without lorafleet[otel], asking for traces says what to install, and nothing starts.
        replica = f"id=r0,url={server.url},model=tiny,limit=2"
        flags = ["--replica", replica, "--adapters-root", str(adapter.parent)]
        asked = subprocess.run(
            [str(command), "serve", *flags, "--tracing"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert asked.returncode == 2, (asked.returncode, asked.stderr)
    assert "pip install 'lorafleet[otel]'" in asked.stderr, asked.stderr
    assert (how, served, loads) == ("loaded", "sql", ["sql"]), (how, served, loads)
    print(
        f"serve: lorafleet serve routed a completion for 'sql' to a stand-in ({how}), then stopped on SIGINT"
    )


if __name__ == "__main__":
    main()
