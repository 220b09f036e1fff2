"""Smoke test of ``pip install 'lorafleet[standin]'``: a stand-in serves, and answers ``GET /v1/models``
as vLLM does, read here with the standard library alone.

Run by packaging/check.py in a fresh venv.
"""

from __future__ import annotations

import json
import urllib.request

from lorafleet_standin import StandInServer, VllmStandIn


def main() -> None:
    app = VllmStandIn(model="tiny")
    app.register("sql", "/adapters/sql")
    with (
        StandInServer(app) as server,
        urllib.request.urlopen(f"{server.url}/v1/models", timeout=30) as answer,
    ):
        assert answer.status == 200, answer.status
        listing = json.load(answer)
    ids = sorted(model["id"] for model in listing["data"])
    assert ids == ["sql", "tiny"], listing
    print(f"standin: GET {server.url}/v1/models named {ids}")


if __name__ == "__main__":
    main()
