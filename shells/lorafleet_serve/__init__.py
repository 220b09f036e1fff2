"""lorafleet's reference router: an OpenAI-compatible proxy in front of vLLM replicas, on a Fleet.

    lorafleet serve --config router.toml          # or flags; lorafleet serve --help

In a program (under asyncio or trio):

    config = lorafleet_serve.Config(replicas=(ReplicaConfig(...), ...), adapter_root=Path("/srv/adapters"))
    async with lorafleet_serve.RouterServer(config) as server:
        ...                                       # server.url takes OpenAI-style requests
        await server.reload(new_config)           # its replicas (and discovered names) from now on

``Router`` is the ASGI app itself, for another ASGI server.
"""

from ._app import Router as Router
from ._catalog import Catalog as Catalog
from ._config import Config as Config
from ._config import ConfigError as ConfigError
from ._config import DiscoverConfig as DiscoverConfig
from ._config import ReplicaConfig as ReplicaConfig
from ._config import check as check
from ._config import read_toml as read_toml
from ._server import ListenError as ListenError
from ._server import RouterServer as RouterServer
