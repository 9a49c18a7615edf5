"""Seeded mutations of valid Kafka requests, for the fuzzer.

The corpus holds one valid and a few random (schema-valid) requests of every
(API, version) the server advertises, each with the landmarks of its length
prefixes and tag sections (tests/helpers/kafka_schema.landmarks). Mutant i of a
run is drawn from `random.Random(f"{seed}:{i}")`, so (seed, i, corpus)
reproduces it exactly, whatever other workers did.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from crc32c import crc32c

from sink.kafka.protocol import request_schema
from tests.helpers.kafka_schema import Landmark, encode_request, header_length, landmarks, uvarint
from tests.helpers.kafka_values import Context, random_request, valid_request


@dataclass(frozen=True)
class Seed:
    api_key: int
    version: int
    payload: bytes  # header + body, no size prefix
    marks: tuple[Landmark, ...]


@dataclass(frozen=True)
class Mutant:
    index: int
    kind: str
    api_key: int  # of the request it was made from
    version: int
    wire: bytes  # exactly what is sent (size prefix included)
    eof: bool  # the size prefix does not match: send, then half-close

    def describe(self) -> str:
        return (
            f"mutant {self.index} ({self.kind} of api {self.api_key} v{self.version}, "
            f"{len(self.wire)} bytes): {self.wire.hex()}"
        )


def build_corpus(
    advertised: dict[int, tuple[int, int]], ctx: Context, seed: int, randoms: int = 2
) -> list[Seed]:
    rng = random.Random(f"corpus:{seed}")
    out = []
    for api_key, (lo, hi) in sorted(advertised.items()):
        for version in range(lo, hi + 1):
            cls = request_schema(api_key, version)
            reqs = [valid_request(cls, ctx)]
            reqs += [random_request(cls, rng, ctx) for _ in range(randoms)]
            for req in reqs:
                payload = encode_request(req, 1)[4:]
                hlen = header_length(api_key, version, payload)
                marks = landmarks(cls.__header_schema__, payload) + landmarks(cls, payload, hlen)
                out.append(Seed(api_key, version, payload, tuple(marks)))
    return out


HUGE_UVARINTS = [
    b"\xff\xff\xff\xff\x0f",  # 2^32 - 1: the Metadata v12 killer
    b"\xff\xff\xff\xff\x07",  # 2^31 - 1
    b"\x80\x80\x80\x80\x08",  # 2^31
    b"\xff\xff\x7f",  # 2^21 - 1
    b"\xff\xff\xff\xff\xff\x01",  # a 6-byte varint (longer than Kafka allows)
]
HUGE_INT32 = [0x7FFFFFFF, 0x10000000, 1 << 20, -2, -0x80000000]
HUGE_INT16 = [0x7FFF, -2, -0x8000, 0x4000]


def _with_prefix(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _bitflip(rng: random.Random, p: bytearray) -> None:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(p))
        p[i] ^= 1 << rng.randrange(8)


def _byterun(rng: random.Random, p: bytearray) -> None:
    n = rng.randint(1, 16)
    i = rng.randrange(len(p))
    fill = rng.choice([b"\x00", b"\xff", b"\x80", None])
    run = fill * n if fill else rng.randbytes(n)
    p[i : i + n] = run[: len(p) - i]


def _huge_length(rng: random.Random, p: bytearray, marks: tuple[Landmark, ...]) -> bytearray:
    lengths = [m for m in marks if m.kind in ("uvarint", "int16", "int32", "tags")]
    if not lengths:
        _bitflip(rng, p)
        return p
    m = rng.choice(lengths)
    if m.kind in ("uvarint", "tags"):
        new = rng.choice(HUGE_UVARINTS)
    elif m.kind == "int32":
        new = struct.pack(">i", rng.choice(HUGE_INT32))
    else:
        new = struct.pack(">h", rng.choice(HUGE_INT16))
    return p[: m.pos] + new + p[m.pos + m.width :]


def _bad_tag(rng: random.Random, p: bytearray, marks: tuple[Landmark, ...]) -> bytearray:
    """A tagged field whose size lies (or a tag number too large to be real)."""
    tags = [m for m in marks if m.kind == "tags"]
    if not tags:
        return _huge_length(rng, p, marks)
    m = rng.choice(tags)
    tag = rng.choice([0, 1, 99, 0xFFFFFFF])
    size = rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFF])
    value = rng.randbytes(rng.randint(0, 4))
    entry = uvarint(tag) + uvarint(size) + value
    return p[: m.pos] + uvarint(m.value + 1) + entry + p[m.pos + m.width :]


# RecordBatch v2 header fields a mutant may rewrite (offset, struct format), CRC
# recomputed so that the node gets past the checksum to the record parsing.
BATCH_FIELDS = [
    (8, ">i"),  # batchLength
    (16, ">b"),  # magic
    (21, ">h"),  # attributes (compression, transactional, control bits)
    (23, ">i"),  # lastOffsetDelta
    (43, ">q"),  # producerId
    (51, ">h"),  # producerEpoch
    (53, ">i"),  # baseSequence
    (57, ">i"),  # recordCount
]


def _batch(rng: random.Random, p: bytearray, marks: tuple[Landmark, ...]) -> bytearray:
    """Rewrite a header field or a record byte of a Produce request's batch and
    fix its CRC; other requests get a bit flip."""
    recs = [m for m in marks if m.path.endswith(".records") and m.value > 61]
    if not recs:
        _bitflip(rng, p)
        return p
    m = rng.choice(recs)
    start = m.pos + m.width
    end = start + (m.value - 1 if m.kind == "uvarint" else m.value)
    if rng.random() < 0.7:
        off, fmt = rng.choice(BATCH_FIELDS)
        bits = 8 * struct.calcsize(fmt) - 1
        value = rng.choice([-1, 0, 1, 2**bits - 1, -(2**bits), rng.randint(0, 1 << 16)])
        value = max(-(2**bits), min(2**bits - 1, value))
        struct.pack_into(fmt, p, start + off, value)
    else:  # inside the records: lengths, varints, keys and values
        i = rng.randrange(start + 61, end)
        p[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    struct.pack_into(">I", p, start + 17, crc32c(bytes(p[start + 21 : end])))
    return p


def mutate(corpus: list[Seed], advertised: dict[int, tuple[int, int]], seed: int, i: int) -> Mutant:
    rng = random.Random(f"{seed}:{i}")
    s = rng.choice(corpus)
    p = bytearray(s.payload)
    kind = rng.choice(
        [
            "bitflip",
            "bitflip",
            "byterun",
            "truncate",
            "garbage_tail",
            "lying_size",
            "huge_length",
            "huge_length",
            "bad_tag",
            "batch",
            "batch",
            "api_version",
            "other_version",
            "double",
        ]
    )
    eof = False
    prefix: bytes | None = None
    kinds = [kind] if kind != "double" else rng.sample(["bitflip", "byterun", "huge_length"], 2)
    for k in kinds:
        if k == "bitflip":
            _bitflip(rng, p)
        elif k == "byterun":
            _byterun(rng, p)
        elif k == "truncate":
            p = p[: rng.randrange(len(p))]
        elif k == "garbage_tail":
            p += rng.randbytes(rng.randint(1, 64))
        elif k == "lying_size":
            size = rng.choice(
                [len(p) + rng.randint(1, 64), max(0, len(p) - rng.randint(1, 16)), 1 << 19]
            )
            prefix = struct.pack(">i", size)
            eof = True
        elif k == "huge_length":
            p = _huge_length(rng, p, s.marks)
        elif k == "bad_tag":
            p = _bad_tag(rng, p, s.marks)
        elif k == "batch":
            p = _batch(rng, p, s.marks)
        elif k == "api_version":
            api = rng.choice([*advertised, rng.randrange(-1, 100), rng.randrange(1 << 15)])
            struct.pack_into(">hh", p, 0, api, rng.choice([-1, 0, 1, 5, 13, 99, 0x7FFF]))
        elif k == "other_version":
            lo, hi = advertised[s.api_key]
            struct.pack_into(">h", p, 2, rng.randint(lo, hi))
    wire = (prefix + bytes(p)) if prefix else _with_prefix(bytes(p))
    return Mutant(i, "+".join(kinds), s.api_key, s.version, wire, eof)
