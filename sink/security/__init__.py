"""Security of a node: TLS contexts and credentials (tls); SASL mechanisms and users
arrive beside it (sasl*.py, another module each).

tls     TlsOptions (the `tls` configuration section), server/client SSL contexts,
        KafkaContext (reloadable asyncio context), GrpcTls (reloadable gRPC
        credentials), NodeTls (all of one node, reloaded on SIGHUP)
"""

from sink.security.tls import (
    CLIENT_AUTH,
    GrpcTls,
    KafkaContext,
    NodeTls,
    TlsConfigError,
    TlsOptions,
    client_context,
    server_context,
)

__all__ = [
    "CLIENT_AUTH",
    "GrpcTls",
    "KafkaContext",
    "NodeTls",
    "TlsConfigError",
    "TlsOptions",
    "client_context",
    "server_context",
]
