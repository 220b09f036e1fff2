"""The project's two commands, needing nothing but Python 3.11+ on a fresh clone.

    python3 dev.py demo     the main job: a router on lorafleet against stand-in vLLM replicas
                            (flags after it go to `lorafleet demo`; see --help)
    python3 dev.py test     every check CI runs: ruff, ruff format, mypy --strict, packaging, pytest
                            (packaging: build the sdist and the wheel, install the wheel into a fresh
                            venv per extra and smoke-test each; see packaging/check.py)

Both make ``.venv`` (or ``$LORAFLEET_VENV``) and install the project into it, editable, with the
extras they need; a second run reinstalls only when pyproject.toml changed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("LORAFLEET_VENV", ROOT / ".venv"))
BIN = VENV / "bin"
PYTHON = BIN / "python"
EXTRAS = "dev"


def ensure_venv() -> None:
    """Make the venv and install the project, unless pyproject.toml is unchanged since last time."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py is what runs on an unknown Python
        sys.exit(f"lorafleet needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + EXTRAS.encode()).hexdigest()
    stamp = VENV / ".lorafleet-installed"
    if stamp.exists() and stamp.read_text() == want and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"[dev] creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("[dev] installing lorafleet (editable) with its dev tools", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"]
    done = subprocess.run([*pip, "-e", f"{ROOT}[{EXTRAS}]"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(quiet_pip(done.stderr))
    if done.returncode != 0:
        sys.exit(f"[dev] pip install failed ({done.returncode})")
    stamp.write_text(want)


def quiet_pip(stderr: str) -> str:
    """pip's stderr without its warning for every package about find-links folders that are not there
    (this kind of machine's pip configuration names some): forty lines that say nothing."""
    return "".join(
        line
        for line in stderr.splitlines(keepends=True)
        if not (
            line.startswith("WARNING: Location '")
            and "is ignored: it is neither a file nor a directory" in line
        )
    )


def run_checks() -> int:
    """Run every check, all of them even when one fails, and say which failed."""
    env = dict(os.environ, HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    checks = [
        ("ruff check", [str(PYTHON), "-m", "ruff", "check", "."]),
        ("ruff format", [str(PYTHON), "-m", "ruff", "format", "--check", "."]),
        ("mypy --strict", [str(PYTHON), "-m", "mypy"]),
        ("packaging", [str(PYTHON), str(ROOT / "packaging" / "check.py")]),
        ("pytest", [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider"]),
    ]
    failed = []
    for name, cmd in checks:
        print(f"[dev] {name}", flush=True)
        started = time.monotonic()
        code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        print(
            f"[dev] {name}: {'ok' if code == 0 else f'FAILED ({code})'} in {time.monotonic() - started:.1f} s"
        )
        if code != 0:
            failed.append(name)
    if failed:
        print(f"[dev] failed: {', '.join(failed)}")
        return 1
    print("[dev] all checks passed")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in ("demo", "test"):
        print(__doc__, file=sys.stderr)
        return 2
    ensure_venv()
    if argv[0] == "test":
        return run_checks()
    return subprocess.run([str(BIN / "lorafleet"), "demo", *argv[1:]], cwd=ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
