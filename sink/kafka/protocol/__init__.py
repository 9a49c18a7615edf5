"""The sans-I/O Kafka protocol leaf: imports nothing of the server.

Public surface:
    check_request / request_checker   the bounds-checking pass run before kio's reader
    FrameError / NullError            what it raises
    strip_unknown_tags                KIP-482: unknown tagged fields removed before kio reads
"""

from sink.kafka.protocol.framecheck import (
    FrameError,
    NullError,
    RequestShape,
    TagEdit,
    check_request,
    entity_checker,
    request_checker,
    strip_unknown_tags,
)

__all__ = [
    "FrameError",
    "NullError",
    "RequestShape",
    "TagEdit",
    "check_request",
    "entity_checker",
    "request_checker",
    "strip_unknown_tags",
]
