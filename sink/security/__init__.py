"""Security of a node: SASL mechanisms and users, TLS contexts and credentials.

sasl          SaslSession (one connection's SASL state, sans-I/O), SaslPolicy
sasl_options  SaslOptions (the `sasl` configuration section, bootstrap users)
sasl_client   a client login (PLAIN / SCRAM) for `raftsink users`, relays and tests
scram         SCRAM-SHA-256/512 credentials, server and client exchanges (RFC 5802/7677)
tls           TlsOptions (the `tls` configuration section), server/client SSL contexts,
              KafkaContext (reloadable asyncio context), GrpcTls (reloadable gRPC
              credentials), NodeTls (all of one node, reloaded on SIGHUP)
"""

from sink.security.sasl import ALL_MECHANISMS, SaslPolicy, SaslSession
from sink.security.sasl_options import SaslConfigError, SaslOptions
from sink.security.scram import ScramCredential, ScramError, make_credential
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
    "ALL_MECHANISMS",
    "CLIENT_AUTH",
    "GrpcTls",
    "KafkaContext",
    "NodeTls",
    "SaslConfigError",
    "SaslOptions",
    "SaslPolicy",
    "SaslSession",
    "ScramCredential",
    "ScramError",
    "TlsConfigError",
    "TlsOptions",
    "client_context",
    "make_credential",
    "server_context",
]
