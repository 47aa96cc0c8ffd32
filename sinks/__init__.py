"""Adapters to the stores, one module each, behind the interfaces of ``sinks.base``."""
