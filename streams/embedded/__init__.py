"""The embedded deployment: the on-disk topic, the driver that runs the processors over
it, the service facade over the data directory's stores, and ``agentlog run``'s server."""
