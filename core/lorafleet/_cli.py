"""The ``lorafleet`` command: a dispatcher that needs nothing but the standard library.

Each subcommand lives in a package that may need an extra; it is imported only when that subcommand
runs, so ``lorafleet --help`` works on a core-only install and a missing extra is named, not traced.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence

import attrs


@attrs.frozen
class Subcommand:
    """One ``lorafleet NAME ...``: where its code lives and what to install when that cannot be imported.

    ``module`` has a ``main(argv: list[str]) -> int`` that parses the rest of the command line itself.
    ``needs`` says what a missing import means and ``install`` how to get it (None: nothing to install
    but the module itself, which then names what is missing).
    """

    name: str
    summary: str
    module: str
    needs: str | None = None
    install: str | None = None


SUBCOMMANDS = (
    Subcommand(
        name="demo",
        summary="lorafleet's router against a least-loaded one, on stand-in vLLM replicas",
        module="lorafleet_standin._demo",
        needs="the stand-in and the reference router",
        install="pip install 'lorafleet[standin,serve,trio]'",
    ),
    Subcommand(
        name="simulate",
        summary="replay a workload in virtual time against the real machine and simulated replicas",
        module="lorafleet_sim",
    ),
    Subcommand(
        name="serve",
        summary="an OpenAI-compatible router in front of vLLM replicas, built on a fleet",
        module="lorafleet_serve._main",
        needs="the reference router's server and a shell",
        install="pip install 'lorafleet[serve]'",
    ),
)

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
        sys.stderr.write(
            f"{USAGE}\nlorafleet: error: unknown command {args[0]!r} (choose from {', '.join(by_name)})\n"
        )
        return 2
    run = _load(command)
    if run is None:
        return 2
    return run(args[1:])


def _load(command: Subcommand) -> Callable[[list[str]], int] | None:
    """The subcommand's ``main``, or None after saying what to install when its import failed."""
    try:
        module = importlib.import_module(command.module)
    except ModuleNotFoundError as exc:
        missing = _not_installed(exc)
        if missing is None:
            raise  # a module of an installed package is missing: a bug, which deserves its traceback
        sys.stderr.write(_missing_message(command, missing) + "\n")
        return None
    run: Callable[[list[str]], int] = module.main
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
    if missing == command.module.partition(".")[0]:
        return f"lorafleet {command.name} is not installed: this lorafleet has no {missing} package"
    if command.needs is None or command.install is None:
        return f"lorafleet {command.name} needs {missing}, which is not installed"
    return f"lorafleet {command.name} needs {command.needs} ({missing} is not installed): {command.install}"
