"""What handlers depend on: small interfaces of the services they need, not the node.

Each Protocol is structural: SinkService implements Leadership, Producing,
TopicAdmin, ProducerIds and GroupOffsets; SinkStateMachine implements
PartitionReads. Handler unit tests pass real in-memory implementations
(tests/unit/sink/memory_services.py). Nothing here imports sink.state or
sink.service, which is what keeps sink.kafka out of their import graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sink.kafka.limits import KafkaLimits
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader


class TopicView(Protocol):
    """A topic as handlers read it (sink.state.TopicInfo)."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def topic_id(self) -> Any: ...


class ProduceOutcome(Protocol):
    """One partition's produce result (sink.state.ProduceResult)."""

    @property
    def error(self) -> ErrorCode: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...


class CreateOutcome(Protocol):
    """A topic creation's result (sink.state.CreateTopicResult)."""

    @property
    def error(self) -> ErrorCode: ...
    @property
    def topic(self) -> TopicView | None: ...


class Leadership(Protocol):
    """Who leads, in Raft terms; ids are node ids (also the Kafka broker ids)."""

    node_id: int
    cluster_id: str

    def is_leader(self) -> bool: ...
    def leader_ready(self) -> bool: ...
    def applied_all_committed(self) -> bool: ...
    def leader_id(self) -> int: ...
    def leader_hint(self) -> int: ...
    def leader_epoch(self) -> int: ...
    def forward_endpoint(self) -> tuple[int, str, int] | None: ...


class PartitionReads(Protocol):
    """The applied partitions (sink.state.SinkStateMachine)."""

    auto_create_topics: bool
    default_partitions: int

    def topic(self, name: str) -> TopicView | None: ...
    def topic_by_id(self, topic_id: Any) -> TopicView | None: ...
    def topics(self) -> Iterable[str]: ...
    def has_partition(self, topic: str, partition: int) -> bool: ...
    def high_watermark(self, topic: str, partition: int) -> int: ...
    def log_start_offset(self, topic: str, partition: int) -> int: ...
    def read_parts(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> Sequence[tuple[int, bytes, Any]]: ...
    def data_event(self) -> asyncio.Event: ...


class Producing(Protocol):
    """produce() proposes now (so a connection's batches keep request order); its
    future resolves to a ProduceOutcome and never fails."""

    def produce(
        self, topic: str, partition: int, records: bytes, batches: list[BatchHeader]
    ) -> asyncio.Future: ...
    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicView | None]: ...


class TopicAdmin(Protocol):
    async def create_topic(self, name: str, partitions: int) -> CreateOutcome: ...
    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicView | None]: ...


class ProducerIds(Protocol):
    async def init_producer_id(self) -> tuple[ErrorCode, int, int]: ...


class GroupOffsets(Protocol):
    """Committed consumer-group offsets (kept by the coordinator)."""

    def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str | None
    ) -> None: ...
    def committed_offset(
        self, group: str, topic: str, partition: int
    ) -> tuple[int, str | None] | None: ...
    def committed_partitions(self, group: str) -> Iterable[tuple[str, int]]: ...


@dataclass(frozen=True, slots=True)
class Advertised:
    """The cluster as one Kafka listener shows it to its clients."""

    brokers: dict[int, tuple[str, int]]
    """node id -> (host, port) clients of this listener connect to, every node."""
    forwarded_replies_usable: bool
    """A follower relays some requests to the leader's INTERNAL listener; its
    reply names internal addresses, so it is relayed as is only on a listener
    that advertises those same addresses (else answered from local state)."""


@dataclass(slots=True)
class HandlerContext:
    """Everything a handler may use; each field is one interface above."""

    leadership: Leadership
    partitions: PartitionReads
    producing: Producing
    topics: TopicAdmin
    producer_ids: ProducerIds
    offsets: GroupOffsets
    limits: KafkaLimits
    advertised: Advertised
    supported: Mapping[int, tuple[int, int]]
    """API key -> (min, max) version served: what ApiVersions advertises."""

    @classmethod
    def of_node(
        cls,
        service: Any,
        fsm: PartitionReads,
        limits: KafkaLimits,
        advertised: Advertised,
        supported: Mapping[int, tuple[int, int]],
    ) -> HandlerContext:
        """A node's context: its SinkService behind every service interface."""
        return cls(service, fsm, service, service, service, service, limits, advertised, supported)

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.advertised.brokers

    def leader_id(self) -> int:
        """Raft leader as a broker id of this listener, -1 if none is known."""
        lead = self.leadership.leader_id()
        return lead if lead in self.advertised.brokers else -1

    def leader_hint(self) -> int:
        """Leadership.leader_hint as a broker id of this listener (-1: none)."""
        hint = self.leadership.leader_hint()
        return hint if hint in self.advertised.brokers else -1

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        """(id, host, port) of the leader as this listener's clients reach it."""
        lead = self.leader_id()
        if lead < 0:
            return None
        host, port = self.advertised.brokers[lead]
        return lead, host, port
