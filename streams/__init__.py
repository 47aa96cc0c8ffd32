"""Wiring: the event bus, the drivers, the service facade, the CLI and the HTTP API."""
