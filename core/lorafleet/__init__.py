"""lorafleet: which vLLM replica holds which LoRA adapter, as a sans-IO state machine."""

from ._commands import Command as Command
from ._commands import Fail as Fail
from ._commands import Grant as Grant
from ._commands import IssueLoad as IssueLoad
from ._commands import IssueUnload as IssueUnload
from ._commands import MarkMet as MarkMet
from ._commands import ReadListing as ReadListing
from ._errors import ClockWentBackwardsError as ClockWentBackwardsError
from ._errors import InvalidValueError as InvalidValueError
from ._errors import ReplicaConflictError as ReplicaConflictError
from ._errors import TicketOrderError as TicketOrderError
from ._errors import UnknownOperationError as UnknownOperationError
from ._errors import UnknownReplicaError as UnknownReplicaError
from ._errors import UnknownTicketError as UnknownTicketError
from ._errors import UsageError as UsageError
from ._events import AdapterMissing as AdapterMissing
from ._events import Cancelled as Cancelled
from ._events import Event as Event
from ._events import LimitSet as LimitSet
from ._events import ListingFailed as ListingFailed
from ._events import ListingReceived as ListingReceived
from ._events import LoadFinished as LoadFinished
from ._events import Released as Released
from ._events import ReplicaAdded as ReplicaAdded
from ._events import ReplicaFailed as ReplicaFailed
from ._events import ReplicasRemoved as ReplicasRemoved
from ._events import Requested as Requested
from ._events import TimeAdvanced as TimeAdvanced
from ._events import UnloadFinished as UnloadFinished
from ._machine import DEFAULT_BACKOFF as DEFAULT_BACKOFF
from ._machine import DEFAULT_LISTING_INTERVAL as DEFAULT_LISTING_INTERVAL
from ._machine import DEFAULT_MAX_BACKOFF as DEFAULT_MAX_BACKOFF
from ._machine import DEFAULT_REFUSAL as DEFAULT_REFUSAL
from ._machine import REPLICA_REMOVED as REPLICA_REMOVED
from ._machine import AdapterStateMachine as AdapterStateMachine
from ._snapshots import Placement as Placement
from ._snapshots import ReplicaStatistics as ReplicaStatistics
from ._snapshots import Statistics as Statistics
from ._snapshots import View as View
from ._values import Fault as Fault
from ._values import How as How
from ._values import LoadOutcome as LoadOutcome
from ._values import Placed as Placed
from ._values import UnloadOutcome as UnloadOutcome

__version__ = "0.1.0"
