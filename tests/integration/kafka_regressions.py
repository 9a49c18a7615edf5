"""Frames and seeds that once killed a node or drew a traceback, replayed by
tests/integration/test_kafka_fuzz.py on every run.

REGRESSION_FRAMES are exact bytes (stable whatever the server advertises); a
killer the fuzzer names ("KILLER (replayed alone): mutant N (...): <hex>") goes
here as `bytes.fromhex(...)`. REGRESSION_SEEDS re-run whole fuzz runs: a seed's
mutants depend on the advertised (API, version) set, so a seed reproduces its
frames only while that set is unchanged; the frames are the durable record.
"""

from __future__ import annotations

import struct

from kio.index import load_request_schema

from tests.helpers.kafka_schema import encode_request, header_length, landmarks
from tests.helpers.kafka_values import Context, valid_request


def with_length(api_key: int, version: int, path: str, new: bytes) -> bytes:
    """The valid request of (api_key, version) with the length prefix of the
    field at `path` (e.g. ".topics", ".topic_data[0].partition_data")
    replaced by the bytes `new`."""
    cls = load_request_schema(api_key, version)
    wire = encode_request(valid_request(cls, Context()), 42)
    payload = wire[4:]
    marks = landmarks(cls, payload, header_length(api_key, version, payload))
    (m,) = [m for m in marks if m.path == path]
    payload = payload[: m.pos] + new + payload[m.pos + m.width :]
    return struct.pack(">i", len(payload)) + payload


HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # 2^32 - 1: kio's reader asks for ~34 GB
NULL_INT32 = struct.pack(">i", -1)
NULL_VARINT = b"\x00"

REGRESSION_FRAMES: list[tuple[str, bytes]] = [
    # issue 19: a single frame each that aborted a node (SIGABRT in kio's reader)
    ("metadata-v12-topics-huge-varint", with_length(3, 12, ".topics", HUGE_VARINT)),
    ("produce-v9-topic_data-huge-varint", with_length(0, 9, ".topic_data", HUGE_VARINT)),
    ("fetch-v12-topics-huge-varint", with_length(1, 12, ".topics", HUGE_VARINT)),
    (
        "findcoordinator-v4-keys-huge-varint",
        with_length(10, 4, ".coordinator_keys", HUGE_VARINT),
    ),
    # issue 19: null arrays (not nullable in Kafka's schemas) reaching handler loops
    ("produce-v3-topic_data-null", with_length(0, 3, ".topic_data", NULL_INT32)),
    (
        "produce-v9-partition_data-null",
        with_length(0, 9, ".topic_data[0].partition_data", NULL_VARINT),
    ),
    ("fetch-v4-topics-null", with_length(1, 4, ".topics", NULL_INT32)),
    ("fetch-v12-partitions-null", with_length(1, 12, ".topics[0].partitions", NULL_VARINT)),
    ("offsetcommit-v2-topics-null", with_length(8, 2, ".topics", NULL_INT32)),
    ("offsetcommit-v8-partitions-null", with_length(8, 8, ".topics[0].partitions", NULL_VARINT)),
    ("createtopics-v2-topics-null", with_length(19, 2, ".topics", NULL_INT32)),
    ("listoffsets-v1-topics-null", with_length(2, 1, ".topics", NULL_INT32)),
]

# (seed, frames): whole fuzz runs that once found something.
REGRESSION_SEEDS: list[tuple[int, int]] = []
