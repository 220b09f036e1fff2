"""lorafleet's fleet simulator: real state machines, simulated vLLM replicas, virtual time."""

from ._belady import belady_loads as belady_loads
from ._cli import main as main
from ._policies import BASELINES as BASELINES
from ._policies import POLICIES as POLICIES
from ._policies import VARIANTS as VARIANTS
from ._sim import Figures as Figures
from ._sim import Fleet as Fleet
from ._sim import Simulation as Simulation
from ._sim import simulate as simulate
from ._state import Policy as Policy
from ._state import RouterView as RouterView
from ._workload import Synthetic as Synthetic
from ._workload import Workload as Workload
from ._workload import WorkloadError as WorkloadError
from ._workload import read_trace as read_trace
