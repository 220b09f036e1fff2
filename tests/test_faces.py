"""lorafleet_trio and lorafleet_asyncio export exactly lorafleet_fleet's names, the very same objects.

A name added to lorafleet_fleet fails here until both faces export it too (or it is listed below, with
why, as an intended difference).
"""

from __future__ import annotations

import types

import pytest

import lorafleet_asyncio
import lorafleet_fleet
import lorafleet_trio

INTENDED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # face: (names only the fleet has, names only the face has), each difference with its reason.
    "lorafleet_trio": (frozenset(), frozenset()),
    "lorafleet_asyncio": (frozenset(), frozenset()),
}


def public(module: types.ModuleType) -> set[str]:
    """The names a module defines or re-exports for its users: no private names, no submodules."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


@pytest.mark.parametrize(
    "module", [lorafleet_fleet, lorafleet_trio, lorafleet_asyncio], ids=lambda m: m.__name__
)
def test_all_lists_every_public_name_once(module: types.ModuleType) -> None:
    assert len(module.__all__) == len(set(module.__all__))
    assert set(module.__all__) == public(module)


@pytest.mark.parametrize("face", [lorafleet_trio, lorafleet_asyncio], ids=lambda m: m.__name__)
def test_a_face_exports_the_fleets_names_and_objects(face: types.ModuleType) -> None:
    only_fleet, only_face = INTENDED[face.__name__]
    fleet, names = set(lorafleet_fleet.__all__), set(face.__all__)
    assert fleet - names == only_fleet, "missing from the face"
    assert names - fleet == only_face, "not in lorafleet_fleet"
    for name in fleet & names:
        assert getattr(face, name) is getattr(lorafleet_fleet, name), name
