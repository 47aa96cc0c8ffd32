"""Configuration, from the environment (or a ``agentlog.toml`` in the data directory).

This module is the one place that decides which adapters a deployment uses: the
embedded default unless ``AGENTLOG_KAFKA_BOOTSTRAP`` / ``AGENTLOG_CLICKHOUSE_URL`` /
``AGENTLOG_OPENSEARCH_URL`` name real servers.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from agentlog.processors.thread import PairingConfig
from agentlog.schemas.events import MAX_EVENT_BYTES
from agentlog.sinks.sql_sandbox import SqlLimits
from agentlog.streams.kafka.security import KafkaSecurity

_ENV = {
    "data_dir": "AGENTLOG_DATA_DIR",
    "kafka_bootstrap": "AGENTLOG_KAFKA_BOOTSTRAP",
    "clickhouse_url": "AGENTLOG_CLICKHOUSE_URL",
    "opensearch_url": "AGENTLOG_OPENSEARCH_URL",
    "opensearch_index": "AGENTLOG_OPENSEARCH_INDEX",
    "http_host": "AGENTLOG_HTTP_HOST",
    "http_port": "AGENTLOG_HTTP_PORT",
    "grace_seconds": "AGENTLOG_GRACE_SECONDS",
    "call_timeout_seconds": "AGENTLOG_CALL_TIMEOUT_SECONDS",
    "max_event_bytes": "AGENTLOG_MAX_EVENT_BYTES",
    "max_request_bytes": "AGENTLOG_MAX_REQUEST_BYTES",
    "api_token": "AGENTLOG_API_TOKEN",
    "allowed_hosts": "AGENTLOG_ALLOWED_HOSTS",
    "trust_proxy": "AGENTLOG_TRUST_PROXY",
    "refresh_seconds": "AGENTLOG_REFRESH_SECONDS",
    "checkpoint_seconds": "AGENTLOG_CHECKPOINT_SECONDS",
    "sink_flush_ms": "AGENTLOG_SINK_FLUSH_MS",
    "sink_flush_rows": "AGENTLOG_SINK_FLUSH_ROWS",
    "sink_nice": "AGENTLOG_SINK_NICE",
    "sink_spare_cpus": "AGENTLOG_SINK_SPARE_CPUS",
    "batch_size": "AGENTLOG_BATCH_SIZE",
    "auto_compact": "AGENTLOG_AUTO_COMPACT",
    "compact_window_tokens": "AGENTLOG_COMPACT_WINDOW_TOKENS",
    "partitions": "AGENTLOG_PARTITIONS",
    "dedup_horizon": "AGENTLOG_DEDUP_HORIZON",
    "kafka_namespace": "AGENTLOG_KAFKA_NAMESPACE",
    "faust_store": "AGENTLOG_FAUST_STORE",
    "worker_port": "AGENTLOG_WORKER_PORT",
    # Kafka sink processes (`agentlog run --role sinks`): where one listens, and where a
    # processor reaches it for the log when the log is chDB.
    "sinks_port": "AGENTLOG_SINKS_PORT",
    "sinks_url": "AGENTLOG_SINKS_URL",
    "session_timeout_seconds": "AGENTLOG_SESSION_TIMEOUT_SECONDS",
    "summary_url": "AGENTLOG_SUMMARY_URL",
    "summary_model": "AGENTLOG_SUMMARY_MODEL",
    "memory_idle_seconds": "AGENTLOG_MEMORY_IDLE_SECONDS",
    "memory_lease_seconds": "AGENTLOG_MEMORY_LEASE_SECONDS",
    "memory_llm": "AGENTLOG_MEMORY_LLM",
    "memory_pause_before_publish_seconds": "AGENTLOG_MEMORY_PAUSE_BEFORE_PUBLISH_SECONDS",
    "redact": "AGENTLOG_REDACT",
    "gc_freeze": "AGENTLOG_GC_FREEZE",
    # Security of each server (agentlog.streams.kafka.security); passwords stay out of every repr.
    "kafka_security_protocol": "AGENTLOG_KAFKA_SECURITY_PROTOCOL",
    "kafka_sasl_mechanism": "AGENTLOG_KAFKA_SASL_MECHANISM",
    "kafka_sasl_username": "AGENTLOG_KAFKA_SASL_USERNAME",
    "kafka_sasl_password": "AGENTLOG_KAFKA_SASL_PASSWORD",
    "kafka_ssl_cafile": "AGENTLOG_KAFKA_SSL_CAFILE",
    "kafka_ssl_certfile": "AGENTLOG_KAFKA_SSL_CERTFILE",
    "kafka_ssl_keyfile": "AGENTLOG_KAFKA_SSL_KEYFILE",
    "opensearch_username": "AGENTLOG_OPENSEARCH_USERNAME",
    "opensearch_password": "AGENTLOG_OPENSEARCH_PASSWORD",
    "opensearch_ca_certs": "AGENTLOG_OPENSEARCH_CA_CERTS",
    "opensearch_verify_certs": "AGENTLOG_OPENSEARCH_VERIFY_CERTS",
    "clickhouse_username": "AGENTLOG_CLICKHOUSE_USERNAME",
    "clickhouse_password": "AGENTLOG_CLICKHOUSE_PASSWORD",
    "clickhouse_ca_certs": "AGENTLOG_CLICKHOUSE_CA_CERTS",
    # The analyst SQL sandbox (agentlog.sinks.sql_sandbox): its limits, and on a ClickHouse server
    # the restricted user its queries run as (a DSN with that user's name and password).
    "clickhouse_analyst_url": "AGENTLOG_CLICKHOUSE_ANALYST_URL",
    "sql_timeout_seconds": "AGENTLOG_SQL_TIMEOUT_SECONDS",
    "sql_max_rows": "AGENTLOG_SQL_MAX_ROWS",
    "sql_max_bytes": "AGENTLOG_SQL_MAX_BYTES",
    "sql_max_memory_bytes": "AGENTLOG_SQL_MAX_MEMORY_BYTES",
    "sql_max_rows_to_read": "AGENTLOG_SQL_MAX_ROWS_TO_READ",
}



POSITIVE = frozenset({
    "max_event_bytes", "max_request_bytes", "call_timeout_seconds", "batch_size", "partitions",
    "memory_lease_seconds", "sql_timeout_seconds", "sql_max_rows", "sql_max_bytes", "sql_max_memory_bytes",
    "sql_max_rows_to_read",
})  # fmt: skip
"""Settings that are a size, a count or a time limit: zero or less would not be one (the
SQL engine reads a zero limit as none at all)."""


def _number(value: object, kind: type[int] | type[float], origin: str, positive: bool = False) -> int | float:
    """A setting's number; one that is not a (finite) number, or not above zero where it
    must be (``positive``), says which setting it is."""
    try:
        number = kind(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = None
    if number is None or (kind is float and not math.isfinite(number)):
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{origin}={value!r} is not {what}: set it to one, or unset it for the default")
    if positive and number <= 0:
        raise ValueError(f"{origin}={value!r} must be above 0 (a zero limit would be no limit): "
                         "set it to a positive number, or unset it for the default")  # fmt: skip
    return number


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".agentlog")
    kafka_bootstrap: str | None = None
    clickhouse_url: str | None = None
    opensearch_url: str | None = None
    opensearch_index: str = "agentlog-events"
    http_host: str = "127.0.0.1"
    http_port: int = 8787
    grace_seconds: float = 30.0
    call_timeout_seconds: float = 600.0
    max_event_bytes: int = MAX_EVENT_BYTES
    # The HTTP API (agentlog.streams.api.guard): largest request body, read in chunks and refused
    # past this; the token every route but /healthz needs (required beyond loopback);
    # extra Host names (comma-separated) a server answers to besides loopback's.
    max_request_bytes: int = 64 * 1024 * 1024
    api_token: str | None = field(default=None, repr=False)
    allowed_hosts: str | None = None
    # Behind an HTTPS proxy that sets X-Forwarded-Proto: believe it (the web view's cookie
    # is then Secure). Off by default: anyone could send the header.
    trust_proxy: bool = False
    refresh_seconds: float = 1.0
    checkpoint_seconds: float = 2.0
    # The embedded sink stage's group commit: it writes the log, pairs and index once this
    # many applied events wait, or the oldest has waited this long, and before each index
    # commit (refresh_seconds). Each write has a fixed cost (two chDB inserts, about 15 ms
    # of CPU on the second core): while an agent's steps trickle in, a write per refresh
    # leaves that core to the steps (`sql` and a thread's `search` never wait for it).
    sink_flush_ms: float = 1000.0
    sink_flush_rows: int = 5000
    # `agentlog run`'s sink process lowers its CPU priority by this much (os.nice): when the
    # two cores are contended, the serving process's state and context reads go first.
    sink_nice: int = 5
    # ... and leaves this many CPUs to the serving process: its threads (chDB's pools
    # included) run on the others, so a group commit never takes every core at once.
    sink_spare_cpus: int = 1
    batch_size: int = 5000
    partitions: int = 4
    # Kafka processor: how many source records per partition its dedup ids cover
    # (agentlog.streams.kafka.batch_seen); memory is about 150 bytes per id.
    dedup_horizon: int = 1_000_000
    kafka_namespace: str = ""
    faust_store: str = "memory://"
    worker_port: int = 6066
    sinks_port: int = 6067
    sinks_url: str | None = None
    # How long a silent worker keeps its partitions before the others take them over.
    session_timeout_seconds: float = 30.0
    auto_compact: bool = True
    # A thread's raw window folds into its summary past this many tokens (a stream step).
    compact_window_tokens: int = 6000
    summary_url: str | None = None
    summary_model: str = "gpt-4o-mini"
    # Long-term memory runs on its own (agentlog.streams.memory.runner) for a thread idle
    # this long (0: only by command); the leases of its runs (on Kafka, the transaction
    # timeout of the view's publication).
    memory_idle_seconds: float = 300.0
    memory_lease_seconds: float = 60.0
    # Phase 1 of memory also asks the summariser's LLM for candidates (checked against the
    # events they cite before they count).
    memory_llm: bool = False
    # Fencing drills only: a runner holds its view's open transaction (on Kafka) this long
    # before committing it, as ``agentlog memory consolidate --pause-before-publish`` does.
    memory_pause_before_publish_seconds: float = 0.0
    # Secrets redacted from state, context and compaction records (``off`` for trusted
    # deployments); the search index and memory always redact, the log keeps the original.
    redact: bool = True
    # The heap an embedded service opens with leaves the garbage collector's full passes
    # (agentlog.streams.gc_heap): they no longer stall an agent step for tens of ms.
    gc_freeze: bool = True
    kafka_security_protocol: str = "PLAINTEXT"  # SSL, SASL_PLAINTEXT, SASL_SSL
    kafka_sasl_mechanism: str = "PLAIN"  # SCRAM-SHA-256, SCRAM-SHA-512
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = field(default=None, repr=False)
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None
    opensearch_username: str | None = None
    opensearch_password: str | None = field(default=None, repr=False)
    opensearch_ca_certs: str | None = None
    opensearch_verify_certs: bool = True
    clickhouse_username: str | None = None
    clickhouse_password: str | None = field(default=None, repr=False)
    clickhouse_ca_certs: str | None = None
    clickhouse_analyst_url: str | None = field(default=None, repr=False)
    sql_timeout_seconds: float = 10.0
    sql_max_rows: int = 100_000
    sql_max_bytes: int = 64 * 1024 * 1024
    sql_max_memory_bytes: int = 1024 * 1024 * 1024
    sql_max_rows_to_read: int = 2_000_000_000
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        data_dir = Path(env.get(_ENV["data_dir"], ".agentlog"))
        values: dict[str, object] = {}
        config_file = data_dir / "agentlog.toml"
        if config_file.exists():
            values.update(tomllib.loads(config_file.read_text()))
        origin = {name: f"{config_file}: {name}" for name in values}
        for name, var in _ENV.items():
            if env.get(var):
                values[name], origin[name] = env[var], var
        types = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, object] = {}
        for name, value in values.items():
            if name not in types:
                continue
            kind = types[name]
            if name == "data_dir":
                kwargs[name] = Path(str(value))
            elif kind in ("int", "float"):
                kwargs[name] = _number(value, int if kind == "int" else float, origin[name], name in POSITIVE)
            elif kind in ("bool",):
                kwargs[name] = str(value).lower() not in ("0", "false", "no", "off")
            else:
                kwargs[name] = str(value)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The environment variables that give a child process these settings."""
        out: dict[str, str] = {}
        for name, var in _ENV.items():
            value = getattr(self, name)
            if value is not None:
                out[var] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @property
    def sinks_address(self) -> str:
        """Where a Kafka processor finds the sink process (for the log, when it is chDB)."""
        return self.sinks_url or f"http://{self.http_host}:{self.sinks_port}"

    @property
    def distributed(self) -> bool:
        return bool(self.kafka_bootstrap)

    @property
    def kafka_security(self) -> KafkaSecurity:
        return KafkaSecurity.of(self)

    @property
    def sql_limits(self) -> SqlLimits:
        return SqlLimits(
            self.sql_timeout_seconds, self.sql_max_rows, self.sql_max_bytes,
            self.sql_max_memory_bytes, self.sql_max_rows_to_read,
        )  # fmt: skip

    @property
    def pairing(self) -> PairingConfig:
        window = self.compact_window_tokens if self.auto_compact else 0
        return PairingConfig(self.grace_seconds * 1000.0, self.call_timeout_seconds * 1000.0, window)

    def path(self, name: str) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir / name


__all__ = ["Settings"]
