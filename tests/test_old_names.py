"""The machine's old names still answer, each with a DeprecationWarning that names the new one.

The Fleet's are tests/test_shells.py's; the vector format's old query names, tests/test_vectors.py's.
"""

from __future__ import annotations

import pytest

from scenario import Scenario


def test_reported_is_the_deprecated_name_of_named() -> None:
    s = Scenario.reading(("r", 1))
    s.list_and_read(30.0, "r", (), ["x"])  # another router's adapter runs there ([reading])
    with pytest.warns(DeprecationWarning, match=r"named\(\)"):
        assert s.machine.reported("r") == s.machine.named("r") == {"x"}
    with pytest.warns(DeprecationWarning, match=r"named\(\)"):
        assert s.machine.reported("unknown") == frozenset()
