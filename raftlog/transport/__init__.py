"""Raft message transport: gRPC between processes, in-process for tests.

Both transports have the same surface: `await start(handler)`, `send(msgs)`
(non-blocking; lost messages are fine for Raft), `add_peer`, `on_unreachable`,
`stats`, `await close()`, and per-group delivery: `register_group(id, handler)`
/ `unregister_group(id)` (one transport serves many Raft groups). The gRPC one
speaks mutual TLS when given a `TransportSecurity` (credentials from the embedder).
`beats` packs every group's heartbeats to a peer into one message per tick.
"""

from raftlog.transport.beats import (
    BEATS,
    BEATS_RESP,
    HOST_GROUP_ID,
    Beats,
    BeatsResponse,
    coalesce,
    expand,
)
from raftlog.transport.codec import (
    DecodeLimits,
    InvalidMessageError,
    UnknownGroupError,
    decode_batch,
    decode_batch_known,
    encode_batch,
)
from raftlog.transport.errors import TransportError
from raftlog.transport.gate import GatedTransport
from raftlog.transport.grpc_transport import GrpcTransport, TransportOptions
from raftlog.transport.local import LocalNetwork, LocalTransport
from raftlog.transport.routing import GroupRouter, MessageHandler, TransportStats
from raftlog.transport.security import TransportSecurity

__all__ = [
    "BEATS",
    "BEATS_RESP",
    "HOST_GROUP_ID",
    "Beats",
    "BeatsResponse",
    "DecodeLimits",
    "GatedTransport",
    "GroupRouter",
    "GrpcTransport",
    "InvalidMessageError",
    "LocalNetwork",
    "LocalTransport",
    "MessageHandler",
    "TransportError",
    "TransportOptions",
    "TransportSecurity",
    "TransportStats",
    "UnknownGroupError",
    "coalesce",
    "decode_batch",
    "decode_batch_known",
    "encode_batch",
    "expand",
]
