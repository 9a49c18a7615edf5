"""The compiled decoder (_v2records.c) against aiokafka's: same rows, and bad bytes never crash.

Batches are built with aiokafka's producer-side builder and then edited where a producer
could differ (offset gaps from compaction, LogAppendTime, every codec). Random tests print
their seed.
"""

import random
import struct

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from connectors.spark import decode
from connectors.spark.decode import RangeDecoder, decode_range
from tests.unit.connectors.fakes import CODECS, Rec, build_batch

T0 = 1_700_000_000_123
HEADER = 61


def test_native_decoder_is_built():
    # The install (pip install -e .) compiles it; a missing compiler falls back silently in a
    # user's image, but not here: the tests below would otherwise compare the fallback with
    # itself.
    assert decode.NATIVE_AVAILABLE
    assert RangeDecoder("t", 0, 0, 1).native


def random_records(rng: random.Random, n: int, headers: bool) -> list[Rec]:
    out = []
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 300]))
        hs = []
        if headers and rng.random() < 0.5:
            hs = [
                (f"h{j}-\u00e9", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 5)))
                for j in range(rng.randint(1, 3))
            ]
        out.append(Rec(key, value, T0 + rng.randint(-5000, 5000), hs))
    return out


def gappy_batch(base: int, recs: list[Rec], deltas: list[int], codec: int = 0) -> bytes:
    """A batch whose records have the given offset deltas (compacted upstream data)."""
    b = DefaultRecordBatchBuilder(2, codec, 0, 7, 0, 0, 1 << 30)
    for d, r in zip(deltas, recs, strict=True):
        b.append(d, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    data = bytearray(b.build())
    data[0:8] = base.to_bytes(8, "big", signed=True)
    return bytes(data)


def log_append_time(data: bytes, max_ts: int) -> bytes:
    out = bytearray(data)
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, attrs | 0x08)
    struct.pack_into(">q", out, 35, max_ts)
    return bytes(out)


def random_log(rng: random.Random, headers: bool) -> tuple[list[bytes], int]:
    batches, base = [], rng.randint(0, 1000)
    for _ in range(rng.randint(1, 8)):
        n = rng.randint(1, 60)
        recs = random_records(rng, n, headers)
        codec = rng.choice(sorted(CODECS.values()))
        if rng.random() < 0.3:
            deltas = sorted(rng.sample(range(3 * n), n))
            data = gappy_batch(base, recs, deltas, codec)
            span = deltas[-1] + 1
        else:
            data, span = build_batch(base, recs, codec), n
        if rng.random() < 0.2:
            data = log_append_time(data, T0 + 99_999)
        batches.append(data)
        base += span + rng.choice([0, 0, 3])  # a later batch may start after a gap
    return batches, base


@pytest.mark.parametrize("headers", [True, False])
def test_native_equals_aiokafka_on_random_logs(headers):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(60):
        batches, end = random_log(rng, headers)
        first = struct.unpack_from(">q", batches[0])[0]
        lo = rng.randint(first, end)
        hi = rng.randint(lo, end + 5)
        native = decode_range(batches, "t", 2, lo, hi, headers, native=True)
        objects = decode_range(batches, "t", 2, lo, hi, headers, native=False)
        if objects is None:
            assert native is None
            continue
        native.validate(full=True)
        assert native.schema == objects.schema
        assert native.equals(objects), (seed, lo, hi)


def test_chunked_takes_equal_one_take():
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    batches, end = random_log(rng, True)
    whole = decode_range(batches, "t", 0, 0, end, native=True)
    dec = RangeDecoder("t", 0, 0, end, native=True)
    parts = []
    for b in batches:
        dec.add(b)
        part = dec.flush()
        if part is not None:
            part.validate(full=True)
            parts.append(part)
    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches([whole]))


def test_all_null_headers_and_keys():
    recs = [Rec(None, None, T0)] * 9
    rb = decode_range([build_batch(0, recs)], "t", 0, 0, 9, native=True)
    rb.validate(full=True)
    assert rb.column("key").null_count == 9 and rb.column("value").null_count == 9
    assert rb.column("headers").null_count == 9


def records_section(data: bytes) -> bytes:
    return data[HEADER:]


def with_records(data: bytes, records: bytes, count: int | None = None) -> bytes:
    head = bytearray(data[:HEADER])
    struct.pack_into(">i", head, 8, HEADER - 12 + len(records))
    if count is not None:
        struct.pack_into(">i", head, 57, count)
    return bytes(head) + records


GOOD = build_batch(0, [Rec(b"k", b"value", T0, [("h", b"x")])] * 3)
REC = records_section(GOOD)
ONE = len(REC) // 3  # the three records have the same size


@pytest.mark.parametrize(
    ("name", "batch"),
    [
        ("truncated record", with_records(GOOD, REC[:-1])),
        ("count beyond records", with_records(GOOD, REC, count=4)),
        ("bytes after the last record", with_records(GOOD, REC + b"\x00")),
        ("overlong varint", with_records(GOOD, b"\xff" * 11, count=1)),
        ("length beyond section", with_records(GOOD, b"\x7e\x00", count=1)),
        ("negative record length", with_records(GOOD, b"\x01\x00", count=1)),
        ("negative count", with_records(GOOD, REC, count=-1)),
        # key length -2 (zigzag 3): neither null (-1) nor a length
        ("key length -2", with_records(GOOD, b"\x0a\x00\x00\x00\x03\x00\x00\x00\x00\x00", 1)),
        ("repeated offset", with_records(GOOD, REC[:ONE] * 3)),
    ],
)
def test_malformed_records_raise_and_keep_nothing(name, batch):
    for native in (True, False):
        dec = RangeDecoder("t", 0, 0, 100, native=native)
        if name == "repeated offset" and not native:
            continue  # aiokafka decodes it; the dense check then keeps one of each offset
        with pytest.raises(ValueError):
            dec.add(batch)
        assert dec.pending == 0 and dec.next_offset == 0, name
        dec.add(GOOD)  # still usable
        assert dec.flush().column("offset").to_pylist() == [0, 1, 2]


def test_header_key_not_utf8_raises():
    bad = build_batch(0, [Rec(b"k", b"v", T0, [("\u00e9", b"x")])])
    bad = bad.replace("\u00e9".encode(), b"\xff\xfe")
    dec = RangeDecoder("t", 0, 0, 1, native=True)
    dec.add(bad)
    with pytest.raises(ValueError, match="UTF-8"):
        dec.flush()


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (GOOD[:40], "shorter than its header"),
        (GOOD + b"\x00", "batchLength"),
        (GOOD[:16] + b"\x01" + GOOD[17:], "magic"),
        (GOOD[:22] + bytes([GOOD[22] | 0x07]) + GOOD[23:], "codec"),
    ],
)
def test_malformed_header_raises(batch, match):
    with pytest.raises(ValueError, match=match):
        RangeDecoder("t", 0, 0, 100).add(batch)


def test_mutated_batches_never_crash():
    """Random byte flips in the records section: a ValueError or rows, never a crash."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    base_batches = [
        build_batch(0, random_records(rng, 20, True)),
        gappy_batch(0, random_records(rng, 5, True), [0, 2, 3, 7, 9]),
    ]
    outcomes = {"error": 0, "rows": 0}
    for _ in range(3000):
        data = bytearray(rng.choice(base_batches))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(HEADER, len(data))] = rng.randrange(256)
        dec = RangeDecoder("t", 0, 0, 100, native=True)
        try:
            dec.add(bytes(data))
            rb = dec.flush()
        except ValueError:
            outcomes["error"] += 1
            assert dec.pending == 0
            continue
        outcomes["rows"] += 1
        if rb is not None:
            rb.validate(full=True)
    print(outcomes)
    assert outcomes["error"] > 0


def test_failed_add_after_kept_rows_rolls_back_to_them():
    """A malformed batch after 3 kept records (not a whole validity byte, with headers and null
    keys) leaves exactly those 3; the next good batch continues after them."""
    first = build_batch(0, [Rec(None, b"a", T0, [("h", None)])] * 3)
    bad = with_records(build_batch(3, [Rec(b"k", b"v", T0, [("h", b"x")])] * 3), REC[:-1])
    good = build_batch(3, [Rec(b"k", None, T0, [])] * 2)
    for native in (True, False):
        dec = RangeDecoder("t", 0, 0, 5, native=native)
        dec.add(first)
        with pytest.raises(ValueError):
            dec.add(bad)
        assert dec.pending == 3
        dec.add(good)
        rb = dec.flush()
        rb.validate(full=True)
        expect = decode_range([first, good], "t", 0, 0, 5, native=False)
        assert rb.equals(expect), native
