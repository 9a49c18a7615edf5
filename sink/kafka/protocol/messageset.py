"""MessageSet v0/v1 (magic 0 and 1, before KIP-98) <-> RecordBatch v2, for old clients.

Storage and everything downstream see only RecordBatch v2: a Produce v0-2 message
set is converted at ingest (to_batch_v2(decode_message_set(...))), and a Fetch v0-3
answer is down-converted from stored batches (message_set()), as Kafka 3.x does.

Message set entry (big-endian):

    offset q | message_size i | crc I | magic b | attributes b | [timestamp q: magic 1]
    | key_length i | key | value_length i | value          (-1 lengths: null)

crc is CRC-32 (zlib's, not CRC-32C) over magic..end of value. attributes & 7 is the
codec; a compressed message is a wrapper whose value is an inner message set (magic 1:
inner offsets relative, 0..n-1; magic 0: absolute; both are reassigned here anyway).
attributes & 8 (magic 1) is the timestamp type: LogAppendTime when set.

Ingest rules (Kafka's LogValidator where it applies):
- a bad CRC, an unknown magic, a truncated or oversized message, nested compression, or
  a wrapper whose inner messages differ in magic -> CORRUPT_MESSAGE for the partition;
- magic 0 records keep no timestamp (-1); magic 1 keep theirs (CreateTime);
- a LogAppendTime message (or wrapper) makes the whole converted batch LogAppendTime,
  stamped with the broker's clock: the producer cannot know its append time;
- one RecordBatch v2 per message set (one Produce partition), no producer id (v0-2
  have no idempotence), compressed with the first codec the set used (gzip, snappy,
  lz4), else uncompressed; headers are empty.

Down-conversion (Fetch v0-1 -> magic 0, v2-3 -> magic 1, as Kafka chooses): one
uncompressed message per record with its absolute offset (records below the fetch
offset are skipped), the batch's timestamps (LogAppendTime batches: the batch's
max timestamp, attribute bit 3 set) for magic 1; record headers cannot be represented
and are dropped, as Kafka drops them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from crc32c import crc32c

from sink.kafka.protocol.codecs import NONE, ZSTD, CodecError, compress, decompress
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, BatchError

__all__ = [
    "MAX_INFLATED",
    "LegacyRecord",
    "batch_records",
    "decode_message_set",
    "down_convert",
    "encode_message",
    "message_set",
    "to_batch_v2",
]

MAX_INFLATED = 64 << 20
"""Bytes a message set or stored batch may decompress to (larger: MESSAGE_TOO_LARGE at
ingest; a compression bomb never costs more)."""

_ENTRY = struct.Struct(">qi")  # offset, message_size
_MSG_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_LOG_APPEND_TIME = 0x08
_MIN_MESSAGE = {0: 14, 1: 22}  # crc..value length with null key and value
_MAX_RECORDS = 1 << 20  # messages in one set (each costs at least 26 bytes anyway)
_MIN_RECORD = 6  # a v2 record after its length: attributes, 4 one-byte varints, headers

CORRUPT = ErrorCode.corrupt_message


class LegacyRecord(NamedTuple):
    """One record as both formats see it (offset: absolute when down-converting)."""

    offset: int
    timestamp: int  # -1: none (magic 0)
    key: bytes | None
    value: bytes | None


class DecodedSet(NamedTuple):
    records: list[LegacyRecord]
    codec: int  # the first codec the set used (NONE if none)
    log_append_time: bool


# ------------------------------------------------------------------ ingest


def decode_message_set(data: bytes | memoryview, limit: int = MAX_INFLATED) -> DecodedSet:
    """Every record of a Produce v0-2 message set, wrappers unpacked; raises
    BatchError (CORRUPT_MESSAGE, INVALID_RECORD for an empty set, MESSAGE_TOO_LARGE
    for a set inflating past limit)."""
    out: list[LegacyRecord] = []
    state = {"codec": NONE, "lat": False, "inflated": 0}
    _decode_into(bytes(data), out, state, limit, wrapper_magic=None)
    if not out:
        raise BatchError(ErrorCode.invalid_record, "produce request without a message")
    return DecodedSet(out, state["codec"], state["lat"])


def _decode_into(
    data: bytes, out: list[LegacyRecord], state: dict, limit: int, wrapper_magic: int | None
) -> None:
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < _ENTRY.size:
            raise BatchError(CORRUPT, f"truncated message set entry at byte {pos}")
        _offset, size = _ENTRY.unpack_from(data, pos)
        start = pos + _ENTRY.size
        if size < _MIN_MESSAGE[0] or start + size > n:
            raise BatchError(CORRUPT, f"bad message size {size} at byte {pos}")
        msg = data[start : start + size]
        pos = start + size
        crc, magic, attributes = _MSG_HEAD.unpack_from(msg, 0)
        if magic not in (0, 1) or size < _MIN_MESSAGE[magic]:
            raise BatchError(CORRUPT, f"bad message magic {magic} / size {size}")
        if zlib.crc32(msg[4:]) != crc:
            raise BatchError(CORRUPT, "message CRC-32 mismatch")
        if wrapper_magic is not None and magic != wrapper_magic:
            raise BatchError(CORRUPT, "inner message magic differs from its wrapper's")
        p = 6
        timestamp = -1
        if magic == 1:
            (timestamp,) = _Q.unpack_from(msg, p)
            p += 8
            if attributes & _LOG_APPEND_TIME:
                state["lat"] = True
        key, p = _bytes(msg, p)
        value, p = _bytes(msg, p)
        if p != len(msg):
            raise BatchError(CORRUPT, "message size does not match its fields")
        codec = attributes & 7
        if codec == NONE:
            out.append(LegacyRecord(len(out), timestamp, key, value))
            if len(out) > _MAX_RECORDS:
                raise BatchError(ErrorCode.invalid_record, "too many messages in one set")
            continue
        if wrapper_magic is not None:
            raise BatchError(CORRUPT, "nested compression")
        if codec == ZSTD or value is None:
            raise BatchError(CORRUPT, f"bad compressed wrapper (codec {codec})")
        try:
            inner = decompress(codec, value, limit - state["inflated"])
        except CodecError as exc:
            code = ErrorCode.message_too_large if "larger than" in str(exc) else CORRUPT
            raise BatchError(code, str(exc)) from None
        state["inflated"] += len(inner)
        if state["codec"] == NONE:
            state["codec"] = codec
        _decode_into(inner, out, state, limit, wrapper_magic=magic)


def _bytes(msg: bytes, p: int) -> tuple[bytes | None, int]:
    if p + 4 > len(msg):
        raise BatchError(CORRUPT, "truncated message")
    (n,) = _I.unpack_from(msg, p)
    p += 4
    if n < 0:
        return None, p
    if p + n > len(msg):
        raise BatchError(CORRUPT, "message field length past its end")
    return msg[p : p + n], p + n


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _record_v2(delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = [b"\x00", _zigzag(ts_delta), _zigzag(delta)]
    body += [_zigzag(-1)] if key is None else [_zigzag(len(key)), key]
    body += [_zigzag(-1)] if value is None else [_zigzag(len(value)), value]
    body.append(b"\x00")  # no headers
    data = b"".join(body)
    return _zigzag(len(data)) + data


def to_batch_v2(decoded: DecodedSet, now_ms: int) -> bytes:
    """One RecordBatch v2 holding every record of decoded (base offset 0, no producer)."""
    recs = decoded.records
    if decoded.log_append_time:
        base_ts = max_ts = now_ms
        stamps = [now_ms] * len(recs)
    else:
        stamps = [r.timestamp for r in recs]
        base_ts = stamps[0]
        max_ts = max(stamps)
    body = b"".join(
        _record_v2(i, ts - base_ts, r.key, r.value)
        for i, (r, ts) in enumerate(zip(recs, stamps, strict=True))
    )
    attributes = decoded.codec | (_LOG_APPEND_TIME if decoded.log_append_time else 0)
    if decoded.codec != NONE:
        body = compress(decoded.codec, body)
    n = len(recs)
    head = HEADER.pack(
        0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, attributes, n - 1,
        base_ts, max_ts, -1, -1, -1, n,
    )  # fmt: skip
    crc = crc32c(head[21:] + body)
    return head[:17] + struct.pack(">I", crc) + head[21:] + body


# ------------------------------------------------------------------ fetch


def _varint(b: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint (at most 10 bytes) -> (value, next position); IndexError if short."""
    z = 0
    shift = 0
    while True:
        byte = b[p]
        p += 1
        z |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _varbytes(b: bytes, p: int) -> tuple[bytes | None, int]:
    n, p = _varint(b, p)
    if n < 0:
        return None, p
    if p + n > len(b):
        raise ValueError("record field past its end")
    return b[p : p + n], p + n


def batch_records(batch: bytes | memoryview, base_offset: int) -> Iterator[LegacyRecord]:
    """The records of one stored RecordBatch v2 (base_offset: its absolute first
    offset), decompressed (bounded by MAX_INFLATED); timestamps are the batch's max
    timestamp for LogAppendTime batches. Raises ValueError (CodecError included) on
    damaged records: ingest checks a v2 batch's header and CRC-32C but not its records,
    so a producer can store records no decoder reads (the fuzzer does)."""
    batch = bytes(batch)
    (_b, _len, _e, _m, _crc, attributes, _lod, base_ts, max_ts, _pid, _ep, _seq, count) = (
        HEADER.unpack_from(batch, 0)
    )
    body = batch[HEADER_SIZE:]
    codec = attributes & 7
    if codec != NONE:
        body = decompress(codec, body, MAX_INFLATED)
    lat = bool(attributes & _LOG_APPEND_TIME)
    p = 0
    try:
        for _ in range(count):
            length, p = _varint(body, p)
            end = p + length
            if length < _MIN_RECORD or end > len(body):  # every record moves p forward
                raise ValueError(f"bad record length {length}")
            p += 1  # record attributes (unused)
            ts_delta, p = _varint(body, p)
            offset_delta, p = _varint(body, p)
            key, p = _varbytes(body, p)
            value, p = _varbytes(body, p)
            p = end  # headers dropped: a message set cannot carry them
            yield LegacyRecord(
                base_offset + offset_delta, max_ts if lat else base_ts + ts_delta, key, value
            )
    except IndexError:
        raise ValueError("truncated record in a stored batch") from None


def encode_message(magic: int, record: LegacyRecord, log_append_time: bool = False) -> bytes:
    """One uncompressed message set entry (offset, size, message) of magic 0 or 1."""
    parts = [struct.pack(">bb", magic, _LOG_APPEND_TIME if log_append_time and magic else 0)]
    if magic == 1:
        parts.append(_Q.pack(record.timestamp))
    for field in (record.key, record.value):
        parts += [_I.pack(-1)] if field is None else [_I.pack(len(field)), field]
    msg = b"".join(parts)
    crc = zlib.crc32(msg)
    return _ENTRY.pack(record.offset, len(msg) + 4) + struct.pack(">I", crc) + msg


def message_set(
    batches: Iterable[tuple[int, bytes | memoryview]], magic: int, fetch_offset: int
) -> Iterator[bytes]:
    """Down-convert stored batches ((absolute base offset, batch bytes) each) to
    message set entries of magic, from fetch_offset on."""
    for base, batch in batches:
        lat = bool(struct.unpack_from(">h", batch, 21)[0] & _LOG_APPEND_TIME)
        for rec in batch_records(batch, base):
            if rec.offset >= fetch_offset:
                yield encode_message(magic, rec, lat)


def down_convert(
    batches: Iterable[tuple[int, bytes | memoryview]],
    magic: int,
    fetch_offset: int,
    limit: int,
    *,
    first_whole: bool,
) -> list[bytes]:
    """The message set entries a Fetch v0-3 partition answers with, within limit bytes.

    Messages are added while they fit. When not even the first fits: with first_whole
    (Fetch v3, KIP-74, the response's first data) it is sent whole anyway; otherwise
    (v0-2, whose partition_max_bytes is a hard limit) its first `limit` bytes are sent,
    a partial message, as brokers did before down-conversion existed: the client sees a
    message larger than its fetch size and grows it (Sarama) or reports it (Java's
    RecordTooLargeException). Kafka 3.7 answers that case with an empty set, on which
    such a consumer stalls forever. Decoding stops at the first message left out.
    """
    out: list[bytes] = []
    size = 0
    for msg in message_set(batches, magic, fetch_offset):
        if size + len(msg) > limit:
            if not out and (first_whole or limit > 0):
                out.append(msg if first_whole else msg[:limit])
            break
        out.append(msg)
        size += len(msg)
    return out
