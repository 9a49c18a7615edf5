"""Transport security: what the gRPC transport needs to speak mutual TLS.

raftlog knows no certificate files or settings: the embedding server (sink) passes an
object with these two methods, built from its own configuration, and may reload it
(new handshakes and new channels then use the new certificates). None: plaintext.

Invariant: the server credentials REQUIRE a client certificate of the cluster CA, so
a process without one (or with another CA's) cannot deliver a single Raft message.
"""

from __future__ import annotations

from typing import Protocol

import grpc


class TransportSecurity(Protocol):
    def server_credentials(self, require_client: bool = True) -> grpc.ServerCredentials:
        """Credentials of the transport's gRPC server (called once, at start)."""
        ...

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials of one outgoing channel (called on every (re)connect)."""
        ...


def is_tls_failure(details: str) -> bool:
    """An RPC error's details that name a failed TLS handshake (another CA, an expired
    certificate, a plaintext peer): worth a warning, unlike an ordinary down peer
    ("Connection refused"). With TLS 1.3 a server that refuses OUR certificate closes
    the socket after the client's side of the handshake finished: the client sees
    only "Socket closed" while connecting (the server logs the verification error)."""
    text = details.lower()
    if any(s in text for s in ("handshake", "ssl", "certificate", "tls")):
        return True
    return "failed to connect" in text and "socket closed" in text
