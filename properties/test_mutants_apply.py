"""Every mutant of properties/mutants.py still plants its bug: its snippet occurs exactly once in the core.

A change to the core that rewrites a snippet would otherwise stop mutants.py at its first mutant, and
only a run of mutants.py (minutes, not part of CI) would say so.
"""

from __future__ import annotations

import pytest

from mutants import CORE, MUTANTS, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_finds_its_snippet_once(mutant: Mutant) -> None:
    assert (CORE / mutant.file).read_text().count(mutant.old) == 1


def test_each_mutant_has_a_name_of_its_own() -> None:
    """``--only NAME`` runs one mutant: a name given twice would run both and count one twice."""
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
