"""The read API (gRPC) that connectors use: partitions, offsets, record batches, commits.

This package's surface is the CLIENT side, a light leaf (grpc + the generated messages +
the wire codec): connectors and tools import it on every Spark executor. The server
(`sink.readapi.server.ReadApiService`) is imported by the node's composition root only, so
importing this package never loads raftlog or storage.
"""

from sink.readapi.client import ReadApiClient
from sink.readapi.wire import (
    ERR_INVALID_REQUEST,
    ERR_NONE,
    ERR_NOT_LEADER,
    ERR_OFFSET_OUT_OF_RANGE,
    ERR_REQUEST_TIMED_OUT,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    MAX_FETCH_BYTES,
    MAX_WAIT_MS,
    SERVICE,
    FetchedBatch,
    FetchReplyView,
    WireError,
    decode_fetch_reply,
)

__all__ = [
    "ERR_INVALID_REQUEST",
    "ERR_NONE",
    "ERR_NOT_LEADER",
    "ERR_OFFSET_OUT_OF_RANGE",
    "ERR_REQUEST_TIMED_OUT",
    "ERR_UNKNOWN_TOPIC_OR_PARTITION",
    "MAX_FETCH_BYTES",
    "MAX_WAIT_MS",
    "SERVICE",
    "FetchReplyView",
    "FetchedBatch",
    "ReadApiClient",
    "WireError",
    "decode_fetch_reply",
]
