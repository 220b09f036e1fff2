"""lorafleet for trio routers: which vLLM replica holds which LoRA adapter, over HTTP.

async with lorafleet_trio.Fleet(replicas=replicas, adapters="/adapters") as fleet:
    async with fleet.route("sql") as lease:
        ...  # forward the request to lease.replica; lease.how is "hit", "joined" or "loaded"

The same names as lorafleet_fleet, whose one Fleet runs under trio and asyncio alike.
"""

from lorafleet_fleet import ATTEMPTS as ATTEMPTS
from lorafleet_fleet import HEADROOM as HEADROOM
from lorafleet_fleet import KEEPALIVE_EXPIRY as KEEPALIVE_EXPIRY
from lorafleet_fleet import LISTING_INTERVAL as LISTING_INTERVAL
from lorafleet_fleet import LISTING_TIMEOUT as LISTING_TIMEOUT
from lorafleet_fleet import LOAD_TIMEOUT as LOAD_TIMEOUT
from lorafleet_fleet import OTHER_ADAPTERS as OTHER_ADAPTERS
from lorafleet_fleet import REPLICA_REMOVED as REPLICA_REMOVED
from lorafleet_fleet import TOP_ADAPTERS as TOP_ADAPTERS
from lorafleet_fleet import WAIT_BUCKETS as WAIT_BUCKETS
from lorafleet_fleet import AdapterCounts as AdapterCounts
from lorafleet_fleet import AdapterError as AdapterError
from lorafleet_fleet import AdapterSource as AdapterSource
from lorafleet_fleet import AdapterStatistics as AdapterStatistics
from lorafleet_fleet import EnteredTwiceError as EnteredTwiceError
from lorafleet_fleet import Fault as Fault
from lorafleet_fleet import Fleet as Fleet
from lorafleet_fleet import FleetClosedError as FleetClosedError
from lorafleet_fleet import FleetError as FleetError
from lorafleet_fleet import FleetMetrics as FleetMetrics
from lorafleet_fleet import How as How
from lorafleet_fleet import InvalidValueError as InvalidValueError
from lorafleet_fleet import Lease as Lease
from lorafleet_fleet import LoadError as LoadError
from lorafleet_fleet import LoadFailure as LoadFailure
from lorafleet_fleet import NotIdleError as NotIdleError
from lorafleet_fleet import OutsideBlockError as OutsideBlockError
from lorafleet_fleet import Placed as Placed
from lorafleet_fleet import PrometheusMetrics as PrometheusMetrics
from lorafleet_fleet import Reading as Reading
from lorafleet_fleet import Refusal as Refusal
from lorafleet_fleet import Replica as Replica
from lorafleet_fleet import ReplicaChanges as ReplicaChanges
from lorafleet_fleet import ReplicaConflictError as ReplicaConflictError
from lorafleet_fleet import ReplicaError as ReplicaError
from lorafleet_fleet import ReplicaFailure as ReplicaFailure
from lorafleet_fleet import ReplicaStatistics as ReplicaStatistics
from lorafleet_fleet import Route as Route
from lorafleet_fleet import UnknownReplicaError as UnknownReplicaError
from lorafleet_fleet import UsageError as UsageError

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
