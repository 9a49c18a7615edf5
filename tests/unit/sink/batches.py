"""Build RecordBatch v2 bytes for tests (valid CRC; records compressed when asked)."""

from __future__ import annotations

import struct

from crc32c import crc32c

from sink.kafka.protocol.codecs import compress
from sink.kafka.protocol.records import HEADER


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def make_batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    base_offset: int = 0,
    leader_epoch: int = -1,
    timestamps: list[int] | None = None,
    compression: int = 0,
) -> bytes:
    """timestamps: each record's CreateTime (firstTimestamp = the first, maxTimestamp =
    the largest, as clients write them); compression: a codec number (1 gzip ... 4 zstd):
    the records are compressed with it and it is set in attributes."""
    recs = b""
    first_ts, max_ts = 1000, 1000 + len(values)
    if timestamps is not None:
        first_ts, max_ts = timestamps[0], max(timestamps)
    for i, v in enumerate(values):
        delta = 0 if timestamps is None else timestamps[i] - first_ts
        body = (
            b"\x00" + _varint(delta) + _varint(i) + _varint(-1) + _varint(len(v)) + v + _varint(0)
        )
        recs += _varint(len(body)) + body
    n = len(values)
    if compression:
        recs = compress(compression, recs)
        attributes = (attributes & ~7) | compression
    header = HEADER.pack(
        base_offset,
        49 + len(recs),
        leader_epoch,
        2,
        0,
        attributes,
        n - 1,
        first_ts,
        max_ts,
        producer_id,
        epoch,
        base_sequence,
        n,
    )
    batch = bytearray(header + recs)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)
