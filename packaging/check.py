"""The packaging check: what ``pip install lorafleet[...]`` gives a user works, for every extra.

Builds the sdist and, from it, the wheel; checks that each carries what it should; then, for the core
alone and for each extra, makes a fresh venv, installs the wheel with that extra and runs a smoke
program there that uses what the extra promises. A dependency an extra forgets fails its smoke program
with an ImportError. Everything happens in a temporary directory, removed afterwards.

``python3 dev.py test`` runs it; by hand: ``.venv/bin/python packaging/check.py [--keep]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import venv
import zipfile
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PIP_QUIET = ["--no-input", "--disable-pip-version-check", "-q"]


@attrs.frozen
class Install:
    """One fresh venv: the wheel with ``extras``, then ``smoke`` (with ``args``) run in it."""

    name: str
    extras: str
    smoke: str
    args: tuple[str, ...] = ()


INSTALLS = (
    Install("core", "", "smoke_core.py"),
    # A shell is tried against a stand-in started in the same script, hence `standin` beside it.
    Install("asyncio", "asyncio,standin", "smoke_shell.py", ("asyncio",)),
    Install("trio", "trio,standin", "smoke_shell.py", ("trio",)),
    Install("standin", "standin", "smoke_standin.py"),
    # Prometheus is an add-on to a shell; nothing else in this install brings prometheus-client.
    Install("prometheus", "asyncio,standin,prometheus", "smoke_prometheus.py"),
    # The router alone: its extra must carry all it runs on (the stand-in it talks to needs no more).
    Install("serve", "serve", "smoke_serve.py"),
    # Its traces: OpenTelemetry's SDK and OTLP exporter, which nothing else brings.
    Install("otel", "serve,otel", "smoke_otel.py"),
    # The simulator needs only the core; its plot needs matplotlib, which nothing else brings.
    Install("plot", "plot", "smoke_plot.py"),
)


class PackagingError(Exception):
    """A step of the check failed; the message says which and why."""


def run(cmd: list[str], *, cwd: Path, timeout: float) -> str:
    """Run ``cmd``; returns its output, or raises PackagingError with that output when it fails."""
    try:
        done = subprocess.run(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise PackagingError(f"{' '.join(cmd)} took more than {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise PackagingError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout}")
    return done.stdout


def build(dist: Path) -> tuple[Path, Path]:
    """Build the sdist, then the wheel from the unpacked sdist (so the sdist must be enough to build)."""
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=ROOT, timeout=300)
    [sdist] = dist.glob("lorafleet-*.tar.gz")
    [wheel] = dist.glob("lorafleet-*.whl")
    return sdist, wheel


def tracked(paths: list[str]) -> set[str]:
    """The files under ``paths`` that a clean clone has (git's list), or what is on disk outside git."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, timeout=60)
        return {name for name in listed.split("\0") if name and (ROOT / name).is_file()}
    found: set[str] = set()
    for path in paths:
        target = ROOT / path
        files = [target] if target.is_file() else [f for f in target.rglob("*") if f.is_file()]
        found.update(
            str(f.relative_to(ROOT)) for f in files if "__pycache__" not in f.parts and f.suffix != ".pyc"
        )
    return found


def check_sdist(sdist: Path, config: dict[str, object]) -> int:
    """Every file of the sdist's include list is in it, and no cache or venv; returns the file count."""
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    include = config["include"]
    assert isinstance(include, list)
    missing = sorted(tracked([str(p) for p in include]) - names)
    for must in ("LICENSE", "README.md", "SPEC.md", "pyproject.toml", "dev.py", "vectors/schema.json"):
        if must not in names:
            missing.append(must)
    if missing:
        raise PackagingError(f"{sdist.name} lacks {len(missing)} files: {', '.join(missing[:20])}")
    junk = sorted(n for n in names if "__pycache__" in n or n.startswith((".venv/", "dist/", ".git/")))
    if junk:
        raise PackagingError(f"{sdist.name} carries what it should not: {', '.join(junk[:20])}")
    if not any(n.startswith("vectors/hand/") and n.endswith(".json") for n in names):
        raise PackagingError(f"{sdist.name} has no conformance vectors")
    return len(names)


def check_wheel(wheel: Path, packages: list[str]) -> int:
    """The wheel holds each package with its py.typed, the licence and the command, and nothing else."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        info = metadata.rpartition("/")[0]
        meta = archive.read(metadata).decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    problems = []
    tops = {Path(p).name for p in packages}
    for top in sorted(tops):
        if f"{top}/py.typed" not in names:
            problems.append(f"no {top}/py.typed")
    strays = sorted({n.partition("/")[0] for n in names} - tops - {info})
    if strays:
        problems.append(f"unexpected top-level entries {strays}")
    if f"{info}/licenses/LICENSE" not in names:
        problems.append("no LICENSE in the .dist-info")
    for line in ("License-Expression: MIT", "Classifier: Typing :: Typed", "Requires-Dist: attrs"):
        if line not in meta:
            problems.append(f"METADATA lacks {line!r}")
    if "lorafleet = lorafleet._cli:main" not in entry_points:
        problems.append(f"the lorafleet command is not lorafleet._cli:main: {entry_points!r}")
    commands = entry_points.partition("[lorafleet.commands]")[2].partition("\n[")[0]
    for name in ("demo", "simulate", "serve"):
        if f"\n{name} = " not in commands:
            problems.append(f"no {name} in the lorafleet.commands entry points: {entry_points!r}")
    if problems:
        raise PackagingError(f"{wheel.name}: {'; '.join(problems)}")
    return len(names)


def smoke(install: Install, wheel: Path, tmp: Path) -> tuple[float, float, str]:
    """Install the wheel with the extras in a fresh venv and run the smoke program there.

    Returns the seconds the install and the smoke program took, and what the program printed.
    """
    home = tmp / f"venv-{install.name}"
    # No pip inside: this venv's pip would cost seconds to make, and the dev venv's pip installs into
    # it (`pip --python`) as well; it also keeps the core venv down to lorafleet and attrs.
    venv.EnvBuilder(with_pip=False, clear=True).create(home)
    python = home / "bin" / "python"
    target = f"{wheel}[{install.extras}]" if install.extras else str(wheel)
    started = time.monotonic()
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *PIP_QUIET, target],
        cwd=tmp,
        timeout=600,
    )
    installed = time.monotonic()
    # -I: neither the checkout, the current directory nor PYTHONPATH can stand in for what pip installed.
    out = run([str(python), "-I", str(HERE / install.smoke), *install.args], cwd=tmp, timeout=120)
    return installed - started, time.monotonic() - installed, out.strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="packaging/check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and say where")
    names = [i.name for i in INSTALLS]
    parser.add_argument("only", nargs="*", help=f"run only these installs, of {', '.join(names)}")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only) - set(names))
    if unknown:
        parser.error(f"no install named {', '.join(unknown)}")
    chosen = [i for i in INSTALLS if not args.only or i.name in args.only]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="lorafleet-packaging-"))
    failed: list[str] = []
    try:
        try:
            sdist, wheel = build(tmp / "dist")
            files = check_sdist(sdist, config["sdist"]), check_wheel(wheel, config["wheel"]["packages"])
        except PackagingError as exc:
            print(f"[packaging] build: FAILED\n{exc}", flush=True)
            return 1
        print(
            f"[packaging] built {sdist.name} ({files[0]} files) and {wheel.name} ({files[1]} files) "
            f"in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        for install in chosen:
            label = f"lorafleet[{install.extras}]" if install.extras else "lorafleet"
            try:
                took_install, took_smoke, said = smoke(install, wheel, tmp)
            except PackagingError as exc:
                print(f"[packaging] {install.name}: {label}: FAILED\n{exc}", flush=True)
                failed.append(install.name)
                continue
            print(
                f"[packaging] {install.name}: {label} installed in {took_install:.1f} s, "
                f"smoke ok in {took_smoke:.1f} s\n    " + said.replace("\n", "\n    "),
                flush=True,
            )
    finally:
        if args.keep:
            print(f"[packaging] kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - started
    if failed:
        print(f"[packaging] failed: {', '.join(failed)} ({elapsed:.1f} s)")
        return 1
    print(f"[packaging] the sdist, the wheel and {len(chosen)} installs checked in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
