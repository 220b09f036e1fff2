"""``dev.py``, the two commands: what it shows of pip's output the first time it installs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pips_warnings_about_absent_find_links_folders_are_dropped_and_the_rest_kept() -> None:
    stderr = (
        "WARNING: Location 'file:///opt/pypi-more/simple/h11/' is ignored: it is neither a file nor a "
        "directory.\n"
        "WARNING: Location 'file:///opt/pypi/simple/priority/' is ignored: it is neither a file nor a "
        "directory.\n"
        "ERROR: Could not find a version that satisfies the requirement nothere\n"
        "WARNING: Location 'file:///x/' is ignored: something else\n"
    )
    assert dev().quiet_pip(stderr) == (
        "ERROR: Could not find a version that satisfies the requirement nothere\n"
        "WARNING: Location 'file:///x/' is ignored: something else\n"
    )
