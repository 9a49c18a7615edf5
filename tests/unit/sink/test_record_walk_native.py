"""The compiled record walk (sink/kafka/protocol/_record_walk.c) against record_check._walk:
it accepts exactly what _walk accepts, stops at the same position, answers -1 wherever _walk
raises (which then names the error), and never reads outside its buffer. Random tests print
their seed."""

from __future__ import annotations

import os
import random

import pytest

from sink.kafka.protocol import record_check
from sink.kafka.protocol.record_check import _walk
from tests.unit.sink.batches import _varint
from tests.unit.sink.test_record_check import BAD, _check, _record

try:  # not skipped when missing: every test below then fails, the first one saying why
    from sink.kafka.protocol import _record_walk as native
except ImportError:
    native = None


def test_the_compiled_walk_is_built():
    # The install (pip install -e .) compiles it; a user's image without a compiler falls
    # back to the Python walk, but not here: the comparisons below would be skipped.
    assert record_check.NATIVE_AVAILABLE


def _agree(b: bytes | memoryview, count: int, start: int = 0, end: int | None = None) -> int:
    end = len(b) if end is None else end
    try:
        expect = _walk(b, start, end, count)
    except (record_check.BatchError, IndexError):
        expect = -1
    got = native.walk(b, start, end, count)
    assert got == expect, (count, start, end, bytes(b[start : start + 64]))
    return got


def _raw_varint(z: int) -> bytes:
    """An unsigned varint of z's bits as given (no zigzag), any length."""
    out = bytearray()
    while True:
        if z < 0x80:
            return bytes(out + bytes([z]))
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def test_random_records_whole_damaged_cut_and_extended():
    seed = int(os.environ.get("RAFTSINK_WALK_SEED", random.randrange(1 << 32)))
    print(f"seed {seed} (RAFTSINK_WALK_SEED to repeat)")
    rnd = random.Random(seed)

    def blob() -> bytes | None:
        r = rnd.random()
        return None if r < 0.15 else bytes(rnd.choice((0, 1, 5, 63, 64, 100, 300, 1024, 9000)))

    def field(b: bytes | None) -> bytes:
        return _varint(-1) if b is None else _varint(len(b)) + b

    accepted = 0
    for _ in range(300):
        count = rnd.choice((1, 2, 5, 70, 130))
        recs = bytearray()
        for i in range(count):
            ts = rnd.randrange(1 << 62) if rnd.random() < 0.1 else rnd.randrange(64)
            headers = [] if rnd.random() < 0.8 else [(b"h", blob()), (b"", None)]
            body = b"\x00" + _varint(ts) + _varint(i) + field(blob()) + field(blob())
            body += _varint(len(headers)) + b"".join(field(k) + field(v) for k, v in headers)
            recs += _varint(len(body)) + body
        whole = bytes(recs)
        variants = [whole, whole[:-1], whole + b"\x00", whole[: len(whole) // 2]]
        for _ in range(8):
            damaged = bytearray(whole)
            for _ in range(rnd.choice((1, 1, 3))):
                damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
            variants.append(bytes(damaged))
        for v in variants:
            for c in (count, count - 1, count + 1, 0, -1):
                accepted += _agree(v, c) >= 0
            # walked in place inside a larger blob, as check_batch_records does
            blob_ = b"\x07" * 5 + v + bytes(rnd.randrange(256) for _ in range(9))
            _agree(blob_, count, 5, 5 + len(v))
            _agree(memoryview(blob_), count, 5, 5 + len(v))
    assert accepted >= 300  # every whole blob with its own count


def test_varints_wider_than_64_bits():
    """_walk reads them as Python ints: a timestamp delta of any value passes, a length,
    an offsetDelta or a field size that large fails; so does an 11-byte varint."""
    huge = _raw_varint((1 << 64) | 6)  # 10 bytes, a bit past the 64th
    top = _raw_varint(1 << 63)  # 10 bytes, exactly 64 bits: fine as a timestamp
    body = b"\x00" + huge + _varint(0) + _varint(-1) + _varint(1) + b"v" + _varint(0)
    assert _agree(_varint(len(body)) + body, 1) == len(body) + 1
    body = b"\x00" + top + _varint(0) + _varint(-1) + _varint(1) + b"v" + _varint(0)
    assert _agree(_varint(len(body)) + body, 1) > 0
    for field_at in (1, 2):  # the offsetDelta, the value's size (0: the timestamp delta)
        parts = [_varint(0), _varint(0), _varint(1) + b"v"]
        parts[field_at] = huge
        body = b"\x00" + b"".join(parts[:2]) + _varint(-1) + parts[2] + _varint(0)
        assert _agree(_varint(len(body)) + body, 1) == -1
    assert _agree(huge + b"\x00" * 20, 1) == -1  # the record's length
    assert _agree(b"\x00\x00" + b"\xff" * 11 + b"\x00" * 10, 1) == -1


def test_positions_outside_the_buffer_are_refused_not_read():
    good = _record(0, b"k", b"v")
    for start, end in ((-1, len(good)), (0, len(good) + 1), (3, 2), (len(good) + 5, len(good) + 9)):
        assert native.walk(good, start, end, 1) == -1
    assert native.walk(b"", 0, 0, 0) == 0 == _walk(b"", 0, 0, 0)
    with pytest.raises(TypeError):
        native.walk("text", 0, 4, 1)


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_refused_batch_keeps_its_error(name, monkeypatch):
    """check_records gives the same BatchError with the compiled walk as without it."""
    from tests.unit.sink.test_record_check import _batch

    recs, count = BAD[name]
    batch = _batch(recs, count)
    with pytest.raises(record_check.BatchError) as with_native:
        _check(batch)
    monkeypatch.setattr(record_check, "_native_walk", None)
    with pytest.raises(record_check.BatchError) as without:
        _check(batch)
    assert (with_native.value.error_code, str(with_native.value)) == (
        without.value.error_code,
        str(without.value),
    )
