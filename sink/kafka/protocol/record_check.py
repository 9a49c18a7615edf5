"""The records inside a RecordBatch v2, checked at ingest as Kafka's broker checks them.

`records.parse_batches` proves a batch's header and CRC-32C; the CRC only proves the
bytes are the ones the producer sent, not that they are records. A producer (or a
fuzzer) can send a CRC-valid batch whose records no decoder reads; stored, it would
be served to every consumer and stop each at that offset. Kafka decodes every record
of every batch it appends (LogValidator, DefaultRecord.readFrom) and answers
INVALID_RECORD / CORRUPT_MESSAGE; so does this module, for compressed batches after
decompression (bounded, like every inflate here).

Record layout (after the batch header; varints are zigzag):

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | headerCount x (keyLength varint | key | valueLength varint | value)

Invariants a stored batch then has (readers rely on them):
- exactly recordCount records, each ending where its length says, nothing after the last;
- offsetDelta of the i-th record is i (offsets inside a batch are dense, so a record's
  offset is baseOffset + its position and never passes the batch's last offset);
- key/value lengths are -1 (null) or fit in the record; header keys are not null.
"""

from __future__ import annotations

from sink.kafka.protocol.codecs import CodecError, decompress
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import HEADER_SIZE, BatchError, BatchHeader

try:  # built at install (setup.py); where no C compiler was, the Python walk serves alone
    from sink.kafka.protocol._record_walk import walk as _native_walk
except ImportError:
    _native_walk = None

NATIVE_AVAILABLE = _native_walk is not None
"""Whether the compiled walk (_record_walk.c) is installed."""

MAX_INFLATED_BATCH = 64 << 20
"""A compressed batch inflates to at most this (bytes), as every decompression here."""

_INVALID = ErrorCode.invalid_record


def check_batch_records(records: bytes | memoryview, header: BatchHeader) -> None:
    """Decode every record of one batch of a Produce request's records blob.

    Raises BatchError(INVALID_RECORD) for a record that does not decode, and
    BatchError(CORRUPT_MESSAGE) for a compressed body that does not inflate.
    An uncompressed batch is walked where it lies (no copy of its bytes).
    """
    start, end = header.start + HEADER_SIZE, header.start + header.size
    body: bytes | memoryview = records
    if header.compression:
        try:
            body = decompress(
                header.compression, memoryview(records)[start:end], MAX_INFLATED_BATCH
            )
        except CodecError as exc:
            raise BatchError(
                ErrorCode.corrupt_message, f"batch does not decompress: {exc}"
            ) from None
        start, end = 0, len(body)
    if _native_walk is not None and _native_walk(body, start, end, header.record_count) == end:
        return  # the compiled walk agrees with _walk on success; _walk names every error
    try:
        last = _walk(body, start, end, header.record_count)
    except IndexError:
        raise BatchError(_INVALID, "record truncated at the end of its batch") from None
    if last != end:
        raise BatchError(_INVALID, f"{end - last} bytes after the last of the batch's records")


def check_records(records: bytes | memoryview, headers: list[BatchHeader]) -> None:
    """check_batch_records for every batch parse_batches found in one records blob."""
    for h in headers:
        check_batch_records(records, h)


def _walk(b: bytes | memoryview, p: int, n: int, count: int) -> int:
    """Decode `count` records from b[p:n]; returns the position after the last one.
    IndexError when b ends inside a record; a record running past n is INVALID_RECORD.

    The hot loop of every Produce: a record's fields are mostly one-byte varints
    (attributes, deltas, a null key, no headers) and a two-byte length, so those
    cases are decoded inline; anything else goes through _varint / _skip_bytes,
    which check the same things."""
    for i in range(count):
        byte = b[p]
        if byte < 0x80:
            length, p = (byte >> 1) ^ -(byte & 1), p + 1
        else:
            length, p = _varint(b, p)
        end = p + length
        if length < 6 or end > n:  # attributes + 5 one-byte varints at least
            raise BatchError(_INVALID, f"record {i}: bad length {length}")
        p += 1  # attributes: unused in v2
        byte = b[p]  # timestampDelta: any value
        if byte < 0x80:
            p += 1
        else:
            _ts_delta, p = _varint(b, p)
        byte = b[p]  # offsetDelta: must be i
        if byte < 0x80:
            offset_delta, p = (byte >> 1) ^ -(byte & 1), p + 1
        else:
            offset_delta, p = _varint(b, p)
        if offset_delta != i:
            raise BatchError(_INVALID, f"record {i}: offsetDelta {offset_delta}, expected {i}")
        if b[p] == 1:  # a null key (zigzag -1), the usual case
            p += 1
        else:
            p = _skip_bytes(b, p, end, f"record {i} key", nullable=True)
        p = _skip_bytes(b, p, end, f"record {i} value", nullable=True)
        if b[p] == 0:  # no headers, the usual case
            p += 1
        else:
            headers, p = _varint(b, p)
            if headers < 0 or headers > end - p:
                raise BatchError(_INVALID, f"record {i}: bad header count {headers}")
            for _ in range(headers):
                p = _skip_bytes(b, p, end, f"record {i} header key", nullable=False)
                p = _skip_bytes(b, p, end, f"record {i} header value", nullable=True)
        if p != end:
            raise BatchError(_INVALID, f"record {i}: length {length} but {length + p - end} read")
    return p


def _skip_bytes(b: bytes, p: int, end: int, what: str, *, nullable: bool) -> int:
    size, p = _varint(b, p)
    if size < 0:
        if size == -1 and nullable:
            return p
        raise BatchError(_INVALID, f"{what}: bad length {size}")
    if p + size > end:
        raise BatchError(_INVALID, f"{what}: {size} bytes run past the record")
    return p + size


def _varint(b: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes -> (value, next position)."""
    byte = b[p]
    if byte < 0x80:  # the common one-byte case
        return (byte >> 1) ^ -(byte & 1), p + 1
    z = byte & 0x7F
    shift = 7
    p += 1
    while True:
        byte = b[p]
        p += 1
        z |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (z >> 1) ^ -(z & 1), p
        shift += 7
        if shift > 63:
            raise BatchError(_INVALID, "varint longer than 10 bytes")
