"""How many adapters a configuration can put on one engine, against what the engines can hold.

vLLM keeps ``--max-cpu-loras`` adapters ready; past that it evicts on its own and reloads from disk
inside a generation step. Nothing vLLM serves says what ``--max-cpu-loras`` is (``/metrics`` has
``max_lora``, which is ``--max-loras``, the adapters of one batch), so the check is against what the
configuration declares: ``max_cpu_loras`` on a replica, or ``max_loras``, which is vLLM's memory when
it runs without ``--max-cpu-loras``.
"""

from __future__ import annotations

import attrs

from lorafleet import limit_for, most_held
from lorafleet_fleet import HEADROOM

from ._config import Config


@attrs.frozen
class Sizing:
    """What ``--check`` and the start-up log say of it: a line per model, and a line per warning."""

    lines: tuple[str, ...]
    warnings: tuple[str, ...]


def sizing(config: Config) -> Sizing:
    """The most adapters ``config`` can put on an engine of each model, and every engine whose
    declared ``max_cpu_loras`` is below it."""
    headroom = HEADROOM if config.headroom is None else config.headroom
    routers = config.routers
    lines = []
    warnings = []
    for model, entries in config.engines().items():
        limit = entries[0].limit
        most = most_held(limit, headroom, routers)
        how = (
            "limit + headroom"
            if routers == 1
            else "limit + (routers - 1) x ceil(limit / routers) + routers x headroom"
        )
        line = (
            f"model {model!r}: up to {most} adapters on one engine "
            f"({how}, with limit {limit}, headroom {headroom}, routers {routers})"
        )
        declared = [e for e in entries if e.max_cpu_loras is not None]
        if not declared:
            line += (
                "; no engine of it declares max_cpu_loras or max_loras (vLLM does not say its "
                "--max-cpu-loras), so that is not checked"
            )
        lines.append(line)
        for entry in entries:
            if entry.max_loras is not None and most < entry.max_loras:
                warnings.append(
                    f"{entry.where}: max_loras is {entry.max_loras}, but this configuration puts at most "
                    f"{most} adapters on its engine: no batch runs more than {most} distinct adapters, "
                    f"so {entry.max_loras - most} of the engine's LoRA slots stay empty"
                )
        for entry in declared:
            if entry.max_cpu_loras is not None and entry.max_cpu_loras > most:
                fits = _fits(entry.max_cpu_loras, headroom, routers)
                warnings.append(
                    f"{entry.where}: max_cpu_loras is {entry.max_cpu_loras}, but this configuration puts at "
                    f"most {most} adapters on its engine: {entry.max_cpu_loras - most} of its memory stays "
                    f"empty and loads come more often"
                    + (f"; limit {fits} would use it all (or leave limit out)" if fits is not None else "")
                )
            if entry.max_cpu_loras is not None and entry.max_cpu_loras < most:
                warnings.append(
                    f"{entry.where}: max_cpu_loras is {entry.max_cpu_loras}, but this configuration can put "
                    f"{most} adapters on its engine (limit {limit}, fleet.headroom {headroom}, fleet.routers "
                    f"{routers}), and past --max-cpu-loras vLLM reloads adapters inside generation steps: "
                    f"lower the limit or fleet.headroom, or start vLLM with --max-cpu-loras {most}"
                )
    return Sizing(tuple(lines), tuple(warnings))


def _fits(memory: int, headroom: int, routers: int) -> int | None:
    """The limit that fills ``memory``, or None when none does."""
    try:
        return limit_for(memory, headroom, routers)
    except ValueError:
        return None
