"""SinkService: the Kafka-facing backend over one Raft group.

Turns Kafka operations into Raft commands and answers from the applied
SinkStateMachine. Leadership model: one Raft group (group 0) owns every
partition and is also the controller, so role(topic, partition) answers the
same group for every partition: leader = the Raft leader, leader_epoch = the
Raft term (only rises), replicas = ISR = the voters. The handlers ask role()
for partition questions and the Controller methods (is_leader, leader_id, ...)
for cluster-wide ones, so a group per partition changes this class, not them.

Ordering: produce() proposes synchronously in call order (the node's apply
coroutines are started as tasks in creation order, and asyncio runs ready
callbacks FIFO), so the batches of one connection reach the log in request
order, as pipelined idempotent producers require.

In-flight duplicates: a retried idempotent batch that arrives while its
original is still uncommitted shares the original's future (keyed by
(pid, topic, partition, first_seq, last_seq)) instead of being proposed again;
the state machine's apply-time check covers every other case, including
retries after a leader change.

SinkService is one class in two modules: the admin operations (producer ids, topics,
topic configs, client quotas) are its AdminOps part (sink/service_admin.py, no state of
its own: every field is set in SinkService.__init__). The mapping of a failed proposal
to its Kafka error, _error_of, is sink/service_errors.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog.runtime import RaftNode
from sink.groups import GroupOptions, GroupRuntime
from sink.kafka.handlers.services import PartitionRole, QuorumState
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader
from sink.lifecycle.sequence_gaps import SequenceGaps
from sink.lifecycle.topics import TopicLifecycle
from sink.offsets import GroupOffsetService, OffsetsOptions
from sink.quotas import ClientQuotaManager
from sink.service_admin import AdminOps
from sink.service_errors import _error_of
from sink.state import ProduceResult, SinkStateMachine
from sink.state import commands as cmd
from sink.topics.stamp import stamp_log_append_time


@dataclass(frozen=True, slots=True)
class SinkOptions:
    produce_timeout_s: float = 30.0
    """Raft commit timeout of a produce/create/init-pid proposal; on expiry the
    client gets REQUEST_TIMED_OUT (outcome unknown; idempotent retries dedupe)."""
    max_create_partitions: int = 1024
    """Upper bound on partitions per topic (CreateTopics and auto-create)."""
    sequence_gap_grace_ms: int = 30_000
    """An idempotent batch whose sequence leaves a gap is answered NOT_LEADER_OR_FOLLOWER
    (retriable: the client resends the request in front first) until the gap has lasted
    this long, then OUT_OF_ORDER_SEQUENCE_NUMBER, which makes librdkafka and the Java
    client bump their epoch and renumber, duplicating a timed-out record that was written
    (sink/lifecycle/sequence_gaps.py). The default covers the clients' 30 s request
    timeout; 0: Kafka's answer at once."""

    def __post_init__(self) -> None:
        if self.produce_timeout_s <= 0:
            raise ValueError("SinkOptions.produce_timeout_s must be positive")
        if self.max_create_partitions < 1:
            raise ValueError("SinkOptions.max_create_partitions must be >= 1")
        if self.sequence_gap_grace_ms < 0:
            raise ValueError("SinkOptions.sequence_gap_grace_ms must be >= 0")


def _done(loop: asyncio.AbstractEventLoop, value: object) -> asyncio.Future:
    f = loop.create_future()
    f.set_result(value)
    return f


class SinkService(AdminOps):
    """The operations the Kafka handlers (and the read API) need.

    brokers: node id -> advertised Kafka (host, port) of EVERY node.
    """

    def __init__(
        self,
        node: RaftNode,
        fsm: SinkStateMachine,
        *,
        node_id: int,
        brokers: dict[int, tuple[str, int]],
        cluster_id: str,
        options: SinkOptions | None = None,
        quotas: ClientQuotaManager | None = None,
        write_gate: Callable[[int], bool] | None = None,
        offsets_options: OffsetsOptions | None = None,
        group_options: GroupOptions | None = None,
        log_dir: str = "",
    ) -> None:
        """write_gate(nbytes) -> False when the node may not take nbytes of new data
        (below its disk reserve: sink.node.DiskWatch.admit_write); None: always may."""
        if node_id not in brokers:
            raise ValueError(f"brokers must include this node ({node_id})")
        self.node = node
        self.fsm = fsm
        self.node_id = node_id
        self.brokers = dict(brokers)
        self.cluster_id = cluster_id
        self.options = options or SinkOptions()
        self.write_gate = write_gate
        self._inflight: dict[tuple[int, str, int, int, int], asyncio.Future] = {}
        self.inflight_duplicates = 0  # retries answered by their uncommitted original
        self.committed_duplicates = 0  # retries answered from the applied producer table
        self.sequence_gaps = SequenceGaps(self.options.sequence_gap_grace_ms)
        self._creating: dict[str, asyncio.Future] = {}
        # Committed consumer-group offsets: through the log, read from the applied
        # state (sink.offsets; the handlers' GroupOffsets).
        self.offsets = GroupOffsetService(
            lambda: self.fsm.group_offsets,
            self._apply_entry,
            ready=self.leader_ready,
            options=offsets_options,
        )
        # Client quotas: the rates of this node's clients against the applied table.
        self.quotas = quotas or ClientQuotaManager(lambda: self.fsm.quotas)
        # The classic group coordinator (sink.groups): active while this node is the
        # ready leader; every coordinator slot is hosted by this one Raft group.
        self.groups = GroupRuntime(
            group_options,
            propose=self._propose_group_command,
            is_leader=lambda: self.node.is_leader(),
            ready_term=lambda: self.node.term if self.leader_ready() else None,
            records=lambda: self.fsm.groups.records(),
            slot_owner=lambda _slot: self.leader_id(),
            offset_holders=lambda: self.fsm.group_offsets,
        )
        if fsm is not None:
            fsm.on_leader_change.append(self.groups.on_leadership_change)
        # OffsetCommit/OffsetDelete/expiry ask the coordinator about members (GroupMembership).
        self.offsets.membership = self.groups
        # DeleteTopics, CreatePartitions, DeleteRecords, DescribeLogDirs (sink/topics).
        self.lifecycle = TopicLifecycle(
            fsm,
            self.apply_command,
            lambda: self.node.is_leader(),
            _error_of,
            max_partitions=self.options.max_create_partitions,
            log_dir=log_dir,
        )
        self.delete_topic = self.lifecycle.delete_topic
        self.create_partitions = self.lifecycle.create_partitions
        self.delete_records = self.lifecycle.delete_records
        self.disk_usage = self.lifecycle.disk_usage
        self.active_producers = self.lifecycle.active_producers
        self.log_dir = log_dir
        # Partition groups (cluster.partition_groups): sink.node.routing.PartitionRouting,
        # set by use_routing(); None: every partition is group 0's (this node's).
        self.routing: Any = None
        # Replica moves (sink.node.replica_moves.MoveOps), set with routing; None: none.
        self.partition_moves: Any = None
        # Preferred-leader elections (sink.node.preferred_election), set with routing.
        self.leader_elections: Any = None
        # What the handlers read partitions from (sink.kafka.server): the applied state,
        # or with partition groups sink.node.routed_reads.RoutedReads.
        self.partition_reads: Any = fsm

    def use_routing(self, routing: Any) -> None:
        """Partitions live in data groups from now on: role/produce/DeleteRecords/
        DescribeProducers/CreateTopics/CreatePartitions go through routing
        (sink.node.routing; CreatePartitions places the new partitions and commits
        them as one ADD_PARTITIONS entry, never the one-group CREATE_PARTITIONS)."""
        self.routing = routing
        self.delete_records = routing.delete_records
        self.active_producers = routing.active_producers
        self.create_partitions = routing.create_partitions

    async def apply_command(self, data: bytes) -> object:
        """Propose a command and return its applied result (raises the runtime's errors)."""
        return (await self._apply_entry(data)).result

    async def _propose_group_command(self, data: bytes) -> ErrorCode:
        """A group command through the log -> none once applied, else the coordinator
        error the waiting members get (NOT_COORDINATOR: find the new leader)."""
        try:
            await self._apply_entry(data)
        except Exception as exc:
            err = _error_of(exc)
            if err == ErrorCode.not_leader_or_follower:
                return ErrorCode.not_coordinator
            if err in (ErrorCode.request_timed_out, ErrorCode.not_enough_replicas):
                return ErrorCode.coordinator_not_available
            return err
        return ErrorCode.none

    async def _apply_entry(self, data: bytes) -> Any:
        """Replicate and apply one entry (raises raftlog.runtime's errors)."""
        return await self.node.apply(data, timeout=self.options.produce_timeout_s)

    # ------------------------------------------------------------ leadership

    def is_leader(self) -> bool:
        return self.node.is_leader()

    def leader_ready(self) -> bool:
        """Leader whose own-term entry is applied: its applied state includes
        everything committed before, so its high watermark never regresses; and whose
        process has not stalled past its lease (RaftGroup.leads_current)."""
        return self.node.leads_current() and self.fsm.leader_term == self.node.term

    def applied_all_committed(self) -> bool:
        """Everything this node knows to be committed is applied (its high watermarks are the
        cluster's, when it is a ready leader)."""
        return self.node.applied >= self.node.commit_index

    def leader_id(self) -> int:
        """Raft leader as a Kafka broker id, -1 if none is known."""
        lead = self.node.leader_id
        return lead if lead in self.brokers else -1

    def peers_down(self) -> frozenset[int]:
        """The nodes this node's Raft host declares down (node liveness): Kafka's
        Metadata and DescribeCluster leave them out while this node hears a majority
        (HandlerContext.live_brokers), as Kafka leaves out a broker whose registration
        lapsed."""
        return self.node.peers_down()

    def leader_hint(self) -> int:
        """Where Kafka clients should send partition traffic: the leader; while
        leaderless, the last leader known (or, if that was this node, another
        node); -1 only before any leader was known. A stale hint costs a client
        one NOT_LEADER_OR_FOLLOWER and a Metadata refresh at a node that knows
        better. Answering -1 kept librdkafka, which only asks brokers it is
        connected to, stuck on an isolated node until the partition healed."""
        lead = self.leader_id()
        if lead >= 0:
            return lead
        last = self.node.last_leader_id
        if last == self.node_id:
            others = sorted(b for b in self.brokers if b != self.node_id)
            return others[0] if others else -1
        return last if last in self.brokers else -1

    def leader_epoch(self) -> int:
        return self.node.term

    def quorum(self) -> QuorumState:
        n = self.node
        m = n.membership()
        follows = n.core.progress if n.is_leader() else {}
        last = n.queue.last_index()

        def log_end(node: int) -> int:
            if node == self.node_id:
                return last
            return follows[node].match if node in follows else -1

        return QuorumState(
            leader_id=self.leader_id(),
            leader_epoch=n.term,
            high_watermark=n.commit_index,
            voters=tuple((v, log_end(v)) for v in m["voters"]),
            observers=tuple((v, log_end(v)) for v in m["learners"]),
        )

    def forward_endpoint(self) -> tuple[int, str, int] | None:
        """Where a follower forwards requests to the leader: its INTERNAL
        Kafka address, whichever listener the client came in on."""
        return self.leader_endpoint()

    async def catch_up(self, timeout_s: float) -> None:
        await self.node.read_index(timeout=timeout_s)

    def relay_endpoint(self, node: int) -> tuple[str, int] | None:
        return self.brokers.get(node)

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        lead = self.leader_id()
        if lead < 0:
            return None
        host, port = self.brokers[lead]
        return lead, host, port

    # ------------------------------------------------------- partition roles

    GROUP = 0
    """The one Raft group: it owns every partition and is the controller."""

    def role(self, topic: str, partition: int) -> PartitionRole:
        """The partition's leadership (PartitionRoles): group 0's, for every partition.

        replicas = the group's members, voters and learners, sorted (a learner holds
        the data, as a Kafka replica being added does); isr = the voters this node's
        host does not declare down (RaftGroup.in_sync_voters: time-based, as Kafka's
        ISR; only voters count toward commit, so a learner is never in it); offline
        is empty (Kafka's offline replicas are failed log directories of live
        brokers). A node that is neither voter nor learner (removed) hosts no
        replica. Built from public reads only, as a tuple: Produce asks once per
        partition."""
        if self.routing is not None:
            return self.routing.role(topic, partition)
        node = self.node
        members = node.membership()
        voters = tuple(members["voters"])  # sorted
        learners = members["learners"]
        replicas = tuple(sorted({*voters, *learners})) if learners else voters
        leads = node.is_leader()
        term = node.term
        lead = node.leader_id
        lead = lead if lead in self.brokers else -1
        return PartitionRole(
            self.GROUP,
            lead,
            lead if lead >= 0 else self.leader_hint(),
            node.leader_epoch(),
            replicas,
            node.in_sync_voters(voters),
            (),
            leads,
            leads and self.fsm.leader_term == term and node.leads_current(),
            self.node_id in replicas,
            node.applied >= node.commit_index,
        )

    # --------------------------------------------------------------- produce

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | memoryview,
        batches: Sequence[BatchHeader],
    ) -> asyncio.Future:
        """Propose the (validated) batches of one topic-partition.

        Returns a future of ProduceResult: the first batch's base offset once
        every batch is committed and applied, or an error code. Never raises.
        Proposing happens in call order (see the module doc).
        """
        if self.routing is not None:
            return self.routing.produce(topic, partition, records, batches)
        loop = asyncio.get_running_loop()
        if not self.node.is_leader():
            return _done(loop, ProduceResult(ErrorCode.not_leader_or_follower, -1, -1))
        if not self.fsm.has_partition(topic, partition):
            return _done(loop, ProduceResult(ErrorCode.unknown_topic_or_partition, -1, -1))
        if self.write_gate is not None and not self.write_gate(len(records)):
            # Below the disk reserve: refused before anything is proposed. Retriable:
            # librdkafka, the Java client and KafkaJS retry KAFKA_STORAGE_ERROR.
            return _done(loop, ProduceResult(ErrorCode.kafka_storage_error, -1, -1))
        policy = self.fsm.topic_configs.policy(topic)
        if any(b.size > policy.max_message_bytes for b in batches):
            # Kafka: a batch above max.message.bytes is RecordTooLargeException.
            return _done(loop, ProduceResult(ErrorCode.message_too_large, -1, -1))
        fsm = self.fsm
        return self.propose_batches(
            loop,
            topic,
            partition,
            records,
            batches,
            policy.log_append_time,
            lambda b: fsm.producers.check(
                b.producer_id, topic, partition, b.producer_epoch, b.base_sequence, b.last_sequence
            ),
            lambda: fsm.log_start_offset(topic, partition),
            lambda b, batch: cmd.encode_produce(
                topic, partition, b.producer_id, b.producer_epoch, b.base_sequence, batch
            ),
        )

    def propose_batches(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        records: bytes | memoryview,
        batches: Sequence[BatchHeader],
        log_append_time: bool,
        check: Callable[[BatchHeader], Any],
        log_start: Callable[[], int],
        encode: Callable[[BatchHeader, bytes | memoryview], bytes],
        group: Any = None,
    ) -> asyncio.Future:
        """The produce loop of one topic-partition, shared by one group (group None) and
        partition groups (group: the partition's data group; sink/node/routing.py): each
        validated batch is answered from a retry in flight, answered as a committed
        duplicate (check(b).duplicate: its idempotent producer state says so; log_start()
        for the answer), or stamped (LogAppendTime) and proposed as encode(b, batch).
        Proposing happens in call order. -> a ProduceResult future (the first batch's)."""
        now_ms = int(time.time() * 1000) if log_append_time else 0
        mv = memoryview(records)
        futs: list[asyncio.Future] = []
        for b in batches:
            key = None
            if b.producer_id >= 0:
                key = (b.producer_id, topic, partition, b.base_sequence, b.last_sequence)
                pending = self._inflight.get(key)
                if pending is not None:  # retry of an uncommitted original: share its answer
                    self.inflight_duplicates += 1
                    futs.append(pending)
                    continue
                verdict = check(b)
                if verdict.duplicate:  # already committed: answer without a log entry
                    self.committed_duplicates += 1
                    result = ProduceResult(ErrorCode.none, verdict.base_offset, log_start(), True)
                    futs.append(_done(loop, result))
                    continue
            batch = mv[b.start : b.start + b.size]
            if log_append_time:  # the leader's clock, in the entry: same on every node
                batch = stamp_log_append_time(batch, now_ms)
            futs.append(self._propose_produce(loop, encode(b, batch), key, b.producer_epoch, group))
        if len(futs) == 1:
            return futs[0]
        return loop.create_task(self._first_result(futs))

    def _propose_produce(
        self,
        loop: asyncio.AbstractEventLoop,
        data: bytes,
        key: tuple[int, str, int, int, int] | None = None,
        epoch: int = 0,
        group: Any = None,
    ) -> asyncio.Future:
        """Propose now (so a connection's batches enter the log in request order)
        and map the outcome to a ProduceResult future that never fails. key (an
        idempotent batch: pid, topic, partition, first and last sequence; epoch its
        producer epoch): the future is in _inflight until the outcome is known, so a
        retry of the batch meanwhile shares it; one callback both settles the future
        and removes the key (a callback per proposal, not two); its sequence-gap
        verdicts go through self.sequence_gaps. group: the Raft group to propose
        into (None: this node's, group 0)."""
        proposer = self.node if group is None else group
        try:
            proposal = proposer.propose(data, timeout=self.options.produce_timeout_s)
        except Exception as exc:  # not proposed: the client retries
            return _done(loop, ProduceResult(_error_of(exc), -1, -1))
        out = loop.create_future()
        inflight = self._inflight
        if key is not None:
            inflight[key] = out

        def finish(f: asyncio.Future) -> None:
            if key is not None and inflight.get(key) is out:
                del inflight[key]
            if out.done():
                return
            exc = None if f.cancelled() else f.exception()
            if f.cancelled() or exc is not None:  # outcome unknown: idempotent retries dedupe
                out.set_result(ProduceResult(_error_of(exc), -1, -1))
            else:
                res = f.result().result
                if key is not None:
                    err = self.sequence_gaps.answer((*key[:3], epoch), res.error)
                    if err != res.error:
                        res = res._replace(error=err)
                out.set_result(res)

        proposal.add_done_callback(finish)
        return out

    @staticmethod
    async def _first_result(futs: list[asyncio.Future]) -> ProduceResult:
        results = [await asyncio.shield(f) for f in futs]
        for r in results:
            if r.error != ErrorCode.none:
                return r
        return results[0]
