"""A real, in-memory implementation of the handlers' service interfaces
(sink.kafka.handlers.services): one node whose "Raft log" is a list, every
command applied at once to a real SinkStateMachine. Leadership is set by the
test (leader or follower, ready or not, term, caught up or not)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

from raftlog.entry import EntryType, LogEntry
from raftlog.storage.errors import LogRangeError
from sink.kafka import KafkaLimits
from sink.kafka.handlers import SUPPORTED, Advertised, HandlerContext
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader
from sink.state import CreateTopicResult, ProduceResult, SinkStateMachine, TopicInfo, commands


class MemoryLog:
    """Entries by index; compact(i) drops everything below index i."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.first = 1

    def add(self, data: bytes, term: int) -> LogEntry:
        e = LogEntry(len(self.entries) + 1, term, EntryType.DATA, data)
        self.entries.append(e)
        return e

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        if start < self.first or start > len(self.entries):
            raise LogRangeError(start)
        out, size = [], 0
        for e in self.entries[start - 1 : start - 1 + max_count]:
            out.append(e)
            size += len(e.data)
            if size >= max_bytes:
                break
        return out

    def compact(self, below: int) -> None:
        self.first = below


class MemoryNode:
    """Leadership, Producing, TopicAdmin, ProducerIds and GroupOffsets of one node."""

    def __init__(
        self,
        *,
        node_id: int = 1,
        leader_id: int = 1,
        brokers: dict[int, tuple[str, int]] | None = None,
        auto_create_topics: bool = True,
        term: int = 1,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = "memory"
        self.brokers = brokers or {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}
        self.lead = leader_id  # -1: leaderless
        self.ready = True
        self.caught_up = True
        self.term = term
        self.fsm = SinkStateMachine(auto_create_topics=auto_create_topics)
        self.log = MemoryLog()
        self.fsm.attach_log(self.log.read, lambda: self.log.first)
        self.offsets: dict[tuple[str, str, int], tuple[int, str | None]] = {}

    def apply(self, data: bytes):
        return self.fsm.on_apply([self.log.add(data, self.term)])[0]

    def context(self, limits: KafkaLimits | None = None) -> HandlerContext:
        adv = Advertised(self.brokers, forwarded_replies_usable=True)
        return HandlerContext.of_node(self, self.fsm, limits or KafkaLimits(), adv, SUPPORTED)

    # ------------------------------------------------------ Leadership

    def is_leader(self) -> bool:
        return self.lead == self.node_id

    def leader_ready(self) -> bool:
        return self.is_leader() and self.ready

    def applied_all_committed(self) -> bool:
        return self.caught_up

    def leader_id(self) -> int:
        return self.lead

    def leader_hint(self) -> int:
        return self.lead

    def leader_epoch(self) -> int:
        return self.term

    def forward_endpoint(self) -> tuple[int, str, int] | None:
        return None  # nowhere to relay: followers answer from local state

    # ------------------------------------------------------ Producing / TopicAdmin

    def produce(
        self, topic: str, partition: int, records: bytes, batches: list[BatchHeader]
    ) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if not self.is_leader():  # a follower cannot propose (raftlog: NotLeaderError)
            fut.set_result(ProduceResult(ErrorCode.not_leader_or_follower, -1, -1))
            return fut
        mv = memoryview(records)
        results = [
            self.apply(
                commands.encode_produce(
                    topic,
                    partition,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    mv[b.start : b.start + b.size],
                )
            )
            for b in batches
        ]
        bad = [r for r in results if r.error != ErrorCode.none]
        fut.set_result(bad[0] if bad else results[0])
        return fut

    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicInfo | None]:
        info = self.fsm.topic(name)
        if info is not None:
            return ErrorCode.none, info
        if not self.fsm.auto_create_topics:
            return ErrorCode.unknown_topic_or_partition, None
        res = await self.create_topic(name, self.fsm.default_partitions)
        return res.error, res.topic

    async def create_topic(self, name: str, partitions: int) -> CreateTopicResult:
        if not self.is_leader():
            return CreateTopicResult(ErrorCode.not_controller, None)
        return self.apply(commands.encode_create_topic(name, partitions, uuid.uuid4()))

    # ------------------------------------------------------ ProducerIds / GroupOffsets

    async def init_producer_id(self) -> tuple[ErrorCode, int, int]:
        return ErrorCode.none, self.apply(commands.encode_alloc_pid()), 0

    def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str | None
    ) -> None:
        self.offsets[(group, topic, partition)] = (offset, metadata)

    def committed_offset(
        self, group: str, topic: str, partition: int
    ) -> tuple[int, str | None] | None:
        return self.offsets.get((group, topic, partition))

    def committed_partitions(self, group: str) -> Iterable[tuple[str, int]]:
        return [(t, p) for g, t, p in self.offsets if g == group]


__all__ = ["MemoryLog", "MemoryNode", "ProduceResult"]
