"""Flower app wrapping topofl: ``flwr run`` loads the ServerApp and ClientApp below."""
