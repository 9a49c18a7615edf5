"""A real, in-memory implementation of the handlers' service interfaces
(sink.kafka.handlers.services): one node whose "Raft log" is a list, every
command applied at once to a real SinkStateMachine. Leadership is set by the
test (leader or follower, ready or not, term, caught up or not). Partition roles:
by default every partition is this one group's (as SinkService answers); a test
may give partitions their own roles (`roles[(topic, partition)] = PartitionRole`)
to play a node among many partition groups."""

from __future__ import annotations

import asyncio
import uuid

from raftlog.entry import EntryType, LogEntry
from raftlog.runtime import NotLeaderError
from raftlog.runtime.state_machine import ApplyResult
from raftlog.storage.errors import LogRangeError
from sink.groups import GroupOptions, GroupRuntime
from sink.kafka import KafkaLimits
from sink.kafka.handlers import ADVERTISED, Advertised, HandlerContext
from sink.kafka.handlers.services import PartitionRole, QuorumState
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader
from sink.lifecycle.topics import TopicLifecycle
from sink.offsets import GroupOffsetService, OffsetsOptions
from sink.quotas import Alteration, QuotaTable
from sink.state import (
    CreateTopicResult,
    ProduceResult,
    SinkStateMachine,
    TopicInfo,
    commands,
    quota_command,
)
from sink.topics import state as topic_state
from sink.topics.configs import TopicDefaults


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
    """Leadership, Producing, TopicAdmin and ProducerIds of one node; its `offsets` the
    real GroupOffsetService (sink.offsets) over the node's in-memory log."""

    def __init__(
        self,
        *,
        node_id: int = 1,
        leader_id: int = 1,
        brokers: dict[int, tuple[str, int]] | None = None,
        auto_create_topics: bool = True,
        term: int = 1,
        offsets_options: OffsetsOptions | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = "memory"
        self.brokers = brokers or {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}
        self.lead = leader_id  # -1: leaderless
        self.ready = True
        self.caught_up = True
        self.term = term
        self.roles: dict[tuple[str, int], PartitionRole] = {}  # partitions of other groups
        self.fsm = SinkStateMachine(auto_create_topics=auto_create_topics)
        self.log = MemoryLog()
        self.fsm.attach_log(self.log.read, lambda: self.log.first)
        # Committed group offsets: the real service over this node's "log".
        self.now_ms = 1_700_000_000_000  # the offset service's clock (tests move it)
        self.offsets = GroupOffsetService(
            lambda: self.fsm.group_offsets,
            self._apply_entry,
            ready=self.leader_ready,
            options=offsets_options,
            clock_ms=lambda: self.now_ms,
        )
        # The group coordinator, its proposals applied to the state machine at once.
        self.groups = GroupRuntime(
            GroupOptions(initial_rebalance_delay_ms=0),
            propose=self._propose_group,
            is_leader=self.is_leader,
            ready_term=lambda: self.term if self.leader_ready() else None,
            records=lambda: self.fsm.groups.records(),
            slot_owner=lambda _slot: self.lead,
            offset_holders=lambda: self.fsm.group_offsets,
        )
        self.offsets.membership = self.groups
        # TopicLifecycleAdmin: the real sink.topics code over this node's "log".
        self.lifecycle = TopicLifecycle(
            self.fsm, self._propose, self.is_leader, lambda exc: ErrorCode.unknown_server_error
        )
        self.log_dir = "/memory"
        self.delete_topic = self.lifecycle.delete_topic
        self.create_partitions = self.lifecycle.create_partitions
        self.delete_records = self.lifecycle.delete_records
        self.active_producers = self.lifecycle.active_producers

    async def _propose_group(self, data: bytes) -> ErrorCode:
        if not self.is_leader():
            return ErrorCode.not_coordinator
        self.apply(data)
        return ErrorCode.none

    async def _propose(self, data: bytes):
        return self.apply(data)

    def disk_usage(self) -> tuple[int, int]:
        return 1 << 30, 1 << 29

    def apply(self, data: bytes):
        return self.fsm.on_apply([self.log.add(data, self.term)])[0]

    async def _apply_entry(self, data: bytes) -> ApplyResult:
        """RaftNode.apply's contract: NotLeaderError on a follower, else the applied result."""
        if not self.is_leader():
            raise NotLeaderError(self.lead, None)
        e = self.log.add(data, self.term)
        return ApplyResult(e.index, e.term, self.fsm.on_apply([e])[0])

    def context(self, limits: KafkaLimits | None = None) -> HandlerContext:
        adv = Advertised(self.brokers, forwarded_replies_usable=True)
        return HandlerContext.of_node(self, self.fsm, limits or KafkaLimits(), adv, ADVERTISED)

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

    def relay_endpoint(self, node: int) -> tuple[str, int] | None:
        return None  # nowhere to relay

    async def catch_up(self, timeout_s: float) -> None:
        return None  # one log: applied as committed

    def quorum(self) -> QuorumState:
        """Every broker a voter; the leader knows every log end (the one log's)."""
        last = len(self.log.entries)
        ends = tuple(
            (b, last if self.is_leader() or b == self.node_id else -1) for b in sorted(self.brokers)
        )
        return QuorumState(self.lead, self.term, last, ends, ())

    # ------------------------------------------------------ PartitionRoles

    def role(self, topic: str, partition: int) -> PartitionRole:
        """The test's role for the partition if it set one, else this node's one group
        (every broker a replica and in sync, as SinkService reports one group)."""
        given = self.roles.get((topic, partition))
        if given is not None:
            return given
        replicas = tuple(sorted(self.brokers))
        return PartitionRole(
            group=0,
            leader=self.lead,
            hint=self.lead,
            leader_epoch=self.term,
            replicas=replicas,
            isr=replicas,
            offline=(),
            leads=self.is_leader(),
            ready=self.leader_ready(),
            hosted=True,
            caught_up=self.caught_up,
        )

    # ------------------------------------------------------ Producing / TopicAdmin

    def produce(
        self, topic: str, partition: int, records: bytes, batches: list[BatchHeader]
    ) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if not self.role(topic, partition).leads:  # only the owning group's leader proposes
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

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        replication_factor: int = -1,
        assignments: list[list[int]] | None = None,
        settle_by: float | None = None,
    ) -> CreateTopicResult:
        if not self.is_leader():
            return CreateTopicResult(ErrorCode.not_controller, None)
        if configs:
            return self.apply(topic_state.encode_create(name, partitions, uuid.uuid4(), configs))
        return self.apply(commands.encode_create_topic(name, partitions, uuid.uuid4()))

    # ------------------------------------------------------ TopicConfigAdmin

    @property
    def topic_defaults(self) -> TopicDefaults:
        return self.fsm.topic_configs.defaults

    def topic_configs(self, topic: str) -> dict[str, str] | None:
        if self.fsm.topic(topic) is None:
            return None
        return self.fsm.topic_configs.overrides(topic)

    async def alter_topic_configs(
        self, topic: str, ops: list[tuple[int, str, str | None]], replace: bool
    ) -> tuple[ErrorCode, str | None]:
        if not self.is_leader():
            return ErrorCode.not_controller, None
        return self.apply(topic_state.encode_alter(topic, ops, replace))

    # ------------------------------------------------------ ProducerIds

    async def init_producer_id(self) -> tuple[ErrorCode, int, int]:
        return ErrorCode.none, self.apply(commands.encode_alloc_pid()), 0

    # ------------------------------------------------------ QuotaAdmin (client quotas)

    def client_quotas(self) -> QuotaTable:
        return self.fsm.quotas

    async def alter_client_quotas(self, alterations: list[Alteration]) -> ErrorCode:
        if not self.is_leader():
            return ErrorCode.not_controller
        return self.apply(quota_command.encode_alter_quotas(alterations))


__all__ = ["MemoryLog", "MemoryNode", "ProduceResult"]
