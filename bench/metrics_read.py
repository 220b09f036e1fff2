"""How long a real vLLM takes to answer the reads a fleet makes of it: ``/metrics`` (the running gauge,
read after each listing and before a cold load that would evict, SPEC §3.13) and ``/v1/models``.

    .venv/bin/python bench/metrics_read.py [--reads N] [--out FILE]

Starts one real vLLM (CPU build, engine/setup.sh, as the real-engine tests do) on 127.0.0.1, loads two
adapters, and times ``--reads`` GETs of each route, one at a time: once with the engine idle, and once
while two streamed completions run on it (the case the read before evicting is for). The simulator's
``--read-latency`` takes these figures (sim/results.md).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from real_vllm import MODEL, VllmServer, set_up  # noqa: E402


def timed(client: httpx.Client, path: str, reads: int) -> list[float]:
    """Milliseconds each of ``reads`` GETs of ``path`` took, one after another."""
    took = []
    for _ in range(reads):
        started = time.perf_counter()
        answer = client.get(path)
        answer.raise_for_status()
        took.append(1000 * (time.perf_counter() - started))
    return took


def summary(took: list[float]) -> str:
    ordered = sorted(took)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):.2f} | {statistics.fmean(ordered):.2f} | {p99:.2f}"


def stream(client: httpx.Client, adapter: str, stop: threading.Event) -> None:
    """Keep a streamed completion running on ``adapter`` until ``stop`` is set."""
    body = {"model": adapter, "prompt": "count", "max_tokens": 2000, "stream": True}
    while not stop.is_set():
        with client.stream("POST", "/v1/completions", json=body, timeout=300) as answer:
            for _ in answer.iter_lines():
                if stop.is_set():
                    break


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/metrics_read.py", description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=100, help="GETs per route and case (default 100)")
    parser.add_argument("--out", type=Path, default=HERE / "metrics_results.md")
    args = parser.parse_args(argv)
    engine = set_up()
    rows = []
    with tempfile.TemporaryDirectory() as logs:
        server = VllmServer(engine, Path(logs))
        server.start()
        try:
            server.wait_ready()
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for name in ("lora-0", "lora-1"):
                    client.post(
                        "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": engine.adapter(name)}
                    ).raise_for_status()
                for path in ("/metrics", "/v1/models"):
                    rows.append((path, "idle", summary(timed(client, path, args.reads))))
                stop = threading.Event()
                streams = [
                    threading.Thread(target=stream, args=(httpx.Client(base_url=server.url), name, stop))
                    for name in ("lora-0", "lora-1")
                ]
                for thread in streams:
                    thread.start()
                # The streams are running once the gauge names both adapters.
                deadline = time.monotonic() + 120
                while 'running_lora_adapters="lora-0,lora-1"' not in client.get("/metrics").text:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the streams never showed in the gauge")
                for path in ("/metrics", "/v1/models"):
                    rows.append((path, "two streams running", summary(timed(client, path, args.reads))))
                size = len(client.get("/metrics").content)
                stop.set()
                for thread in streams:
                    thread.join()
        finally:
            server.stop()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# What a real vLLM takes to answer a fleet's reads",
        "",
        f"Written by `python bench/metrics_read.py` on {now}: {platform.machine()}, Python "
        f"{platform.python_version()}, vLLM CPU build (engine/setup.sh), model `{MODEL}`, 127.0.0.1; "
        f"{args.reads} GETs one at a time per row. `/metrics` answered {size:,} bytes.",
        "",
        "| route | engine | p50 ms | mean ms | p99 ms |",
        "|---|---|---:|---:|---:|",
        *(f"| `{path}` | {case} | {figures} |" for path, case, figures in rows),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
