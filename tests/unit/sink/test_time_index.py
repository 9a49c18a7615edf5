"""ListOffsets by timestamp: the time index and the exact-record lookup
(sink/state/time_index.py, time_lookup.py) against a real in-memory node, including
Redpanda's published failure cases (batch start instead of the record, non-monotonic
CreateTime, a time inside a batch, lookups after the start was removed)."""

from __future__ import annotations

import random

import cramjam
import pytest

from sink.kafka.protocol.codecs import GZIP, LZ4, SNAPPY
from sink.kafka.protocol.record_times import record_timestamps
from sink.kafka.protocol.records import BatchError
from sink.state import SinkStateMachine, admin_commands, commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode


def node_with(batches: list[list[int]], codec: int = 0) -> MemoryNode:
    """A node whose topic "t" partition 0 holds one batch per list of timestamps."""
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, __import__("uuid").uuid4()))
    for ts in batches:
        batch = make_batch([b"v%d" % t for t in ts], timestamps=ts, compression=codec)
        r = node.apply(commands.encode_produce("t", 0, -1, -1, -1, batch))
        assert int(r.error) == 0
    return node


def lookup(node: MemoryNode, ts: int) -> tuple[int, int] | None:
    m = node.fsm.offset_for_timestamp("t", 0, ts)
    return None if m is None else (m.offset, m.timestamp)


def brute(batches: list[list[int]], ts: int, start: int = 0) -> tuple[int, int] | None:
    flat = [t for b in batches for t in b]
    for off, t in enumerate(flat):
        if off >= start and t >= ts:
            return off, t
    return None


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4])
def test_exact_record_inside_a_batch_out_of_order_create_time(codec):
    batches = [[100, 300, 200], [150, 150, 500], [400, 450]]
    node = node_with(batches, codec)
    assert lookup(node, 0) == (0, 100)  # before the first record: the first record
    assert lookup(node, 101) == (1, 300)  # inside batch 0, not its base offset
    assert lookup(node, 201) == (1, 300)
    assert lookup(node, 301) == (5, 500)  # batch 1's max, not batch 2 by position
    assert lookup(node, 400) == (5, 500)
    assert lookup(node, 500) == (5, 500)
    assert lookup(node, 501) is None  # after the last record: -1/-1
    m = node.fsm.offset_for_timestamp("t", 0, -3)
    assert (m.offset, m.timestamp) == (5, 500)


def test_zstd_batch_is_decoded():
    recs_batch = make_batch([b"a", b"b"], timestamps=[10, 20])
    # Recompress the records of an uncompressed batch with zstd (codec 4).
    import struct

    from crc32c import crc32c

    body = bytes(cramjam.zstd.compress(recs_batch[61:]))
    hdr = bytearray(recs_batch[:61])
    struct.pack_into(">i", hdr, 8, 49 + len(body))
    struct.pack_into(">h", hdr, 21, 4)
    batch = bytearray(hdr + body)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert record_timestamps(bytes(batch)) == [(0, 10), (1, 20)]


def test_log_append_time_uses_the_header_time():
    batch = bytearray(make_batch([b"a", b"b"], timestamps=[5, 7]))
    batch[22] |= 0x08  # attributes bit 3: LogAppendTime; maxTimestamp (7) is the append time
    assert record_timestamps(bytes(batch)) == [(0, 7), (1, 7)]


def test_damaged_records_raise_batch_error():
    batch = make_batch([b"abc"], timestamps=[1])
    with pytest.raises(BatchError):
        record_timestamps(batch[:65])


def test_random_batches_match_a_brute_force_scan():
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    batches = [[rng.randrange(0, 1000) for _ in range(rng.randrange(1, 6))] for _ in range(40)]
    node = node_with(batches)
    for ts in [*range(-5, 1010, 7), 0, 999, 1000]:
        if ts in (-1, -2, -3, -4):
            continue
        assert lookup(node, ts) == brute(batches, ts), (seed, ts)
    # After DeleteRecords inside a batch, nothing below the new start is answered.
    start = sum(len(b) for b in batches[:10]) + 1
    r = node.apply(admin_commands.encode_delete_records("t", 0, start))
    assert (int(r.error), r.low_watermark) == (0, start)
    for ts in range(0, 1001, 13):
        assert lookup(node, ts) == brute(batches, ts, start), (seed, ts)
    # A snapshot answers the same.
    twin = SinkStateMachine()
    twin.on_snapshot_load(node.fsm.on_snapshot_save())
    twin.attach_log(node.log.read, lambda: node.log.first)
    for ts in range(0, 1001, 13):
        m = twin.offset_for_timestamp("t", 0, ts)
        assert (None if m is None else (m.offset, m.timestamp)) == brute(batches, ts, start)


def test_lookup_after_compaction_answers_from_the_new_start():
    batches = [[1000, 1001], [900, 950], [2000]]
    node = node_with(batches)
    node.log.compact(3)  # entries 1 (create) and 2 (batch 0) are gone
    assert node.fsm.log_start_offset("t", 0) == 2
    assert lookup(node, 0) == (2, 900)  # before the log start: the first retained record
    assert lookup(node, 1000) == (4, 2000)  # the outlier in the removed batch does not count
    m = node.fsm.offset_for_timestamp("t", 0, -3)
    assert (m.offset, m.timestamp) == (4, 2000)


def test_old_snapshot_without_time_columns_loads():
    node = node_with([[5, 6]])
    import json
    import zlib

    state = json.loads(zlib.decompress(node.fsm.on_snapshot_save()))
    for _t, _p, d in state["parts"]:
        del d["ts"], d["sz"]
    twin = SinkStateMachine()
    twin.on_snapshot_load(zlib.compress(json.dumps(state).encode()))
    twin.attach_log(node.log.read, lambda: node.log.first)
    # No timestamps known: a lookup reads the batch and still answers exactly.
    m = twin.offset_for_timestamp("t", 0, 6)
    assert (m.offset, m.timestamp) == (1, 6)
    assert twin.offset_for_timestamp("t", 0, 7) is None
    m = twin.offset_for_timestamp("t", 0, -5)
    assert (m.offset, m.timestamp) == (0, 5)


def test_partition_size_counts_retained_batches():
    node = node_with([[1], [2, 3]])
    sizes = [
        len(make_batch([b"v1"], timestamps=[1])),
        len(make_batch([b"v2", b"v3"], timestamps=[2, 3])),
    ]
    assert node.fsm.partition_size("t", 0) == sum(sizes)
    node.apply(admin_commands.encode_delete_records("t", 0, 1))
    assert node.fsm.partition_size("t", 0) == sizes[1]


def test_list_offsets_handler_answers_the_record():
    from tests.unit.sink.requests import request_values
    from tests.unit.sink.test_handlers import call

    node = node_with([[100, 300, 200], [400]])

    def ask(version, ts):
        values = request_values(2)
        values["topics"][0]["partitions"][0]["timestamp"] = ts
        p = call(node, 2, version, values).topics[0].partitions[0]
        return int(p.error_code), p.offset, p.timestamp

    assert ask(8, 250) == (0, 1, 300)
    assert ask(1, 250)[:2] == (0, 1)
    assert ask(8, 401) == (0, -1, -1)
    assert ask(8, -3) == (0, 3, 400)
    assert ask(8, -1) == (0, 4, -1)
    assert ask(8, -2) == (0, 0, -1)


@pytest.mark.parametrize("version", [9, 10, 11])
def test_list_offsets_tiered_specs_answer_nothing_tiered(version):
    """-5 latest tiered (v9+) and -6 earliest pending upload (v11): -1 / -1 / -1, as Kafka
    answers without tiered storage (a lookup by time -5 would answer offset 0); the other
    specs answer as in v8 (v10's timeout is read and ignored)."""
    from tests.unit.sink.requests import request_values
    from tests.unit.sink.test_handlers import call

    node = node_with([[100, 300, 200], [400]])

    def ask(ts):
        values = request_values(2)
        values["topics"][0]["partitions"][0]["timestamp"] = ts
        p = call(node, 2, version, values).topics[0].partitions[0]
        return int(p.error_code), p.offset, p.timestamp, p.leader_epoch

    assert ask(-5) == (0, -1, -1, -1)
    assert ask(-6) == (0, -1, -1, -1)
    assert ask(-1)[:3] == (0, 4, -1)
    assert ask(-3)[:3] == (0, 3, 400)
    assert ask(250)[:3] == (0, 1, 300)
