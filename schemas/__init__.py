"""The contract's data shapes, declared once: events, working state, tables and index."""
