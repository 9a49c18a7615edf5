"""RecordBatch v2: header parsing, CRC-32C validation and the served-header patch.

Only the 61-byte header is decoded and the CRC checked; records stay opaque
(compressed or not) on the ingest path. Layout (big-endian):

    baseOffset q | batchLength i | partitionLeaderEpoch i | magic b | crc I |
    attributes h | lastOffsetDelta i | baseTimestamp q | maxTimestamp q |
    producerId q | producerEpoch h | baseSequence i | recordCount i

The CRC covers bytes [21, 12 + batchLength); baseOffset (0-8) and
partitionLeaderEpoch (12-16) are outside it, so the broker rewrites them when
serving without recomputing the CRC.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from sink.kafka.protocol.errors import ErrorCode

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
_CRC_START = 21
_MAX_SEQ = 1 << 31
# The smallest record on the wire: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and header count, one byte each.
MIN_RECORD_SIZE = 7

ZSTD = 4  # attributes & 7 of a zstd-compressed batch
ZSTD_MIN_PRODUCE = 7  # KIP-110: the first Produce version that may carry zstd batches
ZSTD_MIN_FETCH = 10  # KIP-110: the first Fetch version that may answer with zstd batches
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21  # byte position of attributes in a batch

CORRUPT_MESSAGE = ErrorCode.corrupt_message
INVALID_RECORD = ErrorCode.invalid_record


class BatchError(ValueError):
    """A batch failed validation; error_code is the Kafka error to answer with."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class BatchHeader(NamedTuple):
    """The fields of one validated batch that the broker needs."""

    start: int  # position in the records blob
    size: int  # whole batch size in bytes (LOG_OVERHEAD + batchLength)
    attributes: int
    last_offset_delta: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping at 2^31 as Kafka does."""
        return (self.base_sequence + self.last_offset_delta) % _MAX_SEQ

    @property
    def compression(self) -> int:
        return self.attributes & 7


def parse_batches(records: bytes | memoryview, *, max_batches: int = 1 << 16) -> list[BatchHeader]:
    """Validate every RecordBatch v2 in a Produce request's records blob.

    Raises BatchError(CORRUPT_MESSAGE) for framing or CRC damage and
    BatchError(INVALID_RECORD) for inconsistent counts. An empty blob is invalid
    (a produce with no batch has nothing to append).
    """
    n = len(records)
    if n == 0:
        raise BatchError(INVALID_RECORD, "produce request without a record batch")
    out: list[BatchHeader] = []
    pos = 0
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise BatchError(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
        (
            _base_offset,
            batch_length,
            _leader_epoch,
            magic,
            crc,
            attributes,
            last_offset_delta,
            _base_ts,
            _max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        ) = HEADER.unpack_from(records, pos)
        if magic != 2:
            raise BatchError(CORRUPT_MESSAGE, f"unsupported record batch magic {magic}")
        size = LOG_OVERHEAD + batch_length
        if batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > n:
            raise BatchError(CORRUPT_MESSAGE, f"bad batchLength {batch_length} at byte {pos}")
        if crc32c(memoryview(records)[pos + _CRC_START : pos + size]) != crc:
            raise BatchError(CORRUPT_MESSAGE, "record batch CRC-32C mismatch")
        if attributes & 0x30:  # transactional (0x10) / control (0x20) batches
            raise BatchError(INVALID_RECORD, "transactional and control batches are not supported")
        if attributes & 7 == 0 and record_count * MIN_RECORD_SIZE > size - HEADER_SIZE:
            # Uncompressed records are counted against the bytes they occupy (a
            # compressed batch stays opaque: its count is bounded by lastOffsetDelta).
            raise BatchError(
                INVALID_RECORD,
                f"recordCount {record_count} cannot fit in {size - HEADER_SIZE} bytes of records",
            )
        if record_count <= 0 or last_offset_delta != record_count - 1:
            raise BatchError(
                INVALID_RECORD,
                f"recordCount {record_count} does not match lastOffsetDelta {last_offset_delta}",
            )
        if producer_id >= 0 and (base_sequence < 0 or producer_epoch < 0):
            raise BatchError(INVALID_RECORD, "idempotent batch with a negative sequence or epoch")
        out.append(
            BatchHeader(
                pos,
                size,
                attributes,
                last_offset_delta,
                producer_id,
                producer_epoch,
                base_sequence,
                record_count,
            )
        )
        if len(out) > max_batches:
            raise BatchError(INVALID_RECORD, "too many batches in one request")
        pos += size
    return out


_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def patched_prefix(batch: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of batch with baseOffset and partitionLeaderEpoch rewritten."""
    return _Q.pack(base_offset) + bytes(batch[8:12]) + _I.pack(leader_epoch)


def patch(batch: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """A copy of batch as served: baseOffset/partitionLeaderEpoch set, CRC untouched."""
    return patched_prefix(batch, base_offset, leader_epoch) + bytes(batch[16:])


def compression_of(batch_from_16: bytes | memoryview) -> int:
    """The codec (attributes & 7) of a stored batch, given its bytes from position 16 on
    (the part a Fetch serves unpatched)."""
    return _ATTRIBUTES.unpack_from(batch_from_16, _ATTRIBUTES_AT - 16)[0] & 7


def record_count(batch: bytes | memoryview) -> int:
    return _I.unpack_from(batch, 57)[0]
