"""The timestamps of a RecordBatch v2's records (ListOffsets by timestamp).

Only the record framing is read: each record's length, timestampDelta and
offsetDelta (keys, values and headers are skipped by the length). A compressed
batch is decompressed first (bounded by `limit`; zstd through cramjam, the other
codecs through sink.kafka.protocol.codecs). With LogAppendTime (attributes bit 3)
every record's timestamp is the batch's maxTimestamp, as Kafka's clients read it.

Damaged input raises BatchError (never IndexError or struct.error).
"""

from __future__ import annotations

import struct

import cramjam

from sink.kafka.protocol.codecs import ZSTD, CodecError, decompress
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import HEADER_SIZE, BatchError

LOG_APPEND_TIME = 0x08  # attributes bit 3: the timestamp type
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_FIRST_TS_AT = 27
_MAX_TS_AT = 35
_ATTRIBUTES_AT = 21
_COUNT_AT = 57


def batch_max_timestamp(batch: bytes | memoryview) -> int:
    """The header's maxTimestamp (batch from its first byte)."""
    return _Q.unpack_from(batch, _MAX_TS_AT)[0]


def record_timestamps(batch: bytes | memoryview, limit: int = 64 << 20) -> list[tuple[int, int]]:
    """[(offsetDelta, timestamp)] of every record of one batch (batch from its first byte)."""
    mv = memoryview(batch)
    if len(mv) < HEADER_SIZE:
        raise BatchError(ErrorCode.corrupt_message, "batch shorter than its header")
    attributes = _H.unpack_from(mv, _ATTRIBUTES_AT)[0]
    (first_ts,) = _Q.unpack_from(mv, _FIRST_TS_AT)
    (max_ts,) = _Q.unpack_from(mv, _MAX_TS_AT)
    (count,) = _I.unpack_from(mv, _COUNT_AT)
    body = mv[HEADER_SIZE:]
    codec = attributes & 7
    if codec:
        try:
            if codec == ZSTD:
                raw = bytes(cramjam.zstd.decompress(bytes(body)))
                if len(raw) > limit:
                    raise CodecError(f"zstd payload larger than {limit} bytes")
            else:
                raw = decompress(codec, body, limit)
        except CodecError as exc:
            raise BatchError(ErrorCode.corrupt_message, str(exc)) from None
        except Exception as exc:  # cramjam's DecompressionError
            raise BatchError(ErrorCode.corrupt_message, f"zstd: {exc}") from None
        body = memoryview(raw)
    out = _walk(body, count)
    if attributes & LOG_APPEND_TIME:
        return [(delta, max_ts) for delta, _ in out]
    return [(delta, first_ts + ts_delta) for delta, ts_delta in out]


def _walk(body: memoryview, count: int) -> list[tuple[int, int]]:
    """(offsetDelta, timestampDelta) of count records framed in body."""
    out = []
    pos, end = 0, len(body)
    for _ in range(count):
        length, pos = _varint(body, pos, end)
        rec_end = pos + length
        if length < 3 or rec_end > end:
            raise BatchError(ErrorCode.corrupt_message, "record length outside the batch")
        pos += 1  # attributes
        ts_delta, pos = _varint(body, pos, rec_end)
        offset_delta, pos = _varint(body, pos, rec_end)
        out.append((offset_delta, ts_delta))
        pos = rec_end
    return out


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (up to 10 bytes) at pos -> (value, next position)."""
    shift = z = 0
    while True:
        if pos >= end or shift > 63:
            raise BatchError(ErrorCode.corrupt_message, "truncated varint in a record")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
