"""SinkStateMachine: the replicated state of the Kafka staging log.

Applied state (identical on every node, a pure function of the log):
topics (name -> partitions, topic_id), one PartitionLog offset index per
partition, the idempotent-producer table and the next producer id. Batch bytes
are NOT kept in memory: they stay in the Raft log and are read back through
attach_log()'s reader by log index.

Only applied (hence committed) batches are in the index, so everything served
from here is committed data, and high_watermark() (= next offset of applied
data) never decreases on a node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from raftlog.entry import LogEntry
from raftlog.runtime import StateMachine
from raftlog.storage.errors import LogRangeError
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
from sink.kafka.protocol.records import patched_prefix, record_count
from sink.state import commands as cmd
from sink.state.partitions import PartitionLog
from sink.state.producers import SEQ_MODULUS, ProducerTable

log = logging.getLogger("sink.state")


FIRST_PRODUCER_ID = 1000
_SNAPSHOT_VERSION = 1


class TopicInfo(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID


class ProduceResult(NamedTuple):
    """Outcome of one PRODUCE entry: error code, base offset (-1 on error), log start."""

    error: ErrorCode
    base_offset: int
    log_start_offset: int
    duplicate: bool = False


class CreateTopicResult(NamedTuple):
    error: ErrorCode
    topic: TopicInfo | None


ReadEntries = Callable[[int, int, int], list[LogEntry]]


class SinkStateMachine(StateMachine):
    """The sink's raftlog StateMachine; also the read side for Fetch / ListOffsets.

    default_partitions / auto_create_topics are policy read by SinkService
    (they are not replicated state: every node should be configured alike).
    """

    def __init__(self, *, default_partitions: int = 1, auto_create_topics: bool = True) -> None:
        if default_partitions < 1:
            raise ValueError("default_partitions must be >= 1")
        self.default_partitions = default_partitions
        self.auto_create_topics = auto_create_topics
        self._topics: dict[str, TopicInfo] = {}
        self._parts: dict[tuple[str, int], PartitionLog] = {}
        self.producers = ProducerTable()
        self.next_producer_id = FIRST_PRODUCER_ID
        self.applied_index = 0
        self.leader_term = 0  # term of on_leader_start while leading, else 0
        self._read_entries: ReadEntries | None = None
        self._first_index: Callable[[], int] | None = None
        self._data_event: asyncio.Event | None = None
        # Consuming pipelines (Spark queries): pipeline -> (topic, partition) ->
        # next offset to read. Retention never compacts past what a registered
        # pipeline still needs (see retention_floor_index).
        self.pipelines: dict[str, dict[tuple[str, int], int]] = {}
        self.on_leader_change: list[Callable[[], None]] = []

    # ------------------------------------------------------------ wiring

    def attach_log(
        self, read_entries: ReadEntries, first_index: Callable[[], int] | None = None
    ) -> None:
        """read_entries(start, max_count, max_bytes) -> entries (node.queue.read).
        first_index() (node.queue.first_index), if given, lets the read side
        notice log compaction up front instead of on a failed read."""
        self._read_entries = read_entries
        self._first_index = first_index

    def data_event(self) -> asyncio.Event:
        """An event set the next time new records are applied (Fetch long-poll)."""
        if self._data_event is None:
            self._data_event = asyncio.Event()
        return self._data_event

    def _notify_data(self) -> None:
        ev, self._data_event = self._data_event, None
        if ev is not None:
            ev.set()

    # ------------------------------------------------------------- apply

    def on_apply(self, entries: Sequence[LogEntry]) -> list[Any]:
        results: list[Any] = []
        new_data = False
        for e in entries:
            data = e.data
            tag = data[0] if data else -1
            if tag == cmd.PRODUCE:
                r = self._apply_produce(e)
                new_data = new_data or (r.error == ErrorCode.none and not r.duplicate)
                results.append(r)
            elif tag == cmd.CREATE_TOPIC:
                results.append(self._apply_create(cmd.decode_create_topic(data)))
            elif tag == cmd.ALLOC_PID:
                results.append(self.next_producer_id)
                self.next_producer_id += 1
            elif tag == cmd.COMMIT_OFFSETS:
                results.append(self._apply_commit(cmd.decode_commit_offsets(data)))
            else:  # never crash a node over one entry it cannot read
                log.error("sink.apply unknown command tag=%r index=%d", tag, e.index)
                results.append(None)
            self.applied_index = e.index
        if new_data:
            self._notify_data()
        return results

    def _apply_produce(self, e: LogEntry) -> ProduceResult:
        c = cmd.decode_produce(e.data)
        part = self._parts.get((c.topic, c.partition))
        if part is None:
            return ProduceResult(ErrorCode.unknown_topic_or_partition, -1, -1)
        count = record_count(memoryview(e.data)[c.batch_offset :])
        if c.producer_id >= 0:
            last_seq = (c.base_sequence + count - 1) % SEQ_MODULUS
            verdict = self.producers.check(
                c.producer_id, c.topic, c.partition, c.producer_epoch, c.base_sequence, last_seq
            )
            if verdict.duplicate:
                return ProduceResult(
                    ErrorCode.none, verdict.base_offset, part.log_start_offset, True
                )
            if verdict.error != ErrorCode.none:
                return ProduceResult(verdict.error, -1, part.log_start_offset)
            base = part.append(e.index, count)
            self.producers.record(
                c.producer_id,
                c.topic,
                c.partition,
                c.producer_epoch,
                c.base_sequence,
                last_seq,
                base,
            )
        else:
            base = part.append(e.index, count)
        return ProduceResult(ErrorCode.none, base, part.log_start_offset)

    def _apply_commit(self, c: cmd.CommitOffsetsCmd) -> int:
        """Record a pipeline's consumed offsets (they only move forward); returns
        how many partitions it now covers."""
        mine = self.pipelines.setdefault(c.pipeline, {})
        for topic, partition, offset in c.offsets:
            if (topic, partition) in self._parts and offset >= mine.get((topic, partition), 0):
                mine[(topic, partition)] = offset
        return len(mine)

    def retention_floor_index(self) -> int | None:
        """Highest Raft log index that can be compacted without removing a record
        some registered pipeline has not committed; None: no pipeline constrains.

        A pipeline holds, in each partition it committed, the batch containing
        its next offset and everything after it."""
        floor: int | None = None
        for offsets in self.pipelines.values():
            for (topic, partition), offset in offsets.items():
                part = self._parts.get((topic, partition))
                if part is None or offset >= part.next_offset:
                    continue  # fully consumed: holds nothing back
                pos = part.position(max(offset, part.log_start_offset))
                keep_from = part.log_index[pos] if pos < len(part.log_index) else None
                if keep_from is not None:
                    limit = keep_from - 1
                    floor = limit if floor is None else min(floor, limit)
        return floor

    def _apply_create(self, c: cmd.CreateTopicCmd) -> CreateTopicResult:
        existing = self._topics.get(c.name)
        if existing is not None:
            return CreateTopicResult(ErrorCode.topic_already_exists, existing)
        if c.partitions < 1:
            return CreateTopicResult(ErrorCode.invalid_partitions, None)
        info = TopicInfo(c.name, c.partitions, c.topic_id)
        self._topics[c.name] = info
        for p in range(c.partitions):
            self._parts[(c.name, p)] = PartitionLog()
        return CreateTopicResult(ErrorCode.none, info)

    # ---------------------------------------------------------- leadership

    def on_leader_start(self, term: int) -> None:
        self.leader_term = term
        for cb in self.on_leader_change:
            cb()

    def on_leader_stop(self) -> None:
        self.leader_term = 0
        for cb in self.on_leader_change:
            cb()

    # ----------------------------------------------------------- read side

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self._topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def _part(self, topic: str, partition: int) -> PartitionLog:
        part = self._parts.get((topic, partition))
        if part is None:
            raise KeyError(f"unknown topic-partition {topic}-{partition}")
        return part

    def has_partition(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._parts

    def high_watermark(self, topic: str, partition: int) -> int:
        """Next offset of applied data (KeyError for an unknown partition)."""
        return self._part(topic, partition).next_offset

    def log_start_offset(self, topic: str, partition: int) -> int:
        part = self._part(topic, partition)
        if self._first_index is not None:
            part.trim_below(self._first_index())
        return part.log_start_offset

    def read_parts(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes, memoryview]]:
        """Whole batches from the one containing offset: (base offset, patched
        16-byte prefix, rest of the batch). At least one batch when offset <
        high watermark, then more while the total stays below max_bytes.
        OffsetOutOfRange if offset < log start or > high watermark."""
        part = self._part(topic, partition)
        if self._first_index is not None:
            part.trim_below(self._first_index())
        if offset < part.log_start_offset or offset > part.next_offset:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{part.log_start_offset}, {part.next_offset}]"
            )
        if offset == part.next_offset:
            return []
        if self._read_entries is None:
            raise RuntimeError("SinkStateMachine.attach_log() was not called")
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

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """As read_parts, each batch joined into bytes (baseOffset and
        partitionLeaderEpoch patched; CRC still valid)."""
        return [
            (b, prefix + bytes(rest))
            for b, prefix, rest in self.read_parts(topic, partition, offset, max_bytes)
        ]

    # ------------------------------------------------------------ snapshots

    def on_snapshot_save(self) -> bytes:
        state = {
            "v": _SNAPSHOT_VERSION,
            "applied": self.applied_index,
            "next_pid": self.next_producer_id,
            "topics": [[t.name, t.partitions, str(t.topic_id)] for t in self._topics.values()],
            "parts": [[t, p, part.to_json()] for (t, p), part in self._parts.items()],
            "producers": self.producers.to_json(),
            "pipelines": {
                name: [[t, p, o] for (t, p), o in offs.items()]
                for name, offs in self.pipelines.items()
            },
        }
        return zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 1)

    def on_snapshot_load(self, data: bytes) -> None:
        state = json.loads(zlib.decompress(data))
        if state.get("v") != _SNAPSHOT_VERSION:
            raise ValueError(f"unsupported sink snapshot version {state.get('v')!r}")
        self.applied_index = state["applied"]
        self.next_producer_id = state["next_pid"]
        self._topics = {
            name: TopicInfo(name, n, uuid.UUID(tid)) for name, n, tid in state["topics"]
        }
        self._parts = {(t, p): PartitionLog.from_json(d) for t, p, d in state["parts"]}
        self.producers = ProducerTable.from_json(state["producers"])
        self.pipelines = {
            name: {(t, p): o for t, p, o in offs}
            for name, offs in state.get("pipelines", {}).items()
        }
        self._notify_data()
