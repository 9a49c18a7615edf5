"""Frames and seeds that once killed a node or drew a traceback, replayed by
tests/integration/test_kafka_fuzz.py on every run.

REGRESSION_FRAMES are exact bytes (stable whatever the server advertises); a
killer the fuzzer names ("KILLER (replayed alone): mutant N (...): <hex>") goes
here as `bytes.fromhex(...)`. REGRESSION_SEEDS re-run whole fuzz runs: a seed's
mutants depend on the advertised (API, version) set, so a seed reproduces its
frames only while that set is unchanged; the frames are the durable record.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from sink.kafka.protocol import request_schema
from tests.helpers.kafka_schema import encode_request, header_length, landmarks
from tests.helpers.kafka_values import Context, valid_request


def with_length(api_key: int, version: int, path: str, new: bytes) -> bytes:
    """The valid request of (api_key, version) with the length prefix of the
    field at `path` (e.g. ".topics", ".topic_data[0].partition_data")
    replaced by the bytes `new`."""
    cls = request_schema(api_key, version)
    wire = encode_request(valid_request(cls, Context()), 42)
    payload = wire[4:]
    marks = landmarks(cls, payload, header_length(api_key, version, payload))
    (m,) = [m for m in marks if m.path == path]
    payload = payload[: m.pos] + new + payload[m.pos + m.width :]
    return struct.pack(">i", len(payload)) + payload


def _set_null(entity: Any, path: list[str]) -> Any:
    name, rest = path[0], path[1:]
    if not rest:
        return dataclasses.replace(entity, **{name: None})
    items = getattr(entity, name)
    return dataclasses.replace(entity, **{name: (_set_null(items[0], rest), *items[1:])})


def with_null(api_key: int, version: int, path: str) -> bytes:
    """The valid request of (api_key, version) with the array at `path` (e.g.
    "topic_data.partition_data": in the first element) written as null, and its
    elements left out, as a client that sends null would."""
    req = valid_request(request_schema(api_key, version), Context())
    return encode_request(_set_null(req, path.split(".")), 42)


HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # 2^32 - 1: kio's reader asks for ~34 GB

REGRESSION_FRAMES: list[tuple[str, bytes]] = [
    # issue 19: a single frame each that aborted a node (SIGABRT in kio's reader)
    ("metadata-v12-topics-huge-varint", with_length(3, 12, ".topics", HUGE_VARINT)),
    ("produce-v9-topic_data-huge-varint", with_length(0, 9, ".topic_data", HUGE_VARINT)),
    ("fetch-v12-topics-huge-varint", with_length(1, 12, ".topics", HUGE_VARINT)),
    (
        "findcoordinator-v4-keys-huge-varint",
        with_length(10, 4, ".coordinator_keys", HUGE_VARINT),
    ),
    # issue 19: null arrays (not nullable in Kafka's schemas) reaching handler
    # loops (produce.py 39/55, fetch.py 157/159, groups.py 26/51, cluster.py 149/178)
    ("produce-v3-topic_data-null", with_null(0, 3, "topic_data")),
    ("produce-v9-partition_data-null", with_null(0, 9, "topic_data.partition_data")),
    ("fetch-v4-topics-null", with_null(1, 4, "topics")),
    ("fetch-v12-partitions-null", with_null(1, 12, "topics.partitions")),
    ("listoffsets-v1-topics-null", with_null(2, 1, "topics")),
    ("listoffsets-v8-partitions-null", with_null(2, 8, "topics.partitions")),
    ("offsetcommit-v2-topics-null", with_null(8, 2, "topics")),
    ("offsetcommit-v8-partitions-null", with_null(8, 8, "topics.partitions")),
    ("offsetfetch-v1-topics-null", with_null(9, 1, "topics")),
    ("offsetfetch-v7-partition_indexes-null", with_null(9, 7, "topics.partition_indexes")),
    ("createtopics-v2-topics-null", with_null(19, 2, "topics")),
    ("createtopics-v7-configs-null", with_null(19, 7, "topics.configs")),
    ("metadata-v1-topics-null-means-all", with_null(3, 1, "topics")),
    ("findcoordinator-v4-keys-null", with_null(10, 4, "coordinator_keys")),
    # killers the fuzzer found on main (seeds 1 and 7), replayed alone: each aborted a node
    (
        "fuzz-seed7-listoffsets-v6-mutant215",
        bytes.fromhex(
            "0000009d000200060000000100076861726e65737300ffffffff80ffffffff0f086861726e657373"
            "040000000100000002ffffffffffffffff0000000000000002fc0000000000000000000000000000"
            "000001000000000000000200000103000000020000000100000000000000020000000000000003e6"
            "000000000000000000000b7878787878787878787802000000f08000000000000000000000000000"
            "00"
        ),
    ),
    (
        "fuzz-seed7-produce-v10-mutant372",
        bytes.fromhex(
            "0000007a0000000a0000000100076861726e6573730000ffff00001388ffffffff0f086861726e65"
            "737302000000004c00000000000000000000003fffffffff02d8e053540000000000000000000000"
            "0003e800000000000003e9ffffffffffffffffffffffffffff000000011a000000010e6861726e65"
            "737300000000"
        ),
    ),
    (
        "fuzz-seed7-createtopics-v7-mutant2860",
        bytes.fromhex(
            "0000002e001300070000000100076861726e6573730002086861726e65737300000001ffff01ffff"
            "ffff0f00000013880000"
        ),
    ),
    (
        "fuzz-seed1-metadata-v9-mutant1951",
        bytes.fromhex(
            "00000024000300090000000100076861726e65737300ffffffff0f086861726e6573730000000000"
        ),
    ),
    (
        "fuzz-seed7-createtopics-v5-mutant1019",
        bytes.fromhex(
            "00000097001300050000000100076861726e6573730004096261642f6e616d650000000000000101"
            "000e6861726e6573732d67726f75700000000200020200000001010001000e6861726e6573732d67"
            "726f7570000000030000ffffffff0fffffffff04ffffffff000000000000000100ffffffff010000"
            "00000004ffffffff0000000300000001000201086861726e6573730000000000000000"
        ),
    ),
    (
        "fuzz-seed7-produce-v9-mutant1550",
        bytes.fromhex(
            "0000006c000000090000000100076861726e65737300096261642f6e616d657fff00000001040b78"
            "78787878787878787802ffffffff1947547adce093bf7bc034b24762a96d11c7e4c9265d1b3c5f00"
            "00010100096261642f6e616d65ffffffff0f00000080072c40b068bcc1000000"
        ),
    ),
]

# (seed, frames): whole fuzz runs that once found something.
# seed 1: 5 deaths in 2,000 frames on main (Metadata v9/v12, Fetch v12, OffsetCommit
# huge varints); seed 7: 11 deaths in 4,500 frames (ListOffsets v6, Produce v9/v10,
# CreateTopics v5/v7 huge varints).
REGRESSION_SEEDS: list[tuple[int, int]] = [(1, 2000), (7, 3000)]
