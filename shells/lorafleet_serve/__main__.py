"""``python -m lorafleet_serve``: the same as ``lorafleet serve``."""

import sys

from ._main import main

raise SystemExit(main(sys.argv[1:]))
