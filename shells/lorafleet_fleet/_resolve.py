"""Adapters by name: where the fleet finds the path of the adapter a request names.

A router's requests carry adapter names only; the fleet turns a name into the path it sends in a load,
and a name the source does not know is the adapter's fault, answered without a call to any replica.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from ._types import _invalid

AdapterSource = Mapping[str, str] | str | os.PathLike[str] | Callable[[str], str | None]
"""Where adapters are: a name-to-path mapping, a folder holding one folder per adapter, or a callable.

- A ``Mapping[str, str]``: read at each request, so a dict the router changes is seen at once.
- A folder (``str`` or ``os.PathLike``): adapter ``name`` is the folder ``root/name``, for names that are
  one path component (no separator, not ``.`` or ``..``) whose folder exists.
- A callable: ``name -> path``, or None for a name it does not know.
"""

Resolver = Callable[[str], "str | None"]


def resolver(source: AdapterSource) -> tuple[Mapping[str, str], Resolver | None, str]:
    """How to resolve a name with ``source``: a mapping to look in first, a function for names it lacks.

    Returns the mapping, the function (None: the mapping is all), and how to say that a name is not
    among the adapters. A warm request's name is found in the mapping, by one dict lookup.

    Raises:
        InvalidValueError: ``source`` is none of the three kinds, a mapping holds a name or path that
            is not a non-empty str, or a folder does not exist.
    """
    if isinstance(source, Mapping):
        for name, path in source.items():
            if type(name) is not str or not name or type(path) is not str or not path:
                raise _invalid("adapters", {name: path}, "adapter names and paths must be non-empty strs")
        return source, None, "it is not among the fleet's adapters"
    if isinstance(source, str | os.PathLike):
        folder = _Folder(source)
        return folder.found, folder.resolve, f"there is no adapter folder of that name in {folder.root}"
    if callable(source):
        return {}, _checked(source), "the fleet's adapter source does not know it"
    raise _invalid(
        "adapters", source, "adapters must be a mapping of names to paths, a folder, or a callable"
    )


def _checked(resolve: Callable[[str], object]) -> Resolver:
    """``resolve``, with its answer checked: a path must be a non-empty str (None: not known)."""

    def checked(name: str) -> str | None:
        path = resolve(name)
        if path is None or (type(path) is str and path):
            return path
        raise _invalid("adapters", path, f"the adapter source must give a non-empty str or None for {name!r}")

    return checked


class _Folder:
    """A folder with one folder per adapter, named as the adapter."""

    __slots__ = ("found", "root")

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = os.fspath(root)
        if not isinstance(path, str) or not os.path.isdir(path):
            raise _invalid("adapters", root, "an adapter folder must be an existing directory")
        # Absolute: a replica resolves a relative path against its own working directory.
        self.root = os.path.abspath(path)
        self.found: dict[str, str] = {}
        """Names whose folder was there: a warm request looks no further (an adapter whose folder
        went away fails at its next load, as the adapter's fault)."""

    def resolve(self, name: str) -> str | None:
        """The folder of adapter ``name``, if ``name`` is one path component and its folder exists."""
        if not _one_component(name):
            return None
        path = os.path.join(self.root, name)
        if not os.path.isdir(path):
            return None  # not remembered: the folder may be added later
        self.found[name] = path
        return path


def _one_component(name: str) -> bool:
    """Whether ``name`` names an entry of a folder, and nothing above or below it."""
    if not name or name in (".", "..") or "\0" in name or os.sep in name:
        return False
    return os.altsep is None or os.altsep not in name
