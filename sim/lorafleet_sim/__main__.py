"""``python -m lorafleet_sim``: the same as ``lorafleet simulate``."""

from ._cli import main

raise SystemExit(main())
