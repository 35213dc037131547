"""ServerApp of the topofl Flower app (all logic lives in ``topofl.flower``)."""
from topofl.flower.server_app import app

__all__ = ["app"]
