"""Which adapters the router serves: names to folders, from a table and/or a directory root."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ._config import ADAPTER_NAME, Config

CONFIG_FILE = "adapter_config.json"

Fingerprint = tuple[tuple[str, int, int], ...] | None
"""A folder's files as (name, size, modification time in ns), sorted; None when it cannot be read."""


def fingerprint(folder: str) -> Fingerprint:
    """What ``folder`` holds, as cheaply as it can be told apart: one ``stat`` per file, no reading.

    Sizes and times rather than a hash of the weights, which may be gigabytes: a copy, a training
    run or a fix writes files anew. A copy that keeps both size and time (``rsync -t`` of weights
    of the same shape) goes unseen; ``lorafleet serve``'s SIGHUP forgets every refusal for that case.
    """
    try:
        with os.scandir(folder) as entries:
            return tuple(
                sorted(
                    (e.name, st.st_size, st.st_mtime_ns) for e in entries if e.is_file() for st in (e.stat(),)
                )
            )
    except OSError:
        return None


class Catalog:
    """The adapters a router can serve, by name: what the fleet's resolver and ``/v1/models`` read.

    A name in the table is served from its folder. Under a root, a name is served when it is one path
    component (no ``/``, no dot first) and the root has a folder of that name holding an
    ``adapter_config.json``, looked up at each request: adapters added to the root are served at once,
    and a name that reaches outside the root never resolves.
    """

    def __init__(self, config: Config) -> None:
        self._paths = {name: os.path.abspath(path) for name, path in config.adapter_paths.items()}
        self._models = dict(config.adapter_models)
        # Absolute: a replica resolves a relative path against its own working directory.
        self._root = config.adapter_root.absolute() if config.adapter_root is not None else None
        self._found: dict[str, str] = {}
        """Names whose folder was there: a warm request looks no further (a folder removed since
        fails at its next load, as the adapter's fault)."""
        self._route_model = config.adapter_model
        self._default_model: str | None = None
        self.bases: frozenset[str] = frozenset()
        self.set_models(config.model_names())

    def set_models(self, models: list[str]) -> None:
        """The base models the replicas serve (they change with the replicas)."""
        default = self._route_model
        if default is None and len(models) == 1:
            default = models[0]  # one base model: every adapter is its
        self._default_model = default
        self.bases = frozenset(models)

    def path(self, name: str) -> str | None:
        """The folder of adapter ``name``, or None when this router does not serve it."""
        path = self._paths.get(name) or self._found.get(name)
        if path is not None:
            return path
        root = self._root
        if root is None or not ADAPTER_NAME.fullmatch(name):
            return None
        folder = root / name
        if not (folder / CONFIG_FILE).is_file():
            return None
        path = self._found[name] = str(folder)
        return path

    def table_names(self) -> list[str]:
        """The adapters the table names (``adapters.paths``), sorted; not the root's."""
        return sorted(self._paths)

    def paths(self, *groups: Iterable[str]) -> dict[str, str]:
        """The folders of the names in ``groups`` that this router serves, by name."""
        return {name: path for group in groups for name in group if (path := self.path(name)) is not None}

    def model(self, name: str) -> str | None:
        """The base model a request for adapter ``name`` must go to (None: any replica's)."""
        return self._models.get(name, self._route_model)

    def parent(self, name: str) -> str | None:
        """The base model ``/v1/models`` names as the adapter's parent, when it is known."""
        return self._models.get(name, self._default_model)

    def names(self) -> list[str]:
        """Every adapter served now, sorted: the table's, and the root's folders that resolve."""
        names = set(self._paths)
        root = self._root
        if root is not None:
            try:
                entries = list(root.iterdir())
            except OSError:
                entries = []
            names.update(
                e.name for e in entries if ADAPTER_NAME.fullmatch(e.name) and (e / CONFIG_FILE).is_file()
            )
        return sorted(names - self.bases)

    @property
    def root(self) -> Path | None:
        return self._root


def folder_problem(folder: Path) -> str | None:
    """What keeps ``folder`` from being a LoRA adapter an engine can load, with the fix; None if nothing
    this router can see. vLLM reads ``adapter_config.json`` first and wants a rank (``r``) in it."""
    if not folder.is_dir():
        return f"{str(folder)!r} is not a folder here: fix the path (or mount it where the router runs)"
    config = folder / CONFIG_FILE
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{str(folder)!r} has no {CONFIG_FILE}: it is no adapter; save it with PEFT's save_pretrained"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{str(config)!r} cannot be read ({exc.__class__.__name__}): give the router read access"
    except json.JSONDecodeError as exc:
        return f"{str(config)!r} is not JSON ({exc.msg}, line {exc.lineno}): write it again"
    rank = data.get("r") if isinstance(data, dict) else None
    if type(rank) is not int or rank < 1:
        return f'{str(config)!r} gives no rank ("r": a whole number of at least 1): write it again'
    return None


def adapter_problems(config: Config) -> list[str]:
    """One line per adapter folder an engine would refuse as far as this router can tell, naming the
    folder and the fix: the table's folders, and the root's subfolders (one that is no adapter is
    never served, and would otherwise be left out without a word)."""
    lines: list[str] = []
    for name, path in sorted(config.adapter_paths.items()):
        problem = folder_problem(Path(path))
        if problem is not None:
            lines.append(f"adapter {name!r}: {problem}")
    root = config.adapter_root
    if root is not None:
        try:
            entries = sorted(e for e in root.iterdir() if e.is_dir() and not e.name.startswith("."))
        except OSError as exc:
            return [*lines, f"adapters.root {str(root)!r} cannot be listed ({exc.__class__.__name__})"]
        for entry in entries:
            problem = folder_problem(entry)
            if problem is not None:
                lines.append(f"adapters.root: {problem}")
    return lines
