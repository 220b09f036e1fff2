"""lorafleet's shell: which vLLM replica holds which LoRA adapter, over HTTP, under trio or asyncio.

async with lorafleet_fleet.Fleet(replicas=replicas, adapters="/adapters") as fleet:
    async with fleet.route("sql") as lease:
        ...  # forward the request to lease.replica; lease.how is "hit", "joined" or "loaded"

One ``Fleet`` runs on both runtimes (it is written on anyio); lorafleet_trio and lorafleet_asyncio are
the same names under the runtime's name.
"""

from lorafleet import REPLICA_REMOVED as REPLICA_REMOVED
from lorafleet import Fault as Fault
from lorafleet import How as How
from lorafleet import InvalidValueError as InvalidValueError
from lorafleet import NotIdleError as NotIdleError
from lorafleet import Placed as Placed
from lorafleet import Reading as Reading
from lorafleet import Refusal as Refusal
from lorafleet import ReplicaConflictError as ReplicaConflictError
from lorafleet import ReplicaStatistics as ReplicaStatistics
from lorafleet import UnknownReplicaError as UnknownReplicaError
from lorafleet import UsageError as UsageError

from ._adapter_counts import OTHER_ADAPTERS as OTHER_ADAPTERS
from ._adapter_counts import TOP_ADAPTERS as TOP_ADAPTERS
from ._adapter_counts import WAIT_BUCKETS as WAIT_BUCKETS
from ._adapter_counts import AdapterCounts as AdapterCounts
from ._adapter_counts import AdapterStatistics as AdapterStatistics
from ._fleet import ATTEMPTS as ATTEMPTS
from ._fleet import HEADROOM as HEADROOM
from ._fleet import KEEPALIVE_EXPIRY as KEEPALIVE_EXPIRY
from ._fleet import LISTING_INTERVAL as LISTING_INTERVAL
from ._fleet import LISTING_TIMEOUT as LISTING_TIMEOUT
from ._fleet import LOAD_TIMEOUT as LOAD_TIMEOUT
from ._fleet import Fleet as Fleet
from ._fleet import FleetMetrics as FleetMetrics
from ._fleet import Lease as Lease
from ._fleet import Route as Route
from ._metrics import PrometheusMetrics as PrometheusMetrics
from ._records import LoadFailure as LoadFailure
from ._records import ReplicaFailure as ReplicaFailure
from ._resolve import AdapterSource as AdapterSource
from ._types import AdapterError as AdapterError
from ._types import EnteredTwiceError as EnteredTwiceError
from ._types import FleetClosedError as FleetClosedError
from ._types import FleetError as FleetError
from ._types import LoadError as LoadError
from ._types import OutsideBlockError as OutsideBlockError
from ._types import Replica as Replica
from ._types import ReplicaChanges as ReplicaChanges
from ._types import ReplicaError as ReplicaError

__all__ = [
    "ATTEMPTS",
    "HEADROOM",
    "KEEPALIVE_EXPIRY",
    "LISTING_INTERVAL",
    "LISTING_TIMEOUT",
    "LOAD_TIMEOUT",
    "OTHER_ADAPTERS",
    "REPLICA_REMOVED",
    "TOP_ADAPTERS",
    "WAIT_BUCKETS",
    "AdapterCounts",
    "AdapterError",
    "AdapterSource",
    "AdapterStatistics",
    "EnteredTwiceError",
    "Fault",
    "Fleet",
    "FleetClosedError",
    "FleetError",
    "FleetMetrics",
    "How",
    "InvalidValueError",
    "Lease",
    "LoadError",
    "LoadFailure",
    "NotIdleError",
    "OutsideBlockError",
    "Placed",
    "PrometheusMetrics",
    "Reading",
    "Refusal",
    "Replica",
    "ReplicaChanges",
    "ReplicaConflictError",
    "ReplicaError",
    "ReplicaFailure",
    "ReplicaStatistics",
    "Route",
    "UnknownReplicaError",
    "UsageError",
]
