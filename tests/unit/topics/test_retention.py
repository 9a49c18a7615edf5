"""Retention by time and size (sink.topics.retention) on a real SinkStateMachine: log
starts move per topic, pipelines hold data up to their hard limits, the compaction
limit is what no partition retains, and the index survives a snapshot. Also the
LogAppendTime stamp (flag, max timestamp, CRC)."""

from __future__ import annotations

import struct
import uuid

from crc32c import crc32c

from sink.kafka.protocol.records import parse_batches
from sink.state import SinkStateMachine, commands
from sink.topics import state as topic_state
from sink.topics.retention import batch_max_timestamp
from sink.topics.stamp import stamp_log_append_time
from tests.helpers.state_log import StateLog
from tests.unit.sink.batches import make_batch

NOW = 1_800_000_000_000


def batch_at(ts: int, values: list[bytes] | None = None) -> bytes:
    """A valid batch whose maxTimestamp is ts."""
    b = bytearray(make_batch(values or [b"x" * 50]))
    struct.pack_into(">q", b, 35, ts)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


class Log(StateLog):
    def create(self, name: str, configs: dict[str, str], partitions: int = 1) -> None:
        assert self.apply(topic_state.encode_create(name, partitions, uuid.uuid4(), configs)).topic

    def produce(self, topic: str, ts: int, partition: int = 0) -> int:
        return self.apply(
            commands.encode_produce(topic, partition, -1, -1, -1, batch_at(ts))
        ).base_offset


def test_time_retention_moves_the_log_start_and_the_compaction_limit():
    log = Log()
    log.create("short", {"retention.ms": "60000"})
    log.create("long", {})  # the 7-day default
    for i in range(10):  # offsets 0-9: one batch a minute, the newest NOW
        log.produce("short", NOW - (9 - i) * 60_000)
    long_first = log.index + 1
    log.produce("long", NOW - 3600_000)
    limit, removed = log.fsm.apply_retention(NOW)
    # Kept: batches with max timestamp >= NOW - 60 s: offsets 8 and 9.
    assert log.fsm.log_start_offset("short", 0) == 8 and removed == 8
    assert log.fsm.log_start_offset("long", 0) == 0
    assert limit == min(long_first, log.fsm.data.parts[log.fsm.key_of("short", 0)].log_index[8]) - 1
    # Later, everything of "short" expires: only "long" constrains compaction.
    limit, _ = log.fsm.apply_retention(NOW + 3600_000)
    assert log.fsm.log_start_offset("short", 0) == 10 == log.fsm.high_watermark("short", 0)
    assert limit == long_first - 1
    # The log start never moves back (an older clock keeps what is gone, gone).
    log.fsm.apply_retention(NOW - 10 * 3600_000)
    assert log.fsm.log_start_offset("short", 0) == 10


def test_out_of_order_timestamps_stop_time_retention_at_the_first_young_batch():
    log = Log()
    log.create("t", {"retention.ms": "1000"})
    log.produce("t", NOW - 10_000)
    log.produce("t", NOW)  # young
    log.produce("t", NOW - 10_000)  # old, but behind a young one: kept (as Kafka's segments)
    log.fsm.apply_retention(NOW)
    assert log.fsm.log_start_offset("t", 0) == 1


def test_size_retention_keeps_at_least_retention_bytes():
    log = Log()
    size = len(batch_at(NOW))
    log.create("t", {"retention.bytes": str(3 * size)})
    for _ in range(10):
        log.produce("t", NOW)
    log.fsm.apply_retention(NOW)
    assert log.fsm.log_start_offset("t", 0) == 7  # the newest 3 batches
    assert log.fsm.data.retention.partition_bytes(*log.fsm.key_of("t", 0)) == 3 * size


def test_pipeline_holds_until_commit_then_hard_limit_wins():
    log = Log()
    log.create("t", {"retention.ms": "1000", "raftsink.pipeline.hold.max.ms": "100000"})
    for i in range(10):
        log.produce("t", NOW - (10 - i) * 20_000)  # all older than retention.ms
    log.apply(commands.encode_commit_offsets("spark-1", [("t", 0, 4)]))
    log.fsm.apply_retention(NOW)
    # retention says drop everything; the pipeline holds from offset 4, but the hard limit
    # (100 s) drops what is older than that: batches at NOW-200 s .. NOW-120 s (offsets 0-4).
    assert log.fsm.log_start_offset("t", 0) == 5
    log2 = Log()
    log2.create("t", {"retention.ms": "1000"})  # hold without limit
    for i in range(10):
        log2.produce("t", NOW - (10 - i) * 20_000)
    log2.apply(commands.encode_commit_offsets("spark-1", [("t", 0, 4)]))
    log2.fsm.apply_retention(NOW)
    assert log2.fsm.log_start_offset("t", 0) == 4
    log2.apply(commands.encode_commit_offsets("spark-1", [("t", 0, 10)]))  # consumed all
    log2.fsm.apply_retention(NOW)
    assert log2.fsm.log_start_offset("t", 0) == 10


def test_retention_index_survives_a_snapshot():
    log = Log()
    log.create("t", {"retention.ms": "60000"})
    for i in range(5):
        log.produce("t", NOW - (4 - i) * 60_000)
    log.fsm.apply_retention(NOW - 60_000)
    copy = SinkStateMachine()
    copy.on_snapshot_load(log.fsm.on_snapshot_save())
    assert copy.log_start_offset("t", 0) == log.fsm.log_start_offset("t", 0) == 2
    copy.apply_retention(NOW)
    assert copy.log_start_offset("t", 0) == 3


def test_log_append_time_stamp():
    raw = make_batch([b"a", b"b"])
    stamped = stamp_log_append_time(raw, NOW)
    (h,) = parse_batches(stamped)  # the CRC is valid
    assert h.attributes & 0x08 and batch_max_timestamp(stamped) == NOW
    assert stamped[:17] == raw[:17] and stamped[43:] == raw[43:]  # nothing else changed


def test_partitions_from_an_older_snapshot_pin_the_log_instead_of_being_guessed():
    import json
    import zlib

    log = Log()
    log.create("t", {"retention.ms": "1000"})
    first = log.index + 1
    for _ in range(3):
        log.produce("t", NOW - 3600_000)
    state = json.loads(zlib.decompress(log.fsm.on_snapshot_save()))
    del state["retention"]  # as written before the retention index existed
    old = SinkStateMachine()
    old.on_snapshot_load(zlib.compress(json.dumps(state).encode()))
    limit, removed = old.apply_retention(NOW)
    assert (limit, removed) == (first - 1, 0)
    assert old.log_start_offset("t", 0) == 0
