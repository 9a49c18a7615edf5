"""Raft message transport: gRPC between processes, in-process for tests.

Both transports have the same surface: `await start(handler)`, `send(msgs)`
(non-blocking; lost messages are fine for Raft), `add_peer`, `on_unreachable`,
`stats`, `await close()`.
"""

from raftlog.transport.codec import DecodeLimits, InvalidMessageError, decode_batch, encode_batch
from raftlog.transport.errors import TransportError
from raftlog.transport.grpc_transport import (
    GrpcTransport,
    MessageHandler,
    TransportOptions,
    TransportStats,
)
from raftlog.transport.local import LocalNetwork, LocalTransport

__all__ = [
    "DecodeLimits",
    "GrpcTransport",
    "InvalidMessageError",
    "LocalNetwork",
    "LocalTransport",
    "MessageHandler",
    "TransportError",
    "TransportOptions",
    "TransportStats",
    "decode_batch",
    "encode_batch",
]
