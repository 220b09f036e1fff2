"""Run a vLLM stand-in by hand: ``python -m lorafleet_standin --version 0.32 --port 8011``."""

from __future__ import annotations

import argparse
import contextlib
import threading

from ._app import VllmStandIn
from ._server import StandInServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lorafleet_standin", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--model", default="tiny", help="served base model name (default tiny)")
    parser.add_argument("--version", default="0.32", help="vLLM release line to answer as (default 0.32)")
    parser.add_argument("--api-key", default=None, help="like vLLM's --api-key")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="like vLLM's --max-lora-rank")
    parser.add_argument(
        "--no-runtime-lora", action="store_true", help="as if VLLM_ALLOW_RUNTIME_LORA_UPDATING were off"
    )
    parser.add_argument("--max-loras", type=int, default=1, help="like vLLM's --max-loras")
    parser.add_argument(
        "--max-cpu-loras",
        type=int,
        default=None,
        help="like vLLM's --max-cpu-loras: adapters kept in memory, least recently used dropped first "
        "(default: no bound)",
    )
    parser.add_argument("--no-lora", action="store_true", help="as if started without --enable-lora")
    parser.add_argument(
        "--max-num-seqs", type=int, default=128, help="like vLLM's --max-num-seqs (default 128, a CPU's)"
    )
    args = parser.parse_args()
    app = VllmStandIn(
        model=args.model,
        version=args.version,
        api_key=args.api_key,
        runtime_lora=not args.no_runtime_lora,
        enable_lora=not args.no_lora,
        max_lora_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_num_seqs=args.max_num_seqs,
    )
    with StandInServer(app, port=args.port) as server:
        print(
            f"vLLM {args.version} stand-in serving {args.model!r} on {server.url} (Ctrl-C stops it)",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
