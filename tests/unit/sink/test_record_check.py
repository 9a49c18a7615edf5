"""Ingest decodes every record of a batch (Kafka's LogValidator): a CRC-valid batch
whose records do not decode is refused with INVALID_RECORD and never stored."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from sink.kafka.protocol.codecs import GZIP, LZ4, SNAPPY, ZSTD, compress
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.record_check import MAX_INFLATED_BATCH, check_records
from sink.kafka.protocol.records import HEADER, BatchError, parse_batches
from tests.unit.sink.batches import _varint, make_batch


def _record(i: int, key: bytes | None, value: bytes | None, headers=()) -> bytes:
    def field(b: bytes | None) -> bytes:
        return _varint(-1) if b is None else _varint(len(b)) + b

    body = b"\x00" + _varint(5) + _varint(i) + field(key) + field(value) + _varint(len(headers))
    for hk, hv in headers:
        body += field(hk) + field(hv)
    return _varint(len(body)) + body


def _batch(recs: bytes, count: int, codec: int = 0) -> bytes:
    """A batch with a valid header and CRC around arbitrary record bytes."""
    if codec:
        recs = compress(codec, recs)
    header = HEADER.pack(0, 49 + len(recs), -1, 2, 0, codec, count - 1, 1, 2, -1, -1, -1, count)
    b = bytearray(header + recs)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def _check(batch: bytes) -> None:
    check_records(batch, parse_batches(batch))


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4, ZSTD])
def test_valid_batches_pass(codec):
    recs = b"".join(
        [
            _record(0, b"k", b"v" * 300),
            _record(1, None, None),
            _record(2, b"", b"x", headers=[(b"h", b"1"), (b"h2", None)]),
        ]
    )
    _check(_batch(recs, 3, codec))
    _check(make_batch([b"a", b"b" * 1000], compression=codec))


BAD = {
    "truncated last record": (_record(0, b"k", b"v") + _record(1, b"k", b"v")[:-2], 2),
    "fewer records than the count": (_record(0, b"k", b"v"), 2),
    "bytes after the last record": (_record(0, b"k", b"v") + b"\x00\x00", 1),
    "offsetDelta not dense": (_record(0, b"k", b"v") + _record(5, b"k", b"v"), 2),
    "key longer than its record": (b"\x0e\x00\x0a\x00\x7e" + b"k" * 3 + b"\x00\x00" * 2, 1),
    "null header key": (_record(0, b"k", b"v", headers=[(None, b"x")]), 1),
    "negative header count": (b"\x0c\x00\x0a\x00\x00\x00\x01" + b"\x00" * 5, 1),
    "record length below the minimum": (b"\x02\x00" + _record(0, b"k", b"v"), 1),
    "value length -2": (b"\x0c\x00\x0a\x00\x02k\x03\x00\x00\x00\x00\x00", 1),
    "varint of 11 bytes": (b"\x0c\x00" + b"\xff" * 11, 1),
}


@pytest.mark.parametrize("codec", [0, GZIP, ZSTD])
@pytest.mark.parametrize("name", sorted(BAD))
def test_records_that_do_not_decode_are_invalid(name, codec):
    recs, count = BAD[name]
    with pytest.raises(BatchError) as e:
        _check(_batch(recs, count, codec))
    assert e.value.error_code == ErrorCode.invalid_record, name


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_damaged_compressed_body_is_corrupt_message(codec):
    good = compress(codec, _record(0, b"k", b"v" * 100))
    damaged = good[: len(good) // 2] + bytes(len(good) - len(good) // 2)
    header = HEADER.pack(0, 49 + len(damaged), -1, 2, 0, codec, 0, 1, 2, -1, -1, -1, 1)
    b = bytearray(header + damaged)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with pytest.raises(BatchError) as e:
        _check(bytes(b))
    assert e.value.error_code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)


def test_zstd_bomb_is_bounded():
    """A zstd body that inflates past the bound is refused without inflating it whole."""
    big = compress(ZSTD, bytes(MAX_INFLATED_BATCH + 1024))
    assert len(big) < 1 << 20
    header = HEADER.pack(0, 49 + len(big), -1, 2, 0, ZSTD, 0, 1, 2, -1, -1, -1, 1)
    b = bytearray(header + big)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with pytest.raises(BatchError) as e:
        _check(bytes(b))
    assert e.value.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_batch_is_invalid_when_a_valid_batch_follows_it(name):
    """Uncompressed batches are walked in place in the request's records blob: a
    record that runs past its own batch must not be read out of the next batch."""
    recs, count = BAD[name]
    follower = make_batch([b"x" * 100, b"y" * 100])
    with pytest.raises(BatchError) as e:
        _check(_batch(recs, count) + follower)
    assert e.value.error_code == ErrorCode.invalid_record, name
    _check(follower + follower)  # and valid batches after each other pass


def _reference_walk(b: bytes, p: int, n: int, count: int) -> int:
    """The record layout decoded field by field through the generic helpers only, with
    none of _walk's inline one-byte cases: the oracle _walk must agree with."""
    from sink.kafka.protocol.record_check import _skip_bytes, _varint

    for i in range(count):
        length, p = _varint(b, p)
        end = p + length
        if length < 6 or end > n:
            raise BatchError(ErrorCode.invalid_record, f"record {i}: bad length {length}")
        p += 1
        _ts, p = _varint(b, p)
        offset_delta, p = _varint(b, p)
        if offset_delta != i:
            raise BatchError(ErrorCode.invalid_record, f"record {i}: offsetDelta")
        p = _skip_bytes(b, p, end, f"record {i} key", nullable=True)
        p = _skip_bytes(b, p, end, f"record {i} value", nullable=True)
        headers, p = _varint(b, p)
        if headers < 0 or headers > end - p:
            raise BatchError(ErrorCode.invalid_record, f"record {i}: bad header count")
        for _ in range(headers):
            p = _skip_bytes(b, p, end, f"record {i} header key", nullable=False)
            p = _skip_bytes(b, p, end, f"record {i} header value", nullable=True)
        if p != end:
            raise BatchError(ErrorCode.invalid_record, f"record {i}: length {length}")
    return p


def _outcome(walk, b: bytes, count: int) -> object:
    try:
        return walk(b, 0, len(b), count)
    except BatchError as e:
        return ("invalid", e.error_code)
    except IndexError:
        return ("truncated",)


def test_walk_agrees_with_the_field_by_field_decoder_on_random_records():
    """Seeded: random records (one- to three-byte lengths, null and empty keys and
    values, headers, offsets past 63, large timestamp deltas), whole and with one
    byte changed, truncated or extended: the inline cases accept exactly what the
    generic decoder accepts, stop at the same position, and refuse the rest alike."""
    import os
    import random

    from sink.kafka.protocol.record_check import _walk

    seed = int(os.environ.get("RAFTSINK_WALK_SEED", random.randrange(1 << 32)))
    print(f"seed {seed} (RAFTSINK_WALK_SEED to repeat)")
    rnd = random.Random(seed)

    def blob_or_none() -> bytes | None:
        r = rnd.random()
        if r < 0.15:
            return None
        return bytes(rnd.choice((0, 1, 5, 63, 64, 100, 300, 1024, 9000)) if r < 0.9 else 0)

    def field(b: bytes | None) -> bytes:
        return _varint(-1) if b is None else _varint(len(b)) + b

    checked = accepted = 0
    for _ in range(400):
        count = rnd.choice((1, 2, 5, 70, 130))
        recs = bytearray()
        for i in range(count):
            # a large timestamp delta now and then (a multi-byte varint)
            ts = rnd.randrange(1 << 40) if rnd.random() < 0.1 else rnd.randrange(64)
            headers = [] if rnd.random() < 0.8 else [(b"h", blob_or_none())]
            body = b"\x00" + _varint(ts) + _varint(i) + field(blob_or_none())
            body += field(blob_or_none()) + _varint(len(headers))
            for hk, hv in headers:
                body += field(hk) + field(hv)
            recs += _varint(len(body)) + body
        whole = bytes(recs)
        variants = [whole, whole[:-1], whole + b"\x00"]
        for _ in range(6):
            damaged = bytearray(whole)
            damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
            variants.append(bytes(damaged))
        for v in variants:
            for c in (count, count - 1, count + 1):
                got = _outcome(_walk, v, c)
                assert got == _outcome(_reference_walk, v, c), (seed, c, v[:64])
                checked += 1
                accepted += isinstance(got, int)
    assert checked == 400 * 9 * 3
    assert accepted >= 400  # every whole blob, with its own count, is valid
