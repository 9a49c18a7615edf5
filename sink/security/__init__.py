"""Security of a node: SASL mechanisms and users (sasl*.py, scram.py); TLS arrives
beside it (tls.py).

sasl          SaslSession (one connection's SASL state, sans-I/O), SaslPolicy
sasl_options  SaslOptions (the `sasl` configuration section, bootstrap users)
sasl_client   a client login (PLAIN / SCRAM) for `raftsink users`, relays and tests
scram         SCRAM-SHA-256/512 credentials, server and client exchanges (RFC 5802/7677)
"""

from sink.security.sasl import ALL_MECHANISMS, SaslPolicy, SaslSession
from sink.security.sasl_options import SaslConfigError, SaslOptions
from sink.security.scram import ScramCredential, ScramError, make_credential

__all__ = [
    "ALL_MECHANISMS",
    "SaslConfigError",
    "SaslOptions",
    "SaslPolicy",
    "SaslSession",
    "ScramCredential",
    "ScramError",
    "make_credential",
]
