"""The read API on the wire: service name, error codes, limits, and FetchReply without
protobuf objects in between (the read API's hot path). Shared by the server and the client;
imports nothing but the standard library.

A Fetch reply is megabytes of record batches. Built as pb.FetchReply and serialized,
every batch was copied three times more on the serving node (bytes join, message
construction, serialization), and parsed and copied twice on the reader; profiling
showed that node spending more time in those copies than in reading its log. Here the
node writes the encoding directly (one join of header pieces and batch views) and the
reader slices batches out of the received buffer as memoryviews.

The bytes are exactly protobuf's encoding of read_api.proto's FetchReply (fields in
number order, zero values omitted), so any protobuf client reads them;
tests/unit/sink/test_read_wire.py checks both directions against pb.FetchReply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SERVICE = "raftsink.SinkRead"
"""The gRPC service name (read_api.proto's package and service)."""

# Error codes in FetchReply/CommitReply.error_code: Kafka's numbers for the same conditions.
ERR_NONE, ERR_OFFSET_OUT_OF_RANGE, ERR_UNKNOWN_TOPIC_OR_PARTITION = 0, 1, 3
ERR_NOT_LEADER, ERR_REQUEST_TIMED_OUT, ERR_INVALID_REQUEST = 6, 7, 42

MAX_FETCH_BYTES = 64 * 1024 * 1024
"""Largest FetchRequest.max_bytes the server honours (the client's receive limit follows it)."""
MAX_WAIT_MS = 30_000
"""Longest FetchRequest.max_wait_ms the server honours."""

# Tags: (field number << 3) | wire type (0 varint, 2 length-delimited).
_BATCHES, _HW, _LOG_START, _ERROR_CODE, _ERROR = 0x0A, 0x10, 0x18, 0x20, 0x2A
_BASE_OFFSET, _DATA = 0x08, 0x12


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 as protobuf encodes it: ten bytes, two's complement
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_fetch_reply(
    batches: Sequence[tuple[int, bytes, memoryview | bytes]],
    high_watermark: int,
    log_start_offset: int,
) -> bytes:
    """A successful FetchReply. batches: (base offset, first bytes, rest) per
    RecordBatch as SinkStateMachine.read_parts gives them (data = first + rest)."""
    pieces: list[bytes | memoryview] = []
    for base, head, rest in batches:
        n = len(head) + len(rest)
        inner = (b"%c%s" % (_BASE_OFFSET, _varint(base)) if base else b"") + (
            b"%c%s" % (_DATA, _varint(n))
        )
        pieces.append(b"%c%s%s" % (_BATCHES, _varint(len(inner) + n), inner))
        pieces.append(head)
        pieces.append(rest)
    if high_watermark:
        pieces.append(b"%c%s" % (_HW, _varint(high_watermark)))
    if log_start_offset:
        pieces.append(b"%c%s" % (_LOG_START, _varint(log_start_offset)))
    return b"".join(pieces)


@dataclass(slots=True)
class FetchedBatch:
    base_offset: int
    data: memoryview
    """A whole RecordBatch v2, a view into the received reply."""


@dataclass(slots=True)
class FetchReplyView:
    """FetchReply's fields as the read API's clients use them."""

    batches: list[FetchedBatch] = field(default_factory=list)
    high_watermark: int = 0
    log_start_offset: int = 0
    error_code: int = 0
    error: str = ""


class WireError(ValueError):
    """Bytes that are not a FetchReply."""


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _int64(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _skip(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        return _read_varint(buf, pos, end)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        n, pos = _read_varint(buf, pos, end)
        return pos + n
    if wire_type == 5:
        return pos + 4
    raise WireError(f"unsupported wire type {wire_type}")


def decode_fetch_reply(data: bytes) -> FetchReplyView:
    """Parse a FetchReply (from any protobuf encoder); unknown fields are skipped."""
    buf = memoryview(data)
    end = len(buf)
    out = FetchReplyView()
    pos = 0
    while pos < end:
        tag, pos = _read_varint(buf, pos, end)
        if tag == _BATCHES:
            n, pos = _read_varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise WireError("batch runs past the reply")
            base, body = 0, buf[0:0]
            while pos < stop:
                t, pos = _read_varint(buf, pos, stop)
                if t == _BASE_OFFSET:
                    v, pos = _read_varint(buf, pos, stop)
                    base = _int64(v)
                elif t == _DATA:
                    m, pos = _read_varint(buf, pos, stop)
                    if pos + m > stop:
                        raise WireError("batch data runs past its message")
                    body = buf[pos : pos + m]
                    pos += m
                else:
                    pos = _skip(buf, pos, stop, t & 7)
            out.batches.append(FetchedBatch(base, body))
        elif tag == _HW:
            v, pos = _read_varint(buf, pos, end)
            out.high_watermark = _int64(v)
        elif tag == _LOG_START:
            v, pos = _read_varint(buf, pos, end)
            out.log_start_offset = _int64(v)
        elif tag == _ERROR_CODE:
            v, pos = _read_varint(buf, pos, end)
            out.error_code = _int64(v) & 0xFFFFFFFF
            if out.error_code >= 1 << 31:
                out.error_code -= 1 << 32
        elif tag == _ERROR:
            n, pos = _read_varint(buf, pos, end)
            out.error = bytes(buf[pos : pos + n]).decode("utf-8", "replace")
            pos += n
        else:
            pos = _skip(buf, pos, end, tag & 7)
    if pos != end:
        raise WireError("field runs past the reply")
    return out
