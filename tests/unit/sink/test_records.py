import struct

import pytest

from sink.kafka.protocol.records import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    BatchError,
    parse_batches,
    patch,
)
from tests.unit.sink.batches import make_batch


def test_valid_batches_parsed_without_decoding_records():
    a = make_batch([b"a", b"bb"], producer_id=7, epoch=1, base_sequence=10)
    b = make_batch([b"c"])
    hs = parse_batches(a + b)
    assert [(h.start, h.size, h.record_count) for h in hs] == [(0, len(a), 2), (len(a), len(b), 1)]
    assert (hs[0].producer_id, hs[0].producer_epoch, hs[0].base_sequence, hs[0].last_sequence) == (
        7,
        1,
        10,
        11,
    )


def test_last_sequence_wraps_at_2_31():
    h = parse_batches(make_batch([b"x"] * 3, producer_id=1, epoch=0, base_sequence=2**31 - 2))[0]
    assert h.last_sequence == 0


def _mutate(batch: bytes, pos: int, fmt: str, value: int, fix_crc: bool) -> bytes:
    from crc32c import crc32c

    b = bytearray(batch)
    struct.pack_into(fmt, b, pos, value)
    if fix_crc:
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


@pytest.mark.parametrize(
    "name, mutate, code",
    [
        ("crc mismatch", lambda b: b[:-1] + bytes([b[-1] ^ 1]), CORRUPT_MESSAGE),
        ("bad magic", lambda b: _mutate(b, 16, ">b", 1, False), CORRUPT_MESSAGE),
        (
            "batchLength too large",
            lambda b: _mutate(b, 8, ">i", len(b) + 100, False),
            CORRUPT_MESSAGE,
        ),
        ("batchLength too small", lambda b: _mutate(b, 8, ">i", 10, False), CORRUPT_MESSAGE),
        ("truncated header", lambda b: b[:40], CORRUPT_MESSAGE),
        ("recordCount 0", lambda b: _mutate(b, 57, ">i", 0, True), INVALID_RECORD),
        ("lastOffsetDelta mismatch", lambda b: _mutate(b, 23, ">i", 5, True), INVALID_RECORD),
        ("transactional", lambda b: _mutate(b, 21, ">h", 0x10, True), INVALID_RECORD),
        ("empty", lambda b: b"", INVALID_RECORD),
    ],
)
def test_malformed_batches(name, mutate, code):
    with pytest.raises(BatchError) as ei:
        parse_batches(mutate(make_batch([b"a", b"b"])))
    assert ei.value.error_code == code, name


def test_patch_keeps_crc_valid():
    b = make_batch([b"a", b"b"])
    p = patch(b, 12345, 7)
    assert struct.unpack_from(">q", p, 0)[0] == 12345
    assert struct.unpack_from(">i", p, 12)[0] == 7
    parse_batches(p)  # CRC still valid
    assert p[16:] == b[16:]


def _count(batch: bytes, n: int) -> bytes:
    """batch claiming n records (lastOffsetDelta agreeing), CRC recomputed."""
    return _mutate(_mutate(batch, 57, ">i", n, False), 23, ">i", n - 1, True)


def test_record_count_bounded_by_the_bytes_of_uncompressed_records():
    batch = make_batch([b""] * 4)  # 4 records of 7 bytes: exactly the minimum
    assert parse_batches(batch)[0].record_count == 4
    for n in (5, 1 << 20, 2**31 - 1):
        with pytest.raises(BatchError, match="cannot fit") as ei:
            parse_batches(_count(batch, n))
        assert ei.value.error_code == INVALID_RECORD
    # a compressed batch stays opaque: its count is not checked against its size
    gz = _mutate(_count(batch, 1000), 21, ">h", 1, True)
    assert parse_batches(gz)[0].record_count == 1000
