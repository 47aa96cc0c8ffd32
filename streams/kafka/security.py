"""Credentials and TLS for the servers of the distributed deployment (SPEC §7: "the usual
security settings of each"), turned into the options each client library takes.

One ``KafkaSecurity`` serves every Kafka client here: kafka-python (publisher, admin,
memory feed), aiokafka (changelog batches, sink feeds, offset guard) and faust. Secrets
never appear in a ``repr`` or an error message.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentlog.streams.config import Settings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"AGENTLOG_KAFKA_SECURITY_PROTOCOL={self.protocol!r}: use one of {', '.join(PROTOCOLS)}")
        if self.sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"AGENTLOG_KAFKA_SASL_MECHANISM={self.sasl_mechanism!r}: "
                             f"use one of {', '.join(SASL_MECHANISMS)}")  # fmt: skip
        if self.sasl and not (self.username and self.password):
            raise ValueError(f"Kafka {self.protocol} needs AGENTLOG_KAFKA_SASL_USERNAME and AGENTLOG_KAFKA_SASL_PASSWORD")

    @classmethod
    def of(cls, settings: Settings) -> KafkaSecurity:
        return cls(settings.kafka_security_protocol.upper(), settings.kafka_sasl_mechanism.upper(),
                   settings.kafka_sasl_username, settings.kafka_sasl_password, settings.kafka_ssl_cafile,
                   settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)  # fmt: skip

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """Server verification against ``cafile`` (else the system's CAs); a client
        certificate when ``certfile`` is given (mutual TLS)."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.cafile)
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's producer, consumer and admin client."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.sasl:
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                           sasl_plain_password=self.password)  # fmt: skip
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        return options

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer and consumer."""
        return self.kafka_python()  # the same names in both libraries

    def faust_credentials(self) -> Any:
        """faust's ``broker_credentials``, or ``None`` for plaintext."""
        import faust  # noqa: PLC0415 - only the worker needs faust

        if self.sasl:
            return faust.SASLCredentials(username=self.username, password=self.password,
                                         ssl_context=self.ssl_context(), mechanism=self.sasl_mechanism)  # fmt: skip
        if self.tls:
            return faust.SSLCredentials(self.ssl_context())
        return None


def opensearch_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for opensearch-py: basic auth and TLS verification."""
    options: dict[str, Any] = {}
    if settings.opensearch_username:
        options["http_auth"] = (settings.opensearch_username, settings.opensearch_password or "")
    if settings.opensearch_ca_certs:
        options["ca_certs"] = settings.opensearch_ca_certs
    if not settings.opensearch_verify_certs:
        options.update(verify_certs=False, ssl_show_warn=False)
    return options


def clickhouse_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for clickhouse-connect (the URL may also carry user and password)."""
    options: dict[str, Any] = {}
    if settings.clickhouse_username:
        options["username"] = settings.clickhouse_username
    if settings.clickhouse_password:
        options["password"] = settings.clickhouse_password
    if settings.clickhouse_ca_certs:
        options["ca_cert"] = settings.clickhouse_ca_certs
    return options


__all__ = ["KafkaSecurity", "PROTOCOLS", "SASL_MECHANISMS", "clickhouse_options", "opensearch_options"]
