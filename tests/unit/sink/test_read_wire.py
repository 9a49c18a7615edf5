"""sink.readapi.wire against protobuf's own FetchReply encoding, both directions."""

from __future__ import annotations

import os
import random

import pytest

from sink.readapi import read_api_pb2 as pb
from sink.readapi.wire import WireError, decode_fetch_reply, encode_fetch_reply

SEED = int(os.environ.get("RAFTSINK_WIRE_SEED", random.randrange(1 << 30)))


def random_parts(rng: random.Random) -> list[tuple[int, bytes, memoryview]]:
    parts = []
    for _ in range(rng.choice([0, 1, 2, 7])):
        base = rng.choice([0, 1, 127, 128, 300, rng.randrange(1 << 40)])
        data = rng.randbytes(rng.choice([16, 17, 200, 70_000]))
        parts.append((base, data[:16], memoryview(data)[16:]))
    return parts


def test_encoding_is_protobufs_byte_for_byte():
    print(f"seed {SEED} (RAFTSINK_WIRE_SEED)")
    rng = random.Random(SEED)
    for _ in range(200):
        parts = random_parts(rng)
        hw = rng.choice([0, 5, 1 << 33])
        start = rng.choice([0, 3, 1 << 20])
        ours = encode_fetch_reply(parts, hw, start)
        theirs = pb.FetchReply(
            batches=[pb.Batch(base_offset=b, data=h + bytes(r)) for b, h, r in parts],
            high_watermark=hw,
            log_start_offset=start,
        ).SerializeToString()
        assert ours == theirs


def test_decoding_matches_protobuf_including_errors_and_unknown_fields():
    rng = random.Random(SEED + 1)
    for _ in range(200):
        parts = random_parts(rng)
        msg = pb.FetchReply(
            batches=[pb.Batch(base_offset=b, data=h + bytes(r)) for b, h, r in parts],
            high_watermark=rng.choice([0, 9, 1 << 40]),
            log_start_offset=rng.choice([0, 2]),
            error_code=rng.choice([0, 1, 3, -1]),
            error=rng.choice(["", "offset 5 is outside [0, 3]", "ünïcode"]),
        )
        raw = msg.SerializeToString() + b"\x30\x07"  # field 6 (unknown, varint): skipped
        got = decode_fetch_reply(raw)
        assert [(b.base_offset, bytes(b.data)) for b in got.batches] == [
            (b.base_offset, b.data) for b in msg.batches
        ]
        assert (got.high_watermark, got.log_start_offset, got.error_code, got.error) == (
            msg.high_watermark,
            msg.log_start_offset,
            msg.error_code,
            msg.error,
        )


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a",  # a batch without its length
        b"\x0a\x05\x08\x01",  # a batch longer than the reply
        b"\x0a\x03\x12\x09ab",  # batch data longer than its message
        b"\x10" + b"\xff" * 11,  # an overlong varint
        b"\x0b",  # wire type 3 (groups) is not protobuf 3
    ],
)
def test_malformed_replies_raise_wire_error(raw):
    with pytest.raises(WireError):
        decode_fetch_reply(raw)
