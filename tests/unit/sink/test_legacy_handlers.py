"""The pre-KIP-896 versions (Kafka 3.7 serves them; kio has no schemas for them) through
their handlers against a real in-memory node, decoded strictly with the hand-written
response schemas (sink.kafka.protocol.legacy_schemas)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from crc32c import crc32c
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from sink.kafka.handlers import SUPPORTED
from sink.kafka.protocol.legacy_schemas import LEGACY
from sink.kafka.protocol.messageset import LegacyRecord, batch_records, encode_message
from sink.kafka.protocol.records import parse_batches
from sink.state import commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import request_values
from tests.unit.sink.test_handlers import call, produce_values


def _list_offsets_v0(ts: int, max_num: int) -> dict:
    return request_values(2) | {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "timestamp": ts, "max_num_offsets": max_num},
                    {"partition_index": 7, "timestamp": ts, "max_num_offsets": max_num},
                ],
            }
        ]
    }


def test_every_legacy_version_is_advertised() -> None:
    for api_key, version in LEGACY:
        lo, hi = SUPPORTED[api_key]
        assert lo <= version <= hi, (api_key, version)


@pytest.mark.parametrize(
    "ts, max_num, offsets",
    [(-1, 1, [3]), (-1, 5, [3, 0]), (-2, 1, [0]), (-1, 0, []), (1_700_000_000_000, 1, [])],
)
def test_list_offsets_v0_old_style_offsets(ts: int, max_num: int, offsets: list[int]) -> None:
    node = MemoryNode()
    call(node, 0, 9, produce_values(make_batch([b"a", b"b", b"c"])))
    r = call(node, 2, 0, _list_offsets_v0(ts, max_num))
    p0, p7 = r.topics[0].partitions
    assert (int(p0.error_code), list(p0.old_style_offsets)) == (0, offsets)
    assert (int(p7.error_code), list(p7.old_style_offsets)) == (3, [])  # no partition 7


def test_list_offsets_v0_on_a_follower() -> None:
    node = MemoryNode(node_id=2, leader_id=1)
    # A topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION on every broker, as Kafka.
    r = call(node, 2, 0, _list_offsets_v0(-1, 1))
    assert {int(p.error_code) for p in r.topics[0].partitions} == {3}
    node.apply(commands.encode_create_topic("t", 8, uuid.uuid4()))  # partitions 0 and 7 exist
    r = call(node, 2, 0, _list_offsets_v0(-1, 1))
    assert {int(p.error_code) for p in r.topics[0].partitions} == {6}  # NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("commit_version", [0, 1])
def test_offset_commit_v0_v1_then_offset_fetch_v0(commit_version: int) -> None:
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    values = request_values(8)
    values["topics"][0]["partitions"][0] |= {
        "committed_offset": 42,
        "committed_metadata": None,
        "commit_timestamp": 1_700_000_000_000,
    }
    oc = call(node, 8, commit_version, values)
    assert [int(p.error_code) for p in oc.topics[0].partitions] == [0]
    of = call(node, 9, 0)
    got = {
        p.partition_index: (p.committed_offset, int(p.error_code)) for p in of.topics[0].partitions
    }
    assert got == {0: (42, 0), 1: (-1, 0)}
    follower = MemoryNode(node_id=2, leader_id=1)
    assert int(call(follower, 8, commit_version).topics[0].partitions[0].error_code) == 16
    assert {int(p.error_code) for p in call(follower, 9, 0).topics[0].partitions} == {16}


def _message_set(magic: int, n: int, codec: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=b"k%d" % i, value=None)
    return bytes(b.build())


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_v2_stores_one_record_batch_v2(version: int) -> None:
    node = MemoryNode()
    magic = 1 if version == 2 else 0
    r = call(node, 0, version, produce_values(_message_set(magic, 3, codec=1)))
    part = r.responses[0].partition_responses[0]
    assert (int(part.error_code), part.base_offset) == (0, 0)
    if version >= 2:
        assert part.log_append_time is None  # -1: CreateTime
    r = call(node, 0, version, produce_values(_message_set(magic, 2)))
    assert r.responses[0].partition_responses[0].base_offset == 3
    # What storage holds is RecordBatch v2, read by the v2 path (Fetch v12).
    f = call(node, 1, 12)
    records = f.responses[0].partitions[0].records
    batches = parse_batches(records)
    assert [b.record_count for b in batches] == [3, 2]
    assert [b.compression for b in batches] == [1, 0]
    got = [(r.key, r.value, r.timestamp) for r in batch_records(records[: batches[0].size], 0)]
    ts = [1_700_000_000_000 + i if magic else -1 for i in range(3)]
    assert got == [(b"k%d" % i, None, ts[i]) for i in range(3)]


def test_produce_v0_bad_crc_is_corrupt_message_for_that_partition_only() -> None:
    node = MemoryNode()
    good = _message_set(0, 1)
    bad = bytearray(good)
    bad[-1] ^= 1
    values = produce_values(good)
    values["topic_data"][0]["partition_data"] = [
        {"index": 0, "records": bytes(bad)},
        {"index": 1, "records": good},
    ]
    r = call(node, 0, 0, values)
    codes = [int(p.error_code) for p in r.responses[0].partition_responses]
    assert codes[0] == 2  # CORRUPT_MESSAGE
    assert codes[1] != 2  # judged on its own (partition 1 does not exist: 3)
    assert node.fsm.high_watermark("t", 0) == 0


def _fetch(offset: int, partition_max: int, max_bytes: int = 1 << 20) -> dict:
    return request_values(1) | {
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": partition_max}
                ],
            }
        ],
    }


def _messages(records: bytes) -> list[tuple]:
    mr = MemoryRecords(records)
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        if batch is None:
            break
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_v3_down_converts_to_message_sets(version: int) -> None:
    node = MemoryNode()
    call(node, 0, 9, produce_values(make_batch([b"a", b"b"])))
    call(node, 0, 2, produce_values(_message_set(1, 2)))
    f = call(node, 1, version, _fetch(1, 1 << 20))
    (p,) = f.responses[0].partitions
    assert (int(p.error_code), p.high_watermark) == (0, 4)
    magic = 0 if version <= 1 else 1
    assert p.records[16] == magic  # offset, size, crc, then magic
    got = _messages(p.records)
    ts0 = 1_700_000_000_000
    want = [(1, b"b", None), (2, None, b"k0"), (3, None, b"k1")]
    assert [(o, v, k) for o, _ts, k, v in got] == want
    if magic:
        assert [ts for _o, ts, _k, _v in got][1:] == [ts0, ts0 + 1]
    else:
        assert {ts for _o, ts, _k, _v in got} == {None}


def test_fetch_size_rules_of_v0_v2_and_v3() -> None:
    """v0-2: partition_max_bytes is a hard limit (a partial first message when none fits);
    v3: KIP-74, the response's first message whole even above both limits."""
    node = MemoryNode()
    call(node, 0, 9, produce_values(make_batch([b"x" * 500, b"y" * 10])))
    one = len(encode_message(1, LegacyRecord(0, -1, None, b"x" * 500)))
    p = call(node, 1, 2, _fetch(0, 100)).responses[0].partitions[0]
    assert len(p.records) == 100 and _messages(p.records) == []  # partial
    p = call(node, 1, 2, _fetch(0, one + 10)).responses[0].partitions[0]
    assert [m[0] for m in _messages(p.records)] == [0]  # the second does not fit
    p = call(node, 1, 3, _fetch(0, 100, max_bytes=100)).responses[0].partitions[0]
    assert [m[0] for m in _messages(p.records)] == [0]  # whole, above both limits


def _garbage_records_batch() -> bytes:
    """A v2 batch whose header and CRC-32C are valid but whose records are not (found by
    the fuzzer). Ingest now decodes every record and refuses it; a log written before
    that (or damaged since) can still hold one, so serving must survive it too."""
    batch = bytearray(make_batch([b"abc", b"def"]))
    batch[61] = 0x01  # first record's length varint: -1 (zigzag)
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


async def _produce_raw(node: MemoryNode, records: bytes, batches) -> None:
    await node.produce("t", 0, records, batches)


@pytest.mark.parametrize("version", [0, 3])
def test_fetch_v0_v3_of_undecodable_records_is_corrupt_message(version: int) -> None:
    node = MemoryNode()
    r = call(node, 0, 9, produce_values(_garbage_records_batch()))
    assert int(r.responses[0].partition_responses[0].error_code) == 87  # INVALID_RECORD
    assert node.fsm.high_watermark("t", 0) == 0
    # Stored anyway (an older log): appended below the Kafka front end.
    batches = parse_batches(_garbage_records_batch())
    asyncio.run(_produce_raw(node, _garbage_records_batch(), batches))
    assert node.fsm.high_watermark("t", 0) == 2
    p = call(node, 1, version, _fetch(0, 1 << 20)).responses[0].partitions[0]
    assert (int(p.error_code), p.records) == (2, b"")  # CORRUPT_MESSAGE, no traceback


def test_produce_to_a_partition_or_topic_that_does_not_exist_on_a_follower() -> None:
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION on every broker; with partition groups no
    node leads a partition that does not exist, so the leadership check answered
    NOT_LEADER_OR_FOLLOWER on every node (found by the conformance harness routed to the
    partition's leader). Where auto-creation is on, a follower still sends the client to
    the controller (NOT_LEADER_OR_FOLLOWER): that node creates the topic."""
    node = MemoryNode(node_id=2, leader_id=1, auto_create_topics=False)
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    values = request_values(0) | {
        "acks": -1,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [
                    {"index": 0, "records": make_batch([b"a"])},
                    {"index": 7, "records": make_batch([b"a"])},
                ],
            },
            {"name": "nope", "partition_data": [{"index": 0, "records": make_batch([b"a"])}]},
        ],
    }
    r = call(node, 0, 9, values)
    codes = {
        (t.name, p.index): int(p.error_code) for t in r.responses for p in t.partition_responses
    }
    assert codes == {("t", 0): 6, ("t", 7): 3, ("nope", 0): 3}
    creating = MemoryNode(node_id=2, leader_id=1, auto_create_topics=True)
    r = call(creating, 0, 9, values)
    assert int(r.responses[1].partition_responses[0].error_code) == 6
