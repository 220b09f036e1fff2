"""The shell both runtimes share: lorafleet's machine driven over HTTP with httpx, on anyio.

Routers import it through lorafleet_trio or lorafleet_asyncio, which re-export what is here.
"""

from ._fleet import LISTING_INTERVAL as LISTING_INTERVAL
from ._fleet import LISTING_TIMEOUT as LISTING_TIMEOUT
from ._fleet import LOAD_TIMEOUT as LOAD_TIMEOUT
from ._fleet import Fleet as Fleet
from ._fleet import Lease as Lease
from ._metrics import FleetMetrics as FleetMetrics
from ._metrics import PrometheusMetrics as PrometheusMetrics
from ._types import AdapterError as AdapterError
from ._types import FleetClosedError as FleetClosedError
from ._types import FleetError as FleetError
from ._types import LoadError as LoadError
from ._types import Replica as Replica
from ._types import ReplicaError as ReplicaError
