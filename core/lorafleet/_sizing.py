"""How many adapters the machine may put on one engine, and so what limit fits an engine's memory.

The one sizing rule that ``lorafleet serve --check``, the simulator and the docs share: an engine keeps
``--max-cpu-loras`` adapters in memory, and a router's machines must never make it hold more
(SPEC.md §3.14, the bound).
"""

from __future__ import annotations

import math


def most_held(limit: int, headroom: int | None, routers: int = 1) -> int:
    """The most adapters machines of ``limit`` and ``headroom`` can put on one engine (SPEC §3.14).

    One router holds a replica to its limit, and goes ``headroom`` over it only while every adapter
    it holds is in use. ``routers`` routers that read their listings at different moments each fill
    their share of the free slots they saw, and each may go its headroom over. A headroom of None
    (no cap) bounds nothing while every adapter is in use; it is counted as 0 here.
    """
    over = headroom or 0
    if routers == 1:
        return limit + over
    return limit + (routers - 1) * math.ceil(limit / routers) + routers * over


def limit_for(memory: int, headroom: int | None, routers: int = 1) -> int:
    """The largest limit whose machines hold at most ``memory`` adapters on one engine.

    Raises:
        ValueError: no limit of at least 1 fits (the headroom alone fills the memory).
    """
    limit = memory
    while limit >= 1 and most_held(limit, headroom, routers) > memory:
        limit -= 1
    if limit < 1:
        raise ValueError(
            f"no limit fits an engine of {memory} adapters with headroom {headroom} and {routers} "
            f"router(s): even limit 1 puts {most_held(1, headroom, routers)} on it"
        )
    return limit


def engine_refusal(max_cpu_loras: int, max_loras: int) -> str | None:
    """Why vLLM would not start an engine with ``--max-cpu-loras`` and ``--max-loras`` so, or None.

    vLLM keeps every adapter a batch uses among those it holds, so it refuses a memory smaller than a
    batch ("max_cpu_loras must be >= max_loras"); left out, ``--max-cpu-loras`` is ``--max-loras``.
    """
    if max_cpu_loras < max_loras:
        return (
            f"--max-cpu-loras {max_cpu_loras} is below --max-loras {max_loras}: vLLM does not start so "
            "(max_cpu_loras must be >= max_loras)"
        )
    return None
