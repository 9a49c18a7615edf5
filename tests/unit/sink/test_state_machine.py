"""Offset assignment, reads with patching, idempotence at apply time, snapshots."""

import struct
import uuid

import pytest

from raftlog.entry import EntryType, LogEntry
from raftlog.storage.errors import LogRangeError
from sink.kafka.protocol.records import parse_batches
from sink.state import OffsetOutOfRange, SinkStateMachine, commands
from tests.unit.sink.batches import make_batch


class FakeLog:
    """The Raft log as the FSM sees it: entries by index, compactable."""

    def __init__(self):
        self.entries: list[LogEntry] = []
        self.first = 1

    def add(self, data: bytes, term: int = 1) -> LogEntry:
        e = LogEntry(len(self.entries) + 1, term, EntryType.DATA, data)
        self.entries.append(e)
        return e

    def read(self, start, max_count, max_bytes):
        if start < self.first or start > len(self.entries):
            raise LogRangeError(start)
        out, size = [], 0
        for e in self.entries[start - 1 : start - 1 + max_count]:
            out.append(e)
            size += len(e.data)
            if size >= max_bytes:
                break
        return out


def setup(partitions=1):
    fsm = SinkStateMachine()
    log = FakeLog()
    fsm.attach_log(log.read, lambda: log.first)
    tid = uuid.UUID(int=5)
    fsm.on_apply([log.add(commands.encode_create_topic("t", partitions, tid))])
    return fsm, log


def produce(fsm, log, batch, partition=0, term=1):
    h = parse_batches(batch)[0]
    e = log.add(
        commands.encode_produce(
            "t", partition, h.producer_id, h.producer_epoch, h.base_sequence, batch
        ),
        term,
    )
    return fsm.on_apply([e])[0]


def test_dense_offsets_and_patched_reads():
    fsm, log = setup()
    r1 = produce(fsm, log, make_batch([b"a", b"b", b"c"]))
    r2 = produce(fsm, log, make_batch([b"d"]), term=4)
    assert (r1.error, r1.base_offset, r2.base_offset) == (0, 0, 3)
    assert fsm.high_watermark("t", 0) == 4 and fsm.log_start_offset("t", 0) == 0
    # the batch CONTAINING offset 1 is returned first, whole
    got = fsm.read("t", 0, 1, 1)
    assert [b for b, _ in got] == [0]
    assert struct.unpack_from(">q", got[0][1])[0] == 0
    got = fsm.read("t", 0, 0, 1 << 20)
    assert [b for b, _ in got] == [0, 3]
    assert struct.unpack_from(">qii", got[1][1])[0::2] == (3, 4)  # baseOffset, leader epoch = term
    for _, data in got:
        parse_batches(data)  # CRC valid after patching
    assert fsm.read("t", 0, 4, 100) == []
    with pytest.raises(OffsetOutOfRange):
        fsm.read("t", 0, 5, 100)


def test_unknown_partition_and_topic_exists():
    fsm, log = setup()
    assert produce(fsm, log, make_batch([b"x"]), partition=3).error == 3
    r = fsm.on_apply([log.add(commands.encode_create_topic("t", 2, uuid.uuid4()))])[0]
    assert r.error == 36 and r.topic.topic_id == uuid.UUID(int=5)


def test_idempotence_at_apply_time():
    fsm, log = setup()
    b0 = make_batch([b"a", b"b"], producer_id=9, epoch=0, base_sequence=0)
    b1 = make_batch([b"c"], producer_id=9, epoch=0, base_sequence=2)
    assert produce(fsm, log, b0).base_offset == 0
    assert produce(fsm, log, b1).base_offset == 2
    dup = produce(fsm, log, b0)
    assert (dup.error, dup.base_offset, dup.duplicate) == (0, 0, True)
    assert fsm.high_watermark("t", 0) == 3  # not appended twice
    gap = make_batch([b"d"], producer_id=9, epoch=0, base_sequence=7)
    assert produce(fsm, log, gap).error == 45
    assert (
        produce(fsm, log, make_batch([b"e"], producer_id=9, epoch=1, base_sequence=0)).base_offset
        == 3
    )
    assert (
        produce(fsm, log, make_batch([b"f"], producer_id=9, epoch=0, base_sequence=3)).error == 47
    )


def test_pid_allocation_through_log():
    fsm, log = setup()
    a = fsm.on_apply([log.add(commands.encode_alloc_pid())])[0]
    b = fsm.on_apply([log.add(commands.encode_alloc_pid())])[0]
    assert b == a + 1


def test_snapshot_round_trip_and_compaction_moves_log_start():
    fsm, log = setup(partitions=2)
    for i in range(5):
        produce(fsm, log, make_batch([b"x"] * 2, producer_id=1, epoch=0, base_sequence=2 * i))
    produce(fsm, log, make_batch([b"y"]), partition=1)
    snap = fsm.on_snapshot_save()
    other = SinkStateMachine()
    other.attach_log(log.read, lambda: log.first)
    other.on_snapshot_load(snap)
    assert other.topics() == fsm.topics()
    assert other.high_watermark("t", 0) == 10 and other.high_watermark("t", 1) == 1
    assert other.read("t", 0, 5, 1 << 20) == fsm.read("t", 0, 5, 1 << 20)
    # producer state survived: a retry of the last batch is a duplicate
    dup = produce(other, log, make_batch([b"x"] * 2, producer_id=1, epoch=0, base_sequence=8))
    assert dup.duplicate and dup.base_offset == 8
    # retention: entries of the first two batches compacted away
    log.first = 4
    assert other.log_start_offset("t", 0) == 4
    with pytest.raises(OffsetOutOfRange):
        other.read("t", 0, 1, 100)
    assert other.read("t", 0, 4, 1)[0][0] == 4
