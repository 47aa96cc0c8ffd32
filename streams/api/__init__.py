"""The query and publish interface every deployment implements, its HTTP API, and the
HTTP client that speaks it."""
