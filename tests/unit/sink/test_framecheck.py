"""The bounds-checking pass in front of kio's native reader (sink.kafka.protocol)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import struct
import subprocess
import sys
from dataclasses import field
from typing import ClassVar

import pytest
from kio.serial import entity_reader

from sink.kafka.handlers import SUPPORTED
from sink.kafka.protocol import (
    FrameError,
    NullError,
    check_request,
    entity_checker,
    request_schema,
    strip_unknown_tags,
)
from tests.unit.sink.killer_frames import HUGE_UVARINT, KILLER_FRAMES
from tests.unit.sink.requests import valid_request

SERVED = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]


def kio_read(frame: bytes, api_key: int, version: int):
    cls = request_schema(api_key, version)
    hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    body, m = entity_reader(cls)(frame, n)
    return hdr, body, n, n + m


# ------------------------------------------------------------------ the frames of issue 19


@pytest.mark.parametrize("name", sorted(KILLER_FRAMES))
def test_killer_frames_rejected(name):
    frame = KILLER_FRAMES[name]()
    api_key, version, _ = struct.unpack_from(">hhi", frame)
    with pytest.raises(FrameError, match="elements"):
        check_request(frame, api_key, version)


def test_killer_frame_really_aborts_kio():
    """The reproduction is real: kio's reader aborts a process on the Metadata frame
    (so the regression tests above guard something)."""
    code = (
        "import struct;from tests.unit.sink.killer_frames import metadata_v12;"
        "from kio.index import load_request_schema as L;from kio.serial import entity_reader as R;"
        "f=metadata_v12();c=L(3,12);h,n=R(c.__header_schema__)(f,0);R(c)(f,n)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=os.getcwd(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -6, proc.stderr[-500:]


# ------------------------------------------------------------------ every served request


@pytest.mark.parametrize("api_key, version", SERVED)
def test_valid_requests_pass_and_agree_with_kio(api_key, version):
    frame = valid_request(api_key, version)
    shape = check_request(frame, api_key, version)
    _hdr, _body, n, end = kio_read(frame, api_key, version)
    assert (shape.body_start, shape.body_end, shape.edits) == (n, end, ())


@pytest.mark.parametrize("api_key, version", SERVED)
def test_truncation_at_every_byte_is_a_frame_error(api_key, version):
    frame = valid_request(api_key, version, records=b"\x00" * 70)
    for cut in range(len(frame)):
        with pytest.raises(FrameError):
            check_request(frame[:cut], api_key, version)


def test_mutations_passing_the_check_never_abort_kio():
    """Seeded mutations of valid frames: whatever the checker accepts, kio's reader
    reads without an abort (in this process: an abort would kill the test run) and
    without allocating past the frame."""
    seed = int(os.environ.get("FRAMECHECK_SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rnd = random.Random(seed)
    frames = [
        (k, v, valid_request(k, v, records=b"\x00" * 70)) for k, v in SERVED if k not in (18,)
    ]
    accepted = 0
    for _ in range(4000):
        k, v, frame = rnd.choice(frames)
        b = bytearray(frame)
        op = rnd.randrange(4)
        pos = rnd.randrange(8, len(b))
        if op == 0:
            b[pos] ^= 1 << rnd.randrange(8)
        elif op == 1:
            b[pos : pos + 5] = HUGE_UVARINT
        elif op == 2:
            b[pos : pos + 4] = struct.pack(">i", rnd.choice([-1, -2, 1 << 30, 0x7FFFFFFF]))
        else:
            b[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 6)))
        try:
            shape = check_request(bytes(b), k, v)
        except FrameError:
            continue
        accepted += 1
        parsed = strip_unknown_tags(bytes(b), shape.edits)
        # A Python exception is fine (the connection answers or closes); an abort is not.
        with contextlib.suppress(Exception):
            kio_read(parsed, k, v)
    assert accepted > 0, f"seed={seed}: no mutation was accepted, the test tests nothing"


# ------------------------------------------------------------------ primitives, synthetic


def _schema(flexible: bool, **fields):
    """A kio-like entity class with the given (name -> (annotation, metadata)) fields."""
    ns = {
        "__annotations__": {},
        "__flexible__": flexible,
        "__type__": None,
    }
    ns["__annotations__"]["__flexible__"] = ClassVar[bool]
    for name, (ann, meta) in fields.items():
        ns["__annotations__"][name] = ann
        ns[name] = field(metadata=meta) if meta is not None else field()
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(
        type("E" + ("F" if flexible else "L"), (), ns)
    )


FIXED = [
    ("int8", 1),
    ("int16", 2),
    ("int32", 4),
    ("int64", 8),
    ("uint16", 2),
    ("float64", 8),
    ("uuid", 16),
    ("bool", 1),
    ("timedelta_i32", 4),
    ("timedelta_i64", 8),
]


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("kafka_type, size", FIXED)
def test_fixed_size_primitives(flexible, kafka_type, size):
    cls = _schema(flexible, a=(int, {"kafka_type": kafka_type}))
    check = entity_checker(cls)
    tail = b"\x00" if flexible else b""
    assert check(b"\x01" * size + tail)[0] == size + len(tail)
    with pytest.raises(FrameError):
        check(b"\x01" * (size - 1))


@pytest.mark.parametrize("kafka_type, width", [("string", 2), ("bytes", 4), ("records", 4)])
def test_legacy_lengths(kafka_type, width):
    fmt = ">h" if width == 2 else ">i"
    plain = entity_checker(_schema(False, a=(str, {"kafka_type": kafka_type})))
    nullable = entity_checker(_schema(False, a=(str | None, {"kafka_type": kafka_type})))
    assert plain(struct.pack(fmt, 3) + b"abc")[0] == width + 3
    assert plain(struct.pack(fmt, 0))[0] == width
    with pytest.raises(NullError):
        plain(struct.pack(fmt, -1))
    assert nullable(struct.pack(fmt, -1))[0] == width
    for bad in (-2, 4, 0x7FFF):
        with pytest.raises(FrameError):
            nullable(struct.pack(fmt, bad) + b"abc")


@pytest.mark.parametrize("kafka_type", ["string", "bytes", "records"])
def test_compact_lengths(kafka_type):
    plain = entity_checker(_schema(True, a=(str, {"kafka_type": kafka_type})))
    nullable = entity_checker(_schema(True, a=(str | None, {"kafka_type": kafka_type})))
    assert plain(b"\x04abc\x00")[0] == 5
    assert plain(b"\x01\x00")[0] == 2  # empty
    assert plain(b"\x84\x01" + b"x" * 131 + b"\x00")[0] == 2 + 131 + 1  # two-byte varint
    with pytest.raises(NullError):
        plain(b"\x00\x00")
    assert nullable(b"\x00\x00")[0] == 2
    for bad in (b"\x05abc\x00", HUGE_UVARINT + b"\x00", b"\x80\x80\x80\x80\x80\x01", b"\x80"):
        with pytest.raises(FrameError):
            nullable(bad)


def test_varint_longer_than_five_bytes():
    check = entity_checker(_schema(True, a=(str, {"kafka_type": "string"})))
    with pytest.raises(FrameError, match="longer than 5"):
        check(b"\x81\x80\x80\x80\x80\x00" + b"x" * 64)


def test_arrays_nested_and_nullable():
    inner = _schema(False, x=(int, {"kafka_type": "int32"}), s=(str, {"kafka_type": "string"}))
    outer = _schema(False, items=(tuple[inner, ...], None))
    nul = _schema(False, items=(tuple[inner, ...] | None, None))
    nums = _schema(False, items=(tuple[int, ...], {"kafka_type": "int64"}))
    one = struct.pack(">ih", 9, 1) + b"z"
    assert entity_checker(outer)(struct.pack(">i", 2) + one + one)[0] == 4 + 2 * len(one)
    with pytest.raises(NullError):
        entity_checker(outer)(struct.pack(">i", -1))
    assert entity_checker(nul)(struct.pack(">i", -1))[0] == 4
    # 2 elements claimed, 1 present; and a count that no frame could hold
    with pytest.raises(FrameError):
        entity_checker(outer)(struct.pack(">i", 2) + one)
    with pytest.raises(FrameError, match="elements"):
        entity_checker(outer)(struct.pack(">i", 0x7FFFFFFF) + one * 3)
    # an element costs its minimum wire size (6 bytes here), not one byte
    with pytest.raises(FrameError, match="elements"):
        entity_checker(outer)(struct.pack(">i", 3) + b"\x00" * 17)
    assert entity_checker(nums)(struct.pack(">i", 2) + b"\x00" * 16)[0] == 20
    with pytest.raises(FrameError):
        entity_checker(nums)(struct.pack(">i", 3) + b"\x00" * 16)


def test_compact_arrays_and_string_arrays():
    strs = _schema(True, items=(tuple[str, ...], {"kafka_type": "string"}))
    check = entity_checker(strs)
    assert check(b"\x03\x02a\x01\x00")[0] == 5
    with pytest.raises(NullError):
        check(b"\x02\x00\x00")  # a null element where elements are not nullable
    with pytest.raises(NullError):
        check(b"\x00\x00")
    with pytest.raises(FrameError):
        check(HUGE_UVARINT + b"\x00")


def test_nullable_struct_marker():
    inner = _schema(True, x=(int, {"kafka_type": "int32"}))
    outer = _schema(True, s=(inner | None, None))
    check = entity_checker(outer)
    assert check(b"\xff\x00")[0] == 2
    assert check(b"\x01" + b"\x00\x00\x00\x05\x00" + b"\x00")[0] == 7
    with pytest.raises(FrameError):
        check(b"\x01\x00\x00")


def test_tagged_sections_known_and_unknown():
    cls = _schema(
        True,
        a=(int, {"kafka_type": "int32"}),
        t=(str | None, {"kafka_type": "string", "tag": 0}),
    )
    check = entity_checker(cls)
    base = b"\x00\x00\x00\x01"
    assert check(base + b"\x00") == (5, ())
    # known tag 0 holding compact string "hi": content must fill its size exactly
    assert check(base + b"\x01" + b"\x00\x03\x03hi") == (10, ())
    with pytest.raises(FrameError, match="does not fill"):
        check(base + b"\x01" + b"\x00\x04\x03hi!")
    with pytest.raises(FrameError):
        check(base + b"\x01" + b"\x00\x03\x09hi")  # string longer than its tag
    # unknown tag 7 (3 bytes) next to the known one: recorded, then stripped
    buf = base + b"\x02" + b"\x00\x03\x03hi" + b"\x07\x03xyz"
    end, edits = check(buf)
    assert end == len(buf) and len(edits) == 1 and edits[0].known_count == 1
    assert strip_unknown_tags(buf, edits) == base + b"\x01" + b"\x00\x03\x03hi"
    # counts and sizes that do not fit
    for bad in (b"\x05\x07\x00", b"\x01\x07\x09xy", b"\x01\x07" + HUGE_UVARINT + b"\x00"):
        with pytest.raises(FrameError):
            check(base + bad)


# ------------------------------------------------------------------ KIP-482 on real schemas


def _with_header_tag(frame: bytes) -> bytes:
    """A flexible request with an unknown tag 99 in its header's tagged section."""
    (n,) = struct.unpack_from(">h", frame, 8)
    at = 10 + n  # the header's tag count (0 from kio's writer)
    assert frame[at] == 0
    return frame[:at] + b"\x01\x63\x02ab" + frame[at + 1 :]


def _with_body_tag(frame: bytes) -> bytes:
    """The same with an unknown tag 1000 in the body's top-level tagged section."""
    assert frame[-1] == 0
    return frame[:-1] + b"\x01\xe8\x07\x01z"


@pytest.mark.parametrize(
    "api_key, version", [(0, 9), (1, 12), (3, 12), (10, 4), (19, 7), (22, 4), (18, 3), (9, 7)]
)
def test_unknown_tags_stripped_header_and_body(api_key, version):
    frame = valid_request(api_key, version)
    _h, want, _n, _e = kio_read(frame, api_key, version)
    for tagged in (_with_header_tag(frame), _with_body_tag(frame)):
        with pytest.raises(KeyError):  # kio refuses unknown tags: why they are stripped
            kio_read(tagged, api_key, version)
        shape = check_request(tagged, api_key, version)
        assert len(shape.edits) == 1
        clean = strip_unknown_tags(tagged, shape.edits)
        assert clean == frame
        assert kio_read(clean, api_key, version)[1] == want


def test_known_tagged_field_kept_beside_an_unknown_one():
    """Fetch v12's ClusterId (tag 0) is read as Kafka does; an unknown tag next to it
    in the same section is skipped and the section's count rewritten."""
    from tests.unit.sink.requests import encode, request_values

    frame = encode(1, 12, request_values(1) | {"cluster_id": "c-1"})
    shape = check_request(frame, 1, 12)
    assert shape.edits == ()
    assert kio_read(frame, 1, 12)[1].cluster_id == "c-1"
    # the body's last section: count 1, tag 0, size, compact string "c-1"
    section = b"\x01\x00\x04\x04c-1"
    assert frame.endswith(section)
    tagged = frame[: -len(section)] + b"\x02\x00\x04\x04c-1\x09\x02zz"
    shape = check_request(tagged, 1, 12)
    assert [e.known_count for e in shape.edits] == [1]
    assert strip_unknown_tags(tagged, shape.edits) == frame
