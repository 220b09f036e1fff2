"""The ``lorafleet`` command: a dispatcher that needs nothing but the standard library.

Each subcommand is an entry point of the ``lorafleet.commands`` group (pyproject.toml registers
lorafleet's own; another distribution may add more), found through ``importlib.metadata``: the core
names no module upstairs. A subcommand's code may need an extra; it is imported only when that
subcommand runs, so ``lorafleet --help`` works on a core-only install and a missing extra is named,
not traced.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

import attrs

GROUP = "lorafleet.commands"
"""The entry-point group of the subcommands: ``name = "package.module:main"``."""


@attrs.frozen
class Subcommand:
    """One ``lorafleet NAME ...``: where its code lives and what to install when that cannot be imported.

    ``module`` is its entry point's object reference, ``package.module:main`` (``main`` when it names a
    module alone): a ``main(argv: list[str]) -> int`` that parses the rest of the command line itself.
    ``needs`` says what a missing import means and ``install`` how to get it (None: nothing to install
    but the module itself, which then names what is missing).
    """

    name: str
    summary: str
    module: str
    needs: str | None = None
    install: str | None = None


@attrs.frozen
class About:
    """What the help says of one of lorafleet's own subcommands, and what its extras are."""

    summary: str
    needs: str | None = None
    install: str | None = None


ABOUT = {
    "demo": About(
        summary="lorafleet's router against holders-first and least-loaded ones, on stand-in vLLM replicas",
        needs="the stand-in and the reference router",
        install="pip install 'lorafleet[standin,serve,trio]'",
    ),
    "simulate": About(
        summary="replay a workload in virtual time against the real machine and simulated replicas",
    ),
    "serve": About(
        summary="an OpenAI-compatible router in front of vLLM replicas, built on a fleet",
        needs="the reference router's server and a shell",
        install="pip install 'lorafleet[serve]'",
    ),
}
"""lorafleet's own subcommands, in the order the help lists them; their code is found as any other's."""


def discover() -> tuple[Subcommand, ...]:
    """Every subcommand the installed distributions register: lorafleet's own first, then the rest by
    name (a name registered twice is the first registration's)."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=GROUP):
        found.setdefault(entry.name, entry)
    order = [name for name in ABOUT if name in found] + sorted(found.keys() - ABOUT.keys())
    commands = []
    for name in order:
        about = ABOUT.get(name) or About(summary=f"from {_distribution(found[name])}")
        commands.append(Subcommand(name, about.summary, found[name].value, about.needs, about.install))
    return tuple(commands)


def _distribution(entry: EntryPoint) -> str:
    dist = entry.dist
    return "another package" if dist is None else str(dist.name)


SUBCOMMANDS = discover()

USAGE = "usage: lorafleet [-h] [--version] COMMAND [ARGS ...]"


def help_text() -> str:
    """What ``lorafleet --help`` prints: every subcommand, one line each."""
    width = max(len(s.name) for s in SUBCOMMANDS)
    lines = [
        USAGE,
        "",
        "Which vLLM replica holds which LoRA adapter.",
        "",
        "commands:",
        *(f"  {s.name:<{width}}  {s.summary}" for s in SUBCOMMANDS),
        "",
        "options:",
        "  -h, --help  show this message and exit",
        "  --version   show lorafleet's version and exit",
        "",
        "Run 'lorafleet COMMAND --help' for a command's own options.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lorafleet``: dispatch to a subcommand, or print the help.

    Args:
        argv: the arguments after the program name (``sys.argv[1:]`` when None).

    Returns:
        The exit status: the subcommand's, 0 after ``--help``, 2 for a usage error or a missing extra.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(help_text())
        return 0
    if args and args[0] == "--version":
        from lorafleet import __version__

        sys.stdout.write(f"lorafleet {__version__}\n")
        return 0
    if not args:
        sys.stderr.write(help_text())
        return 2
    by_name = {s.name: s for s in SUBCOMMANDS}
    command = by_name.get(args[0])
    if command is None:
        choose = f"choose from {', '.join(by_name)}" if by_name else f"no {GROUP} entry points: reinstall"
        sys.stderr.write(f"{USAGE}\nlorafleet: error: unknown command {args[0]!r} ({choose})\n")
        return 2
    run = _load(command)
    if run is None:
        return 2
    return run(args[1:])


def _load(command: Subcommand) -> Callable[[list[str]], int] | None:
    """The subcommand's ``main``, or None after saying what to install when its import failed."""
    reference = command.module if ":" in command.module else f"{command.module}:main"
    try:
        run: Callable[[list[str]], int] = EntryPoint(command.name, reference, GROUP).load()
    except ModuleNotFoundError as exc:
        missing = _not_installed(exc)
        if missing is None:
            raise  # a module of an installed package is missing: a bug, which deserves its traceback
        sys.stderr.write(_missing_message(command, missing) + "\n")
        return None
    return run


def _not_installed(exc: ModuleNotFoundError) -> str | None:
    """The top-level package whose absence ``exc`` reports, or None if that package is installed."""
    if not exc.name:
        return None
    top = exc.name.partition(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    return top if found is None else None


def _missing_message(command: Subcommand, missing: str) -> str:
    if missing == command.module.partition(":")[0].partition(".")[0]:
        return f"lorafleet {command.name} is not installed: this lorafleet has no {missing} package"
    if command.needs is None or command.install is None:
        return f"lorafleet {command.name} needs {missing}, which is not installed"
    return f"lorafleet {command.name} needs {command.needs} ({missing} is not installed): {command.install}"
