"""A vLLM stand-in for tests: vLLM's model, LoRA and completion routes, answered as vLLM answers them.

from lorafleet_standin import StandInServer, VllmStandIn

with StandInServer(VllmStandIn(version="0.32", api_key="k")) as server:
    server.url                        # http://127.0.0.1:<free port>
    server.app.hang("load")           # the next load waits until server.app.release()
    server.app.calls_to("load")       # what the router asked
    server.app.restart()              # forget every adapter, as a restarted vLLM does
"""

from ._app import Call as Call
from ._app import VllmStandIn as VllmStandIn
from ._completions import generated as generated
from ._engine import Memory as Memory
from ._family import Family as Family
from ._lora import make_adapters as make_adapters
from ._misbehaviour import Misbehaviour as Misbehaviour
from ._server import StandInServer as StandInServer
from ._weights import weights_digest as weights_digest
