"""Client data: containers, scenario generators."""
from topofl.data.federation import ClientData, Federation
from topofl.data.scenarios import SCENARIOS, make_scenario

__all__ = ["ClientData", "Federation", "SCENARIOS", "make_scenario"]
