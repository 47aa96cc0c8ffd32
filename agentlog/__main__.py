"""``python -m agentlog``: the ``agentlog`` command."""

import sys

from agentlog.streams.cli.main import main

sys.exit(main())
