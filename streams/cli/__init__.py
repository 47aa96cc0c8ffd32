"""The ``agentlog`` command: argument parsing, the commands, and the demo."""
