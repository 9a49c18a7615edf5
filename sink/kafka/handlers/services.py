"""What handlers depend on: small interfaces of the services they need, not the node.

Each Protocol is structural: SinkService implements Controller, PartitionRoles,
Producing, TopicAdmin and ProducerIds, its `offsets` (sink.offsets.GroupOffsetService)
GroupOffsets; SinkStateMachine implements PartitionReads.

Leadership comes in two kinds, kept apart so that a partition's data group and
the controller group can be different Raft groups (DESIGN.md sections 8-9):
- `Controller`: cluster-wide roles (the controller id, CreateTopics/DeleteTopics/
  configs/ACL/quota/user routing, InitProducerId, coordinators);
- `PartitionRoles`: who leads ONE partition, its epoch and replicas. Every
  partition question (Metadata's partition entries, Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch, DeleteRecords, DescribeProducers) asks it, never the
  controller.

Handler unit tests pass real in-memory implementations
(tests/unit/sink/memory_services.py). Nothing here
imports sink.state or sink.service, which is what keeps sink.kafka out of their
import graph (sink.groups.membership is a leaf).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sink.groups.membership import GroupMembership
from sink.groups.messages import (
    DescribedGroup,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveResponse,
    ListedGroup,
    SyncRequest,
    SyncResponse,
)
from sink.kafka.limits import KafkaLimits
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader
from sink.quotas import NO_QUOTAS, Alteration, ClientQuotaManager, QuotaTable
from sink.topics.configs import TopicDefaults


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


class Controller(Protocol):
    """Cluster-wide roles: the controller (the controller group's leader; today the
    one Raft group's leader). Ids are node ids (also the Kafka broker ids). Nothing
    here is about a partition: ask PartitionRoles for that."""

    node_id: int
    cluster_id: str

    def is_leader(self) -> bool:
        """This node is the controller now."""
        ...

    def leader_ready(self) -> bool:
        """The controller, with its own-term entry applied (coordinators may answer)."""
        ...

    def leader_id(self) -> int:
        """The controller's node id, -1 if none is known."""
        ...

    def leader_hint(self) -> int: ...
    def forward_endpoint(self) -> tuple[int, str, int] | None:
        """Where a node that is not the controller relays controller requests."""
        ...

    def relay_endpoint(self, node: int) -> tuple[str, int] | None:
        """node's INTERNAL Kafka address, where a request for it is relayed (None:
        unknown)."""
        ...

    def quorum(self) -> QuorumState:
        """The controller group's Raft quorum as this node sees it (DescribeQuorum)."""
        ...

    async def catch_up(self, timeout_s: float) -> None:
        """Return once this node applied every controller write committed before the
        call (a ReadIndex through the controller); raises on timeout or no leader."""
        ...


class QuorumState(NamedTuple):
    """The controller group's quorum (Kafka's DescribeQuorum of __cluster_metadata).
    Offsets are Raft log indexes: an index is the number of entries up to and including
    it, so a log end offset (Kafka's next offset) is the last index, and the high
    watermark the commit index. Only the leader knows the others' log ends (their match
    indexes); elsewhere they are -1."""

    leader_id: int
    """-1 while none is known."""
    leader_epoch: int
    """The group's term."""
    high_watermark: int
    voters: tuple[tuple[int, int], ...]
    """(node id, log end offset) per voter, by node id."""
    observers: tuple[tuple[int, int], ...]
    """The same for learners (members that do not vote)."""


class PartitionRole(NamedTuple):
    """One partition's leadership as this node knows it now: the state of the Raft
    group that owns the partition. A value: handlers take one per partition per
    request and answer from it, so one answer never mixes two views. A NamedTuple,
    not a frozen dataclass: Produce asks for one per partition on the hot path, and
    a tuple is built several times faster.

    Invariants: leads => hosted and leader == this node; ready => leads; isr and
    offline are subsets of replicas; leader_epoch is the term of the owning group's
    leader, while leaderless the last one's (RaftGroup.leader_epoch: clients validate
    their positions when it rises, toward the new leader), -1 where this node knows
    nothing of the group; it only rises."""

    group: int
    """The Raft group that owns the partition."""
    leader: int
    """The group's leader (node id), -1 while none is known."""
    hint: int
    """Where clients should go (Metadata's leader_id): the leader, or while
    leaderless the best guess (SinkService.leader_hint), -1 when there is none."""
    leader_epoch: int
    replicas: tuple[int, ...]
    """The group's members (voters and learners): Metadata's replica_nodes."""
    isr: tuple[int, ...]
    """The replicas in sync (voters only, less those on nodes this node's Raft host
    declares down, or the hosting node's view learnt from its answer): Metadata's
    isr_nodes."""
    offline: tuple[int, ...]
    """Metadata's offline_replicas: replicas on failed log directories of live
    brokers in Kafka; always empty here (a dead node's replicas leave the ISR)."""
    leads: bool
    """This node leads the group now (it may be deposed without knowing yet)."""
    ready: bool
    """This node leads, its own-term entry is applied and its process has not stalled
    past its lease (RaftGroup.leads_current): its high watermark is the group's, never
    below an earlier leader's, nor below a later one's that it does not know of yet."""
    hosted: bool
    """This node holds a replica of the group (else it has no data of the partition)."""
    caught_up: bool
    """This replica has applied everything it knows to be committed."""


class PartitionRoles(Protocol):
    """Who leads each partition: one lookup, whatever group owns the partition.
    Proposing into the owning group is Producing.produce(topic, partition, ...):
    the implementation routes it there."""

    def role(self, topic: str, partition: int) -> PartitionRole: ...


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
    @property
    def epochs(self) -> PartitionEpochs: ...
    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> Any:
        """The first record at or after timestamp (-3: the largest) as (offset,
        timestamp, leader_epoch), None when none (sink.state.time_lookup)."""
        ...

    def partition_size(self, topic: str, partition: int) -> int: ...


class Producing(Protocol):
    """produce() proposes now (so a connection's batches keep request order); its
    future resolves to a ProduceOutcome and never fails."""

    def produce(
        self, topic: str, partition: int, records: bytes, batches: list[BatchHeader]
    ) -> asyncio.Future: ...
    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicView | None]: ...


class TopicAdmin(Protocol):
    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = -1,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> CreateOutcome: ...
    async def ensure_topic(self, name: str) -> tuple[ErrorCode, TopicView | None]: ...


class ProducerIds(Protocol):
    async def init_producer_id(self) -> tuple[ErrorCode, int, int]: ...


class CommittedView(Protocol):
    """One committed offset (sink.state.group_offsets.CommittedOffset)."""

    @property
    def offset(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def metadata(self) -> str | None: ...


class GroupOffsets(Protocol):
    """Committed consumer-group offsets (sink.offsets.GroupOffsetService): written
    through the log and answered once applied; read from the applied state.

    commit_offsets items: (topic, partition, offset, leader_epoch, metadata, commit_ms,
    expire_ms), the last two -1 when the request does not give them. Its answer: one
    code per item, or one code for all when the write failed."""

    membership: GroupMembership
    """The group coordinator, asked about members and generations (sink.groups.membership)."""

    @property
    def metadata_max_bytes(self) -> int:
        """Longest committed metadata accepted (OFFSET_METADATA_TOO_LARGE above)."""
        ...

    async def commit_offsets(
        self, group: str, items: Sequence[tuple], retention_ms: int = -1
    ) -> list[ErrorCode] | ErrorCode: ...
    async def delete_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]]
    ) -> ErrorCode: ...
    def committed_offset(self, group: str, topic: str, partition: int) -> CommittedView | None: ...
    def committed_partitions(self, group: str) -> Iterable[tuple[str, int]]: ...
    def has_group(self, group: str) -> bool: ...


class PartitionEpochs(Protocol):
    """Each partition's leader epochs (sink.state.epochs.EpochTable), for OffsetForLeaderEpoch."""

    def end_offset_for(
        self, topic: str, partition: int, epoch: int, current_term: int, log_end: int
    ) -> tuple[int, int]: ...


class GroupCoordination(Protocol):
    """The classic group coordinator of this node (sink.groups.GroupRuntime). Every
    call answers NOT_COORDINATOR off the leader and COORDINATOR_LOAD_IN_PROGRESS
    until the leader has loaded the groups; join/sync may wait for a rebalance."""

    def coordinator_id(self, group_id: str) -> int: ...
    async def join(self, req: JoinRequest) -> JoinResponse: ...
    async def sync(self, req: SyncRequest) -> SyncResponse: ...
    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode: ...
    async def leave(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> LeaveResponse: ...
    async def delete(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]: ...
    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]: ...
    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]: ...


class TopicLifecycleAdmin(Protocol):
    """DeleteTopics, CreatePartitions, DeleteRecords through the log; the data
    directory DescribeLogDirs reports (sink.lifecycle.TopicLifecycle)."""

    log_dir: str

    async def delete_topic(self, name: str | None, topic_id: Any) -> Any:
        """-> (error, name, topic_id) of the topic deleted (by name, else by id)."""
        ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        validate_only: bool,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> tuple[ErrorCode, str | None]:
        """assignments: the request's replica lists of the new partitions (None: none
        given); settle_by: a loop time the wait for the new partitions' leaders ends by."""
        ...

    async def delete_records(
        self, topic: str, partition: int, offset: int
    ) -> tuple[ErrorCode, int]: ...
    def disk_usage(self) -> tuple[int, int]: ...
    def active_producers(self, topic: str, partition: int) -> list[tuple[int, int, int]]: ...


class PartitionMoves(Protocol):
    """Replica moves of partition groups (sink.node.replica_moves.MoveOps):
    AlterPartitionReassignments / ListPartitionReassignments."""

    async def reassign(
        self, topic: str, partition: int, replicas: list[int] | None, timeout_s: float
    ) -> tuple[ErrorCode, str | None]:
        """Start a move to replicas (None: cancel the pending one) on the controller's
        leader -> (error, message)."""
        ...

    def pending(self) -> list[dict[str, Any]]:
        """The moves not finished: topic, partition, replicas, target, adding, removing."""
        ...


class LeaderElections(Protocol):
    """Preferred-leader elections of partition groups (sink.node.preferred_election):
    ElectLeaders."""

    def preferred_replica(self, topic: str, partition: int) -> int:
        """The placement's preferred replica of the partition, -1 if unknown."""
        ...

    async def elect(
        self, topic: str, partition: int, timeout_s: float
    ) -> tuple[ErrorCode, str | None] | None:
        """Hand the partition's leadership to its preferred replica -> (error, reason);
        None: this node does not lead the partition's group (ask its leader)."""
        ...


class QuotaAdmin(Protocol):
    """Client quota configuration: read from the applied state, changed through the log."""

    def client_quotas(self) -> QuotaTable: ...
    async def alter_client_quotas(self, alterations: list[Alteration]) -> ErrorCode: ...


class TopicConfigAdmin(Protocol):
    """Topic configs: read from the applied state, changed through the log
    (sink.topics; SinkService implements it)."""

    @property
    def topic_defaults(self) -> TopicDefaults: ...
    def topic_configs(self, topic: str) -> dict[str, str] | None: ...
    async def alter_topic_configs(
        self, topic: str, ops: list[tuple[int, str, str | None]], replace: bool
    ) -> tuple[ErrorCode, str | None]: ...
    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        replication_factor: int = -1,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> CreateOutcome: ...


class UserAdmin(Protocol):
    """SASL users (sink.security.users.UserService): read from the applied state,
    changed through the log on the controller (Raft leader)."""

    def describe_users(self) -> list[tuple[str, list[tuple[str, int]]]]:
        """[(user, [(mechanism, iterations)])] of every user, sorted."""
        ...

    def credential(self, user: str, mechanism: str) -> Any:
        """The user's stored ScramCredential for mechanism, or None (SASL logins)."""
        ...

    async def alter_users(
        self, ops: list[dict]
    ) -> list[tuple[str, ErrorCode, str | None]] | ErrorCode:
        """sink.state.users ops through the log -> per op (user, error, message), or
        one error for all (NOT_CONTROLLER off the leader, a failed write)."""
        ...


class AclDecisions(Protocol):
    """The ACL decision (sink.security.authorizer.Authorizer)."""

    def is_super(self, principal: str) -> bool: ...
    def allowed(self, principal: str, host: str, op: Any, rtype: Any, name: str) -> bool: ...
    def allowed_on_some(self, principal: str, host: str, op: Any, rtype: Any) -> bool: ...


class AclAdmin(Protocol):
    """ACL bindings (sink.security.acl_service.AclService): read from the applied
    state, changed through the log on the controller (Raft leader)."""

    def describe(self, f: Any) -> list[Any]:
        """The stored bindings (sink.security.acl.AclBinding) the AclFilter matches."""
        ...

    async def alter_acls(self, ops: list[dict]) -> list[Any] | ErrorCode:
        """sink.security.acl_ops ops through the log -> one answer per op, or one
        error for all (NOT_CONTROLLER off the leader, a failed write)."""
        ...


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

    controller: Controller
    partitions: PartitionReads
    producing: Producing
    topics: TopicAdmin
    producer_ids: ProducerIds
    offsets: GroupOffsets
    limits: KafkaLimits
    advertised: Advertised
    supported: Mapping[int, tuple[int, int]]
    """API key -> (min, max) version served: what ApiVersions advertises."""
    quotas: ClientQuotaManager = NO_QUOTAS
    """Client quotas: this node's rates and throttle times (sink.quotas)."""
    quota_admin: QuotaAdmin | None = None
    """Client quota configuration (None: DescribeClientQuotas/AlterClientQuotas refused)."""
    topic_configs: TopicConfigAdmin | None = None
    """Topic configs (None: DescribeConfigs/AlterConfigs answer with an error)."""
    groups: GroupCoordination | None = None
    """The group coordinator (None: the group APIs answer COORDINATOR_NOT_AVAILABLE)."""
    lifecycle: TopicLifecycleAdmin | None = None
    """Topic deletion, partition growth, DeleteRecords, log dirs (None: refused)."""
    users: UserAdmin | None = None
    """SASL users (None: Describe/AlterUserScramCredentials refused)."""
    relay_login: Any = None
    """The login (sink.security.sasl_client.Login) a follower relays to the leader
    with, when the leader's listener requires SASL; None: relays send no login."""
    acls: AclAdmin | None = None
    """ACL bindings (None: Create/Describe/DeleteAcls answer SECURITY_DISABLED)."""
    authorizer: AclDecisions | None = None
    """The ACL decision every request passes (sink.kafka.authorize); None:
    authorization is off on this node (everything allowed)."""
    moves: PartitionMoves | None = None
    """Replica moves (None: one group, or a context without them: the reassignment
    APIs answer that nothing can move)."""
    elections: LeaderElections | None = None
    """Preferred-leader elections (None: one group, no preferred leader per partition)."""
    roles: PartitionRoles | None = None
    """Each partition's leadership (of_node sets it; None only in contexts that
    answer no partition request)."""
    peers_down: Any = frozenset
    """() -> the nodes this node declares down now (node liveness; SinkService.peers_down):
    Metadata and DescribeCluster leave them out while this node hears a majority (see
    live_brokers). Default: none."""
    relayed: Any = None
    """(api key, Call) -> awaitable response: runs a request another node relayed in an
    Envelope, through the authorization gate and its handler as the client that sent it
    (sink.kafka.server sets it; None: envelopes are refused)."""
    draining: bool = False
    """The listener drains for a graceful shutdown (KafkaServer.drain): a Fetch
    long-poll answers with what it has instead of waiting out max_wait."""

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
        return cls(
            service,
            fsm,
            service,
            service,
            service,
            getattr(service, "offsets", service),
            limits,
            advertised,
            supported,
            quotas=getattr(service, "quotas", NO_QUOTAS),
            quota_admin=service if hasattr(service, "alter_client_quotas") else None,
            topic_configs=service if hasattr(service, "alter_topic_configs") else None,
            groups=getattr(service, "groups", None),
            lifecycle=service if hasattr(service, "delete_records") else None,
            users=getattr(service, "users", None),
            acls=getattr(service, "acls", None),
            authorizer=getattr(service, "authorizer", None),
            moves=getattr(service, "partition_moves", None),
            elections=getattr(service, "leader_elections", None),
            roles=service,
            peers_down=getattr(service, "peers_down", frozenset),
        )

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.advertised.brokers

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        """The brokers Metadata and DescribeCluster list: every advertised node but those
        this node declares down (node liveness), as Kafka lists only brokers whose
        registration is live, so clients do not bootstrap from, or look a coordinator up
        on, a dead node (KafkaJS did, and retried). Only while this node hears a majority
        of the nodes (itself included): an isolated node's view is its own isolation, not
        the cluster's, so it lists every node as Kafka's isolated broker keeps its last
        metadata (listing only itself, it left a producer that asked it with no leader
        anywhere: librdkafka decommissions the brokers a Metadata answer stops listing).
        This node itself is always listed: it is answering."""
        down = self._down_here()
        brokers = self.advertised.brokers
        if not down:
            return brokers
        return {i: a for i, a in brokers.items() if i not in down}

    def live_broker(self, node: int) -> int:
        """node as a broker id live_brokers lists: -1 if it is not advertised or left out
        (a leader id Metadata must not name: the client would have nowhere to send)."""
        if node not in self.advertised.brokers:
            return -1
        return -1 if node in self._down_here() else node

    def _down_here(self) -> frozenset[int]:
        """The advertised nodes to leave out: those declared down, only while the others
        (this node among them) are a majority of all advertised nodes."""
        down = self.peers_down()
        if not down:
            return frozenset()
        me = self.controller.node_id
        nodes = self.advertised.brokers
        out = frozenset(i for i in down if i in nodes and i != me)
        if 2 * (len(nodes) - len(out)) <= len(nodes):
            return frozenset()
        return out

    def envelopes(self) -> bool:
        """Controller requests are relayed in an Envelope (HandlerContext.relayed at the
        controller): authorization is on and relays log in as the relay user (SASL), a
        super user the controller takes envelopes from. Without a relay user the relay's
        connection principal (ANONYMOUS, or this node's certificate) would need
        CLUSTER_ACTION, which no default grants."""
        return self.authorizer is not None and self.relay_login is not None

    def controller_for_clients(self) -> int:
        """The controller_id Metadata and DescribeCluster give: this node itself, which
        takes every controller request (a node that is not the controller relays it in
        an Envelope with the client's principal and waits for its own apply of a write:
        controller_relay), as a KRaft broker names a live broker (KIP-590) and forwards.
        Naming the Raft leader made every admin client that read Metadata before the
        leader died wait for that dead node: librdkafka does not read Metadata again
        while it waits for its controller (5 minutes, its periodic refresh). The
        controller group's leader: `raftsink status`, DescribeQuorum. The Raft leader
        if this listener does not advertise this node, or if authorization is on without a
        relay user (see envelopes)."""
        me = self.controller.node_id
        # Every request is relayed whole: no authorization (the exact frame), or an
        # envelope. Otherwise a partly allowed request is answered NOT_CONTROLLER here,
        # and a client told this node is the controller would ask it again and again.
        relays_whole = self.authorizer is None or self.envelopes()
        return me if relays_whole and me in self.advertised.brokers else self.leader_id()

    def leader_id(self) -> int:
        """The controller as a broker id of this listener, -1 if none is known."""
        return self.broker(self.controller.leader_id())

    def leader_hint(self) -> int:
        """Controller.leader_hint as a broker id of this listener (-1: none)."""
        return self.broker(self.controller.leader_hint())

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        """(id, host, port) of the controller as this listener's clients reach it."""
        return self.endpoint(self.leader_id())

    def broker(self, node: int) -> int:
        """node as a broker id of this listener: -1 if this listener does not
        advertise it (a client could not reach it)."""
        return node if node in self.advertised.brokers else -1

    def endpoint(self, node: int) -> tuple[int, str, int] | None:
        """(id, host, port) of node as this listener's clients reach it (None: unknown)."""
        if node not in self.advertised.brokers:
            return None
        host, port = self.advertised.brokers[node]
        return node, host, port

    def role(self, topic: str, partition: int) -> PartitionRole:
        """The partition's leadership (PartitionRoles.role)."""
        assert self.roles is not None, "a partition request on a context without roles"
        return self.roles.role(topic, partition)
