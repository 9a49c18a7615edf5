"""MessageSet v0/v1 <-> RecordBatch v2 (sink.kafka.protocol.messageset) and the bounded
codecs: golden bytes written from the protocol's layout, kafka-python's legacy record
code as an independent encoder/decoder, and damaged input."""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import zlib

import cramjam
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from sink.kafka.protocol.codecs import GZIP, LZ4, SNAPPY, CodecError, compress, decompress, xxh32
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.messageset import (
    batch_records,
    decode_message_set,
    encode_message,
    message_set,
    to_batch_v2,
)
from sink.kafka.protocol.records import BatchError, parse_batches
from tests.unit.sink.old_client_sets import SETS as OLD_CLIENT_SETS

SEED = random.randrange(1 << 30)

# offset 5 | size 15 | crc 0x51df3a32 | magic 0 | attributes 0 | key null | value "a"
GOLDEN_V0 = bytes.fromhex("00000000000000050000000f51df3a320000ffffffff0000000161")
# offset 0 | size 23 | crc 0x83e991c6 | magic 1 | attributes 0 | timestamp 1700000000000
# | key "k" | value null
GOLDEN_V1 = bytes.fromhex("00000000000000000000001783e991c601000000018bcfe56800000000016bffffffff")


def _entry(magic: int, attributes: int, value: bytes, ts: int = 0, offset: int = 0) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic:
        body += struct.pack(">q", ts)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def _records(data: bytes) -> list[tuple]:
    """kafka-python's reading of a message set."""
    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        for r in mr.next_batch():
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


def test_golden_messages_decode_and_encode() -> None:
    d = decode_message_set(GOLDEN_V0)
    assert [tuple(r) for r in d.records] == [(0, -1, None, b"a")]
    d = decode_message_set(GOLDEN_V1)
    assert [tuple(r) for r in d.records] == [(0, 1_700_000_000_000, b"k", None)]
    assert encode_message(0, d.records[0]._replace(offset=5, key=None, value=b"a")) == GOLDEN_V0
    assert encode_message(1, d.records[0]) == GOLDEN_V1


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1])
def test_kafka_python_sets_round_trip(magic: int, codec: int) -> None:
    """Built by kafka-python (gzip: the codec it has without extra packages), converted to
    a v2 batch, down-converted, read back by kafka-python."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    sent = [
        (b"k0", b"v0", 1_700_000_000_123),
        (None, None, 1_700_000_000_456),
        (b"", b"x" * 3000, 1_699_999_999_000),
    ]
    for i, (k, v, ts) in enumerate(sent):
        b.append(i, timestamp=ts if magic else None, key=k, value=v)
    decoded = decode_message_set(bytes(b.build()))
    assert decoded.codec == codec
    v2 = to_batch_v2(decoded, now_ms=1)
    (hdr,) = parse_batches(v2)  # a valid v2 batch: CRC-32C, counts
    assert (hdr.record_count, hdr.compression, hdr.producer_id) == (3, codec, -1)
    got = _records(b"".join(message_set([(100, v2)], magic, 100)))
    want_ts = [ts if magic else None for _, _, ts in sent]
    assert got == [(100 + i, want_ts[i], k, v) for i, (k, v, _) in enumerate(sent)]
    # records below the fetch offset are skipped
    assert [r[0] for r in _records(b"".join(message_set([(100, v2)], magic, 102)))] == [102]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_compressed_wrappers_with_relative_and_absolute_inner_offsets(codec: int) -> None:
    inner1 = b"".join(_entry(1, 0, b"v%d" % i, ts=1000 + i, offset=i) for i in range(3))
    inner0 = b"".join(_entry(0, 0, b"v%d" % i, offset=40 + i) for i in range(3))
    for magic, inner in ((1, inner1), (0, inner0)):
        wrapper = _entry(magic, codec, compress(codec, inner), ts=1002, offset=2)
        d = decode_message_set(wrapper + _entry(magic, 0, b"plain", ts=7))
        assert [r.value for r in d.records] == [b"v0", b"v1", b"v2", b"plain"]
        assert d.codec == codec
        ts = [r.timestamp for r in d.records]
        assert ts == ([1000, 1001, 1002, 7] if magic else [-1] * 4)
        v2 = to_batch_v2(d, now_ms=1)
        assert [r.value for r in batch_records(v2, 0)] == [b"v0", b"v1", b"v2", b"plain"]


def test_log_append_time_flag_stamps_the_batch() -> None:
    d = decode_message_set(_entry(1, 0x08, b"v", ts=5) + _entry(1, 0, b"w", ts=6))
    assert d.log_append_time
    v2 = to_batch_v2(d, now_ms=1_234)
    (hdr,) = parse_batches(v2)
    assert hdr.attributes & 0x08
    assert [r.timestamp for r in batch_records(v2, 0)] == [1_234, 1_234]
    got = b"".join(message_set([(0, v2)], 1, 0))
    assert (
        got[17] & 0x08
    )  # (offset, size, crc, magic, attributes) the down-converted message says LogAppendTime too


@pytest.mark.parametrize(
    "data, code",
    [
        (GOLDEN_V0[:-1], ErrorCode.corrupt_message),  # truncated
        (GOLDEN_V0[:12] + b"\x00\x00\x00\x00" + GOLDEN_V0[16:], ErrorCode.corrupt_message),  # crc
        (GOLDEN_V0[:16] + b"\x02" + GOLDEN_V0[17:], ErrorCode.corrupt_message),  # magic 2
        (GOLDEN_V0[:8] + b"\x7f\xff\xff\xff" + GOLDEN_V0[12:], ErrorCode.corrupt_message),  # size
        (b"", ErrorCode.invalid_record),  # nothing to append
        (_entry(1, GZIP, b"not gzip"), ErrorCode.corrupt_message),
        (_entry(1, 4, b"zstd"), ErrorCode.corrupt_message),  # zstd has no message set
        (
            _entry(1, GZIP, compress(GZIP, _entry(1, GZIP, compress(GZIP, GOLDEN_V1)))),
            ErrorCode.corrupt_message,  # nested compression
        ),
        (_entry(1, GZIP, compress(GZIP, GOLDEN_V0)), ErrorCode.corrupt_message),  # magic mix
        (_entry(1, GZIP, gzip.compress(b"\x00" * (65 << 20))), ErrorCode.message_too_large),
    ],
)
def test_damaged_sets_are_refused_with_kafka_codes(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(BatchError) as exc:
        decode_message_set(data)
    assert exc.value.error_code == code


def test_random_damage_never_escapes_as_anything_but_batch_error() -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    base = [GOLDEN_V0 + GOLDEN_V1, _entry(1, SNAPPY, compress(SNAPPY, GOLDEN_V1 * 3))]
    base.append(_entry(1, LZ4, compress(LZ4, GOLDEN_V1 * 3)))
    for _ in range(3000):
        data = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        with contextlib.suppress(BatchError):
            decode_message_set(bytes(data))


def test_codecs_bound_their_output_and_read_foreign_framings() -> None:
    data = b"raftsink " * 50_000
    for codec in (GZIP, SNAPPY, LZ4):
        assert decompress(codec, compress(codec, data), len(data)) == data
        with pytest.raises(CodecError):
            decompress(codec, compress(codec, data), len(data) - 1)
    # xerial (snappy-java) framing: magic, version, compatible version, then chunks
    chunks = [bytes(cramjam.snappy.compress_raw(data[i : i + 32768])) for i in (0, 32768)]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    xerial += b"".join(struct.pack(">I", len(c)) + c for c in chunks)
    assert decompress(SNAPPY, xerial, len(data)) == data[:65536]
    # cramjam's own frames (linked blocks, checksums) decode too
    assert decompress(LZ4, bytes(cramjam.lz4.compress(data)), len(data)) == data
    # magic-0 producers (KAFKA-3160) wrote a wrong header checksum: still read
    frame = bytearray(compress(LZ4, data))
    frame[6] ^= 0x5A
    assert decompress(LZ4, bytes(frame), len(data)) == data
    # our frames carry the checksum LZ4's reference decoder checks
    assert bytes(cramjam.lz4.decompress(compress(LZ4, data))) == data
    assert xxh32(b"") == 0x02CC5D05  # the reference value of XXH32("", 0)


@pytest.mark.parametrize("who", sorted({who for who, _t, _h in OLD_CLIENT_SETS}))
def test_message_sets_real_old_clients_sent(who: str) -> None:
    """Recorded from Sarama 1.22 (magic 0 gzip/snappy; magic 1 gzip/snappy/lz4 with relative
    inner offsets) and librdkafka 2.16 at fallback 0.9.0 (magic 0; lz4 with KAFKA-3160's
    header checksum): every set converts to a valid v2 batch holding what was sent."""
    sets = [(t, bytes.fromhex(h)) for w, t, h in OLD_CLIENT_SETS if w == who]
    topic = sets[0][0]
    want = {(f"k{i}".encode(), f"{topic}-v{i}".encode()) for i in range(5)}
    got = set()
    for _t, data in sets:
        decoded = decode_message_set(data)
        assert decoded.codec == {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4}[who.split()[-1]]
        v2 = to_batch_v2(decoded, now_ms=1)
        (hdr,) = parse_batches(v2)
        recs = list(batch_records(v2, 0))
        assert hdr.record_count == len(recs) == len(decoded.records)
        got |= {(r.key, r.value) for r in recs}
    assert got == want
