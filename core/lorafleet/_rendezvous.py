"""Rendezvous weights ([place]): which replica of a tie a cold load goes to.

The weight of a replica for an adapter is SplitMix64's output from the state ``fnv(adapter) XOR
fnv(replica)``, each name hashed with 64-bit FNV-1a over its UTF-8 bytes (SPEC §3.12). Any language
computes the same number from the names alone, so independent routers break ties alike. The final
mixing is what spreads the ties: FNV-1a alone keeps ids that differ only in their last bytes within a
64th of its range for every adapter, so a few of them came first for most adapters (bench/NOTES.md).
Each name is hashed once; weighing a replica is then one mix, with no pass over its bytes.
"""

from __future__ import annotations

import functools

_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF
GAMMA = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB


def fnv(data: bytes) -> int:
    """FNV-1a (64 bits) of ``data``."""
    h = _OFFSET
    for byte in data:
        h = ((h ^ byte) * _PRIME) & _MASK
    return h


def mix(state: int) -> int:
    """SplitMix64's output from ``state``: add the golden gamma, then its two multiply-xorshift rounds."""
    z = (state + GAMMA) & _MASK
    z = ((z ^ (z >> 30)) * M1) & _MASK
    z = ((z ^ (z >> 27)) * M2) & _MASK
    return z ^ (z >> 31)


@functools.lru_cache(maxsize=1 << 16)  # a fleet's ids, and the adapters placed lately
def name_hash(name: str) -> int:
    """FNV-1a (64 bits) of the UTF-8 bytes of ``name``: a name's half of every weight it takes part in."""
    return fnv(name.encode())


@functools.lru_cache(maxsize=4096)  # a tie among a hot adapter's holders is every request's
def weight(adapter: str, replica: str) -> int:
    """The rendezvous weight of ``replica`` for ``adapter``: ``mix(fnv(adapter) ^ fnv(replica))``."""
    return mix(name_hash(adapter) ^ name_hash(replica))
