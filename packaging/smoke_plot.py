"""Smoke test of ``pip install 'lorafleet[plot]'``: ``lorafleet simulate --plot``, run as a user runs it,
sweeps the limit over a short stream and writes a PNG.

Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    command = Path(sys.executable).parent / "lorafleet"
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "plot.png"
        # A short stream over few adapters keeps the sweep to limits 1 to 4: seconds, not minutes.
        done = subprocess.run(
            [
                *(str(command), "simulate", "--requests", "400", "--adapters", "4", "--limit", "2"),
                *("--policy", "lorafleet", "--plot", str(png)),
            ],
            capture_output=True,
            text=True,
            timeout=100,
            check=False,
        )
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        head = png.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n", head
        print(f"plot: lorafleet simulate --plot wrote a PNG of {png.stat().st_size} bytes")


if __name__ == "__main__":
    main()
