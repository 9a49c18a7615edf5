"""The sans-I/O Kafka protocol leaf: imports nothing of the server (sink.state may
import it; it imports neither sink.state nor sink.service nor the handlers).

Public surface:
    ConnectionState, CloseReason,        one connection as a state machine (h11 style):
    Request, Answer, Close, NEED_DATA    receive_data / next_event / send
    check_request / request_checker      the bounds-checking pass run before kio's reader
    entity_checker                       the same for any kio entity class
    FrameError / NullError               what it raises
    parse_request, UnreadableRequest     one frame to kio entities: the check, KIP-482, kio
    strip_unknown_tags                   KIP-482: unknown tagged fields removed before kio reads
    ErrorCode, OffsetOutOfRange          the one typed set of Kafka error codes
    parse_batches, BatchHeader, ...      RecordBatch v2 headers and CRC (sink.kafka.protocol.records)
    encode_produce / encode_fetch        hand-rolled hot responses (sink.kafka.protocol.encoders)
    build / encode_response              kio entities from dicts (sink.kafka.protocol.build)
    request_schema / response_schema     the one schema lookup: kio's + the hand-written
                                         pre-KIP-896 versions (legacy_schemas)
"""

from sink.kafka.protocol.build import BuildError, build, encode_entity, encode_response
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Answer,
    Close,
    CloseReason,
    ConnectionState,
    Request,
)
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
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
from sink.kafka.protocol.parse import UnreadableRequest, parse_request
from sink.kafka.protocol.records import BatchError, BatchHeader, parse_batches
from sink.kafka.protocol.schemas import request_schema, response_schema

__all__ = [
    "NEED_DATA",
    "Answer",
    "BatchError",
    "BatchHeader",
    "BuildError",
    "Close",
    "CloseReason",
    "ConnectionState",
    "ErrorCode",
    "FrameError",
    "NullError",
    "OffsetOutOfRange",
    "Request",
    "RequestShape",
    "TagEdit",
    "UnreadableRequest",
    "build",
    "check_request",
    "encode_entity",
    "encode_response",
    "entity_checker",
    "parse_batches",
    "parse_request",
    "request_checker",
    "request_schema",
    "response_schema",
    "strip_unknown_tags",
]
