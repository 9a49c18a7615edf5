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


_CUT_IN_HANDSHAKE = "handshake read failed"
"""gRPC's words when the connection ended (reset, or closed) while this side waited
for the peer's handshake bytes: the peer said nothing about TLS."""


def is_tls_failure(details: str) -> bool:
    """An RPC error's details that name a failed TLS handshake (another CA, an expired
    certificate, a plaintext peer: "Tls handshake failed (TSI_PROTOCOL_FAILURE):
    SSL_ERROR_SSL: ..."): worth a warning, unlike an ordinary down peer ("Connection
    refused"). With TLS 1.3 a server that refuses OUR certificate closes the socket
    after the client's side of the handshake finished: the client sees only "Socket
    closed" while connecting (the server logs the verification error).

    Not a TLS failure: a connection cut before or during the handshake, before the
    peer answered ("Handshake read failed (recvmsg:Connection reset by peer)" or
    "(Socket closed)"): a proxy or load balancer that accepts and then drops the
    connection, or a peer dying. Those are counted as ordinary disconnections, not
    as tls_failures. (A cut right after a finished TLS 1.3 handshake still reads as
    a refusal: the client cannot tell the two apart.)"""
    text = details.lower()
    if _CUT_IN_HANDSHAKE in text:
        return False
    if any(s in text for s in ("handshake", "ssl", "certificate", "tls")):
        return True
    return "failed to connect" in text and "socket closed" in text
