"""Client data: containers, scenario generators."""
from topofl.data.federation import ClientData, Federation
from topofl.data.scenarios import SCENARIOS, make_scenario
from topofl.models.preprocessing import Preprocessing

__all__ = ["ClientData", "Federation", "Preprocessing", "SCENARIOS", "make_scenario"]
