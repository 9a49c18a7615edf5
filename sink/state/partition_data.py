"""PartitionData: the data-group part of the sink's state, for the partitions it holds.

Per partition, keyed by PartKey = (topic id as 32 hex digits, partition):
  - the offset index with its time columns (PartitionLog, time_index.py): offsets,
    log start, each batch's Raft log index, max timestamp and size;
  - the idempotent-producer state (ProducerTable rows (pid, topic id, partition));
  - the leader epochs (EpochTable), the retention rows (sink.topics.retention);
  - what each pipeline has committed in it (the retention floor).
Batch bytes are not kept: they stay in the group's Raft log, read back through
attach_log()'s reader by log index.

It knows no topic names and no topic table (a data group will not host them): the
controller part (SinkStateMachine) or the data group (DataGroupMachine) resolves names
and decides which partitions exist, then calls add_partition / drop_partition. The one
thing taken from topic configs, the retention policy, is passed in to apply_retention;
nothing else in an apply depends on configs (a LogAppendTime stamp is written into the
batch by the proposing leader, so it is in the entry).

Invariants: every row of every table belongs to a partition in `parts` (drop_partition
removes a partition's rows from all of them); only applied (hence committed) batches
are indexed, so a high watermark never decreases on a node; every method that applies
is a pure function of the state and the entry, so all replicas and every replay from a
snapshot agree (tests/unit/sink/test_state_split.py). The topic component is the id,
not the name: a topic deleted and re-created under its name is a different key.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from raftlog.entry import LogEntry
from raftlog.storage.errors import LogRangeError
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
from sink.kafka.protocol.record_times import batch_max_timestamp
from sink.kafka.protocol.records import patched_prefix, record_count
from sink.state import commands as cmd
from sink.state import time_lookup
from sink.state.epochs import EpochTable
from sink.state.partitions import PartitionLog
from sink.state.producers import SEQ_MODULUS, ProducerTable
from sink.topics import retention as topic_retention
from sink.topics.configs import TopicPolicy

PartKey = tuple[str, int]
"""(topic id as uuid.hex, partition): the key of every per-partition table here."""

ReadEntries = Callable[[int, int, int], list[LogEntry]]


def part_key(topic_id: uuid.UUID, partition: int) -> PartKey:
    return topic_id.hex, partition


class ProduceResult(NamedTuple):
    """Outcome of one produce entry: error code, base offset (-1 on error), log start."""

    error: ErrorCode
    base_offset: int
    log_start_offset: int
    duplicate: bool = False


class DeleteRecordsResult(NamedTuple):
    error: ErrorCode
    low_watermark: int


UNKNOWN_PARTITION = ProduceResult(ErrorCode.unknown_topic_or_partition, -1, -1)


class PartitionData:
    """The partitions of one data group (today's single group: all of them)."""

    def __init__(self) -> None:
        self.parts: dict[PartKey, PartitionLog] = {}
        self.producers = ProducerTable()
        self.epochs = EpochTable()
        self.retention = topic_retention.RetentionIndex()
        # pipeline -> PartKey -> next offset it will read. Retention never compacts
        # past what a registered pipeline still needs (retention_floor_index).
        self.pipelines: dict[str, dict[PartKey, int]] = {}
        self._read_entries: ReadEntries | None = None
        self._first_index: Callable[[], int] | None = None
        self._data_event: asyncio.Event | None = None
        self.on_notify: Callable[[], None] | None = None

    # ------------------------------------------------------------ wiring

    def attach_log(
        self, read_entries: ReadEntries, first_index: Callable[[], int] | None = None
    ) -> None:
        """read_entries(start, max_count, max_bytes) -> entries of this group's log;
        first_index(), if given, lets reads notice compaction up front."""
        self._read_entries = read_entries
        self._first_index = first_index

    def data_event(self) -> asyncio.Event:
        """An event set the next time new records are applied (Fetch long-poll)."""
        if self._data_event is None:
            self._data_event = asyncio.Event()
        return self._data_event

    def notify_data(self) -> None:
        ev, self._data_event = self._data_event, None
        if ev is not None:
            ev.set()
        if self.on_notify is not None:  # a node-wide waiter (sink.node.data_groups)
            self.on_notify()

    # -------------------------------------------------------- partitions

    def add_partition(self, key: PartKey) -> bool:
        """Host key from now on (empty); False if already hosted (its data is kept)."""
        if key in self.parts:
            return False
        self.parts[key] = PartitionLog()
        return True

    def drop_partition(self, key: PartKey) -> bool:
        """Forget the partition in every table; False if it was not hosted. Its batches
        stay in the Raft log until compacted, but nothing here holds them back."""
        gone = self.parts.pop(key, None) is not None
        topic, partition = key
        self.producers.drop_partition(topic, partition)
        self.epochs.drop(topic, partition)
        self.retention.parts.pop(key, None)
        for offsets in self.pipelines.values():
            offsets.pop(key, None)
        return gone

    def has(self, key: PartKey) -> bool:
        return key in self.parts

    def hosted(self) -> Iterator[PartKey]:
        return iter(self.parts)

    # ------------------------------------------------------------- apply

    def apply_produce(
        self, key: PartKey, e: LogEntry, pid: int, epoch: int, base_seq: int, at: int
    ) -> ProduceResult:
        """One produce entry e whose RecordBatch starts at byte `at`: sequence checks
        (pid >= 0), then the batch gets the partition's next offsets."""
        part = self.parts.get(key)
        if part is None:
            return UNKNOWN_PARTITION
        batch = memoryview(e.data)[at:]
        count = record_count(batch)
        topic, partition = key
        if pid >= 0:
            last_seq = (base_seq + count - 1) % SEQ_MODULUS
            verdict = self.producers.check(pid, topic, partition, epoch, base_seq, last_seq)
            if verdict.duplicate:
                return ProduceResult(
                    ErrorCode.none, verdict.base_offset, part.log_start_offset, True
                )
            if verdict.error != ErrorCode.none:
                return ProduceResult(verdict.error, -1, part.log_start_offset)
            base = part.append(e.index, count, batch_max_timestamp(batch), len(batch))
            self.producers.record(pid, topic, partition, epoch, base_seq, last_seq, base, e.index)
        else:
            base = part.append(e.index, count, batch_max_timestamp(batch), len(batch))
        self.epochs.note(topic, partition, e.term, base)
        self.retention.on_append(topic, partition, e.index, batch)
        return ProduceResult(ErrorCode.none, base, part.log_start_offset)

    def apply_delete_records(self, key: PartKey, offset: int) -> DeleteRecordsResult:
        """The log start moves to offset (-1: the high watermark), never back; beyond
        the high watermark -> OFFSET_OUT_OF_RANGE. Answers the low watermark."""
        part = self.parts.get(key)
        if part is None:
            return DeleteRecordsResult(ErrorCode.unknown_topic_or_partition, -1)
        offset = part.next_offset if offset == -1 else offset
        if offset < 0 or offset > part.next_offset:
            return DeleteRecordsResult(ErrorCode.offset_out_of_range, part.log_start_offset)
        return DeleteRecordsResult(ErrorCode.none, part.advance_start(offset))

    def apply_pipeline_commit(self, pipeline: str, offsets: Iterable[tuple[PartKey, int]]) -> int:
        """A pipeline's consumed offsets (they only move forward; partitions not hosted
        are ignored); returns how many partitions it now covers."""
        mine = self.pipelines.setdefault(pipeline, {})
        for key, offset in offsets:
            if key in self.parts and offset >= mine.get(key, 0):
                mine[key] = offset
        return len(mine)

    def expire_producers(self, expired: list[tuple[int, int]]) -> int:
        return self.producers.expire(expired)

    def apply_retention(
        self, now_ms: int, policy_of: Callable[[str], TopicPolicy]
    ) -> tuple[int | None, int]:
        """Retention by time and size on this node's clock (sink.topics.retention);
        policy_of(topic id hex) -> the topic's policy. Returns (highest compactable log
        index or None: no partition retains data, batches removed)."""
        return topic_retention.apply_retention(
            self.retention, self.parts, self.pipelines, policy_of, now_ms
        )

    def shortest_retention_ms(self, policy_of: Callable[[str], TopicPolicy]) -> int | None:
        """The smallest retention.ms among the hosted partitions' topics (None: every one
        keeps forever, retention.ms -1): how often retention needs checking here."""
        times = (policy_of(t).retention_ms for t in {t for t, _ in self.parts})
        return min((ms for ms in times if ms >= 0), default=None)

    def retention_floor_index(self) -> int | None:
        """Highest Raft log index that can be compacted without removing a record
        some registered pipeline has not committed; None: no pipeline constrains.
        A pipeline holds, in each partition it committed, the batch containing its
        next offset and everything after it."""
        floor: int | None = None
        for offsets in self.pipelines.values():
            for key, offset in offsets.items():
                part = self.parts.get(key)
                if part is None or offset >= part.next_offset:
                    continue  # fully consumed: holds nothing back
                pos = part.position(max(offset, part.log_start_offset))
                if pos < len(part.log_index):
                    limit = part.log_index[pos] - 1
                    floor = limit if floor is None else min(floor, limit)
        return floor

    # ----------------------------------------------------------- read side

    def part(self, key: PartKey) -> PartitionLog:
        """The partition's index, trimmed to the log's first index (KeyError: unknown)."""
        part = self.parts.get(key)
        if part is None:
            raise KeyError(f"unknown topic-partition {key[0]}-{key[1]}")
        if self._first_index is not None:
            part.trim_below(self._first_index())
        return part

    def high_watermark(self, key: PartKey) -> int:
        """Next offset of applied data (KeyError for an unknown partition)."""
        part = self.parts.get(key)
        if part is None:
            raise KeyError(f"unknown topic-partition {key[0]}-{key[1]}")
        return part.next_offset

    def log_start_offset(self, key: PartKey) -> int:
        return self.part(key).log_start_offset

    def partition_size(self, key: PartKey) -> int:
        """Stored batch bytes of the partition's retained batches (DescribeLogDirs)."""
        return self.part(key).retained_bytes()

    def offset_for_timestamp(
        self, key: PartKey, timestamp: int, label: str = ""
    ) -> time_lookup.TimeMatch | None:
        """ListOffsets by time: the first retained record with a timestamp >= timestamp,
        or, for -3 (MAX_TIMESTAMP), the record with the largest timestamp; None: no such
        record (OffsetOutOfRange if compacted under the lookup three times)."""
        for _ in range(3):
            part = self.part(key)
            try:
                if timestamp == -3:
                    return time_lookup.offset_of_max_time(part, self._read_entry)
                return time_lookup.offset_for_time(part, timestamp, self._read_entry)
            except LogRangeError:  # compacted under the lookup: trim, then look again
                continue
        raise OffsetOutOfRange(f"{label or key} compacted during a timestamp lookup")

    def _read_entry(self, index: int) -> LogEntry:
        if self._read_entries is None:
            raise RuntimeError("attach_log() was not called")
        entries = self._read_entries(index, 1, 1)
        if not entries or entries[0].index != index:
            raise LogRangeError(index)
        return entries[0]

    def read_parts(
        self, key: PartKey, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes, memoryview]]:
        """Whole batches from the one containing offset: (base offset, patched
        16-byte prefix, rest of the batch). At least one batch when offset <
        high watermark, then more while the total stays below max_bytes.
        OffsetOutOfRange if offset < log start or > high watermark."""
        part = self.part(key)
        if offset < part.log_start_offset or offset > part.next_offset:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{part.log_start_offset}, {part.next_offset}]"
            )
        if offset == part.next_offset:
            return []
        if self._read_entries is None:
            raise RuntimeError("attach_log() was not called")
        bases, idx = part.bases, part.log_index
        n = len(bases)
        pos = part.position(offset)
        out: list[tuple[int, bytes, memoryview]] = []
        total = 0
        while pos < n and (not out or total < max_bytes):
            lo = idx[pos]
            span = idx[min(n, pos + 256) - 1] - lo + 1
            try:
                entries = self._read_entries(lo, span, max(max_bytes - total, 1))
            except LogRangeError:
                # Compacted under us (retention): the partition starts later now.
                part.trim_below(lo + 1)
                if out:
                    break
                raise OffsetOutOfRange(f"offset {offset} was compacted away") from None
            progressed = False
            for e in entries:
                if pos >= n or (out and total >= max_bytes):
                    break
                if e.index != idx[pos]:
                    continue
                data = e.data
                mv = memoryview(data)[cmd.produce_batch_offset(data) :]
                out.append((bases[pos], patched_prefix(mv, bases[pos], e.term), mv[16:]))
                total += len(mv)
                pos += 1
                progressed = True
            if not progressed:
                break
        return out

    # ------------------------------------------------------------ snapshots

    def to_json(self) -> dict[str, Any]:
        """This part of a snapshot: top-level keys of the machine's snapshot."""
        return {
            "parts": [[t, p, part.to_json()] for (t, p), part in self.parts.items()],
            "producers": self.producers.to_json(),
            "pipelines": {
                name: [[t, p, o] for (t, p), o in offs.items()]
                for name, offs in self.pipelines.items()
            },
            "epochs": self.epochs.to_json(),
            "retention": self.retention.to_json(),
        }

    def load_json(
        self, state: dict[str, Any], topic_of: Callable[[str], str | None] | None = None
    ) -> None:
        """Replace everything with a snapshot's part (missing keys: written before that
        table existed, loaded empty). topic_of maps each row's topic component to a
        topic id hex (a v1 snapshot keyed rows by name; None drops the row)."""

        def rows(key: str, default: Any) -> Any:
            data = state.get(key, default)
            if topic_of is None:
                return data
            return _rekey(key, data, topic_of)

        self.parts = {(t, p): PartitionLog.from_json(d) for t, p, d in rows("parts", [])}
        self.producers = ProducerTable.from_json(rows("producers", []))
        self.pipelines = {
            name: {(t, p): o for t, p, o in offs} for name, offs in rows("pipelines", {}).items()
        }
        self.epochs = EpochTable.from_json(rows("epochs", []))
        self.retention.load_json(rows("retention", []))
        self.notify_data()


def _rekey(key: str, data: Any, topic_of: Callable[[str], str | None]) -> Any:
    """A v1 table with its topic names replaced by ids (rows of unknown names dropped)."""
    if key == "pipelines":
        return {name: _rekey("rows", offs, topic_of) for name, offs in data.items()}
    at = 1 if key == "producers" else 0  # producers' rows are [pid, topic, partition, ...]
    out = []
    for row in data:
        tid = topic_of(row[at])
        if tid is not None:
            out.append([*row[:at], tid, *row[at + 1 :]])
    return out
