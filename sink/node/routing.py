"""PartitionRouting: SinkService's partition operations when partitions live in data groups.

SinkService (sink/service.py) delegates here when `cluster.partition_groups` is on
(SinkNode sets service.routing); with it off nothing here runs. Cluster-wide work
(topics, configs, producer ids, users/ACLs, quotas, consumer groups) stays on the
controller (group 0, SinkService's own node); a partition's work goes to its data
group on this node:

- role(): from the hosting group here (its leader, term as epoch, members, whether
  its machine serves the partition); for a group not hosted here from the placement
  (replicas) and the leaders table (sink/node/leaders.py: leader, epoch);
- produce(): the id-based PRODUCE_TO entry ("p") into the partition's group, with
  that group's idempotent-producer pre-check (apply decides again);
- delete_records(), active_producers(): that group's machine;
- create_topic(): the placer (sink.placement) on the controller leader, committed
  with the topic as one PLACE_TOPIC entry (sink/state/placement_table.py);
- create_partitions(): the new partitions' replica lists (sink/node/grow_topic.py: the
  placer continuing the topic's stripe, or the request's checked assignments) on the
  controller leader, committed as one ADD_PARTITIONS entry.

A node holding no replica of a partition's group answers NOT_LEADER_OR_FOLLOWER;
the role it reports names the leader it knows (the handlers put it in the answer).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sink.kafka.handlers.services import PartitionRole
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import BatchHeader
from sink.node import grow_topic, settle
from sink.node.data_groups import DataGroups, HostedGroup
from sink.node.leaders import LeaderPoller, LeadersTable
from sink.placement import PlacementError, place_partitions
from sink.service import SinkService, _done
from sink.service_errors import _error_of
from sink.state import CreateTopicResult, ProduceResult
from sink.state import data_commands as dcmd
from sink.state.placement_table import encode_add_partitions, encode_place_topic
from sink.topics.configs import TopicConfigError, validate_all

log = logging.getLogger("sink.groups")

_NO_GROUP = -1


class PartitionRouting:
    def __init__(
        self,
        service: SinkService,
        groups: DataGroups,
        leaders: LeadersTable,
        poller: LeaderPoller | None,
        hosts: Callable[[], dict[int, str | None]],
        default_replication_factor: int,
        settle_s: float = 0.0,
        hosts_settled: Callable[[], Awaitable[list[int]]] | None = None,
        down: Callable[[], set[int]] | None = None,
    ) -> None:
        """hosts() -> node id -> host label (None: its own host) of every controller
        voter: the nodes placement may use. default_replication_factor: for RF -1
        (0: min(3, the distinct hosts of those nodes)). settle_s: how long a creation waits
        after its commit for the new partitions' preferred leaders to serve them
        (sink/node/settle.py; 0: answer at commit). hosts_settled(): waits (bounded)
        until every voter registered its host label (sink/node/host_labels.py), so a
        creation just after start places on every node.
        down() -> the nodes this node cannot reach now: new replicas avoid them while
        the others span the replication factor (grow_topic.prefer_live)."""
        self.hosts_settled = hosts_settled
        self.down = down
        self.service = service
        self.groups = groups
        self.leaders = leaders
        self.poller = poller
        self.hosts = hosts
        self.default_replication_factor = default_replication_factor
        self.settle_s = settle_s
        # One CreatePartitions at a time here (from placing to applied): a second one
        # places from the count the first left. The apply checks the count again (a
        # new leader, a lagging view), so this only spares needless refusals.
        self._growing = asyncio.Lock()
        # One topic placed and committed at a time (each placement counts the load of
        # the topics before it); their settle waits run side by side.
        self._creating = asyncio.Lock()

    # ------------------------------------------------------------------ roles

    def role(self, topic: str, partition: int) -> PartitionRole:
        g, h = self.groups.lookup(topic, partition)
        if g is None:  # no such partition (or not placed): nobody leads it
            return PartitionRole(_NO_GROUP, -1, -1, -1, (), (), (), False, False, False, False)
        if h is not None:
            return self._hosted_role(h)
        known = self.leaders.get(topic, partition)
        if self.poller is not None and (
            known is None or (self.down is not None and known.leader in self.down())
        ):
            # Not known, or its leader is down here (a failover is under way): the
            # poller asks soon and at its base interval again (leaders.py).
            self.poller.poke()
        if known is None:
            lead, epoch, hint, isr = -1, -1, g.replicas[0], g.replicas
        else:
            lead, epoch, hint = known.leader, known.epoch, known.leader
            # The hosting node's view; a node that sends none: every replica.
            isr = tuple(n for n in g.replicas if n in known.isr) if known.isr else g.replicas
        brokers = self.service.brokers
        lead = lead if lead in brokers else -1
        hint = hint if hint in brokers else -1
        return PartitionRole(
            g.group, lead, hint, epoch, g.replicas, isr, (), False, False, False, False
        )

    def roles_version(self) -> int:
        """A fingerprint of everything role() answers about leaders, epochs and
        replicas (the read API's Partitions rows: sink/node/leaders.py polls): the
        placement (topics, groups, replica lists), the brokers, each hosted group's
        term, leader, membership and in-sync voters, and the leaders table's rows (the groups not
        hosted here), and the controller's applied index (member addresses, topics:
        whatever else the rows name). Equal fingerprints, equal rows; never 0.
        O(hosted groups)."""
        parts: list[object] = [
            self.service.node.applied_index,
            self.groups.controller.placement.version,
            tuple(self.service.brokers),
            self.leaders.changes,
        ]
        for gid, h in self.groups.hosted.items():
            g = h.group
            m = g.membership()
            parts.append(
                (
                    gid,
                    g.term,
                    g.leader_id,
                    tuple(m["voters"]),
                    tuple(m["learners"]),
                    h.placement.replicas,
                    g.in_sync_voters(),
                )
            )
        return (hash(tuple(parts)) & (2**63 - 1)) or 1

    def _hosted_role(self, h: HostedGroup) -> PartitionRole:
        group = h.group
        members = group.membership()
        voters = tuple(members["voters"])
        learners = members["learners"]
        everyone = {*voters, *learners}
        placed = h.placement.replicas
        # Placement order (preferred first) while the members are the placed ones.
        replicas = placed if set(placed) == everyone else tuple(sorted(everyone))
        leads = group.is_leader()
        term = group.term
        brokers = self.service.brokers
        lead = group.leader_id if group.leader_id in brokers else -1
        if lead >= 0:
            hint = lead
        else:
            last = group.last_leader_id
            hint = last if last in brokers and last != self.service.node_id else placed[0]
            hint = hint if hint in brokers else -1
        serves = h.serves()
        return PartitionRole(
            h.placement.group,
            lead,
            hint,
            group.leader_epoch(),
            replicas,
            group.in_sync_voters(voters),
            (),
            leads,
            leads and serves and h.fsm.leader_term == term and group.leads_current(),
            serves,
            group.applied >= group.commit_index,
        )

    # ---------------------------------------------------------------- produce

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | memoryview,
        batches: Sequence[BatchHeader],
    ) -> asyncio.Future:
        svc = self.service
        loop = asyncio.get_running_loop()
        g, h = self.groups.lookup(topic, partition)
        if g is None:
            return _done(loop, ProduceResult(ErrorCode.unknown_topic_or_partition, -1, -1))
        if h is None or not h.group.is_leader() or not h.serves():
            return _done(loop, ProduceResult(ErrorCode.not_leader_or_follower, -1, -1))
        if svc.write_gate is not None and not svc.write_gate(len(records)):
            return _done(loop, ProduceResult(ErrorCode.kafka_storage_error, -1, -1))
        tid = h.topic_id
        policy = h.fsm.policy(tid)
        if any(b.size > policy.max_message_bytes for b in batches):
            return _done(loop, ProduceResult(ErrorCode.message_too_large, -1, -1))
        fsm = h.fsm
        return svc.propose_batches(
            loop,
            topic,
            partition,
            records,
            batches,
            policy.log_append_time,
            lambda b: fsm.check_producer(
                tid, partition, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence
            ),
            lambda: fsm.log_start_offset(tid, partition),
            lambda b, batch: dcmd.encode_produce_to(
                tid, partition, b.producer_id, b.producer_epoch, b.base_sequence, batch
            ),
            group=h.group,
        )

    # ----------------------------------------------------- partition admin

    async def delete_records(
        self, topic: str, partition: int, offset: int
    ) -> tuple[ErrorCode, int]:
        g, h = self.groups.lookup(topic, partition)
        if g is None:
            return ErrorCode.unknown_topic_or_partition, -1
        if h is None or not h.group.is_leader() or not h.serves():
            return ErrorCode.not_leader_or_follower, -1
        hw = h.fsm.high_watermark(h.topic_id, partition)
        if offset > hw or offset < -1:
            return ErrorCode.offset_out_of_range, h.fsm.log_start_offset(h.topic_id, partition)
        data = dcmd.encode_delete_records_at(h.topic_id, partition, offset)
        try:
            res = await h.group.apply(data, timeout=self.service.options.produce_timeout_s)
        except Exception as exc:
            return _error_of(exc), -1
        return res.result.error, res.result.low_watermark

    def active_producers(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        _, h = self.groups.lookup(topic, partition)
        if h is None or not h.serves():
            return []
        return h.fsm.active_producers(h.topic_id, partition)

    # ------------------------------------------------------------ topics

    def replication_factor(self, requested: int, hosts: int) -> int:
        """The replicas of a new topic: as requested, else the configured default,
        else min(3, the distinct hosts placement may use)."""
        if requested > 0:
            return requested
        if self.default_replication_factor > 0:
            return self.default_replication_factor
        return min(3, hosts)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None,
        replication_factor: int,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> CreateTopicResult:
        """On the controller leader (the caller checked): place (or check the request's
        replica lists, one per partition, preferred replica first: kafka-topics
        --replica-assignment), then commit the topic with its placement in one
        controller entry; then wait (bounded, also by settle_by, a loop time) for its
        partitions to settle. Placement and commit run one creation at a time, so
        each placement counts the load of the ones before it; the settle waits of
        several creations overlap."""
        if configs:
            try:
                configs = validate_all(configs)
            except TopicConfigError:
                return CreateTopicResult(ErrorCode.invalid_config, None)
        async with self._creating:
            result = await self._place_topic(
                name, partitions, configs, replication_factor, assignments
            )
        if result.topic is not None:
            await self._settle(name, range(partitions), settle_by)
        return result

    async def _place_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None,
        replication_factor: int,
        assignments: Sequence[Sequence[int]] | None,
    ) -> CreateTopicResult:
        """The placement and its controller entry (create_topic's first half)."""
        svc = self.service
        missing = await self.hosts_settled() if self.hosts_settled is not None else []
        hosts = self.hosts()
        # The default is bounded by the hosts, not the nodes: 4 processes on 2 machines
        # hold at most 2 replicas of a partition (one per host).
        machines = len({label or str(n) for n, label in hosts.items()})
        rf = self.replication_factor(replication_factor, machines)
        table = svc.fsm.placement
        # Load only on the nodes placement may use (a node being drained, or not
        # registered yet, still holds replicas but is not in hosts).
        topology = grow_topic.topology_of(hosts, table.assignments())
        if self.down is not None:
            topology = grow_topic.prefer_live(topology, self.down(), rf)
        try:
            if assignments:
                replicas = grow_topic.checked_assignments(
                    topology, assignments, len(assignments[0])
                )
            else:
                replicas = place_partitions(topology, partitions, rf, topic=name)
        except PlacementError as exc:
            why = str(exc)
            if missing:
                why += f"; node(s) {missing} have not registered their node.host yet"
            return CreateTopicResult(exc.code, None, why)
        # The controller's recorded incarnations: the new groups' sealed start
        # (sink/state/placement_table.py, PLACE_TOPIC)
        incs = svc.node.incarnations()
        data = encode_place_topic(name, partitions, uuid.uuid4(), configs, replicas, incs)
        try:
            res = await svc.node.apply(data, timeout=svc.options.produce_timeout_s)
        except Exception as exc:
            err = _error_of(exc)
            return CreateTopicResult(
                ErrorCode.not_controller if err == ErrorCode.not_leader_or_follower else err, None
            )
        self.groups.wake()
        return res.result

    async def _settle(self, name: str, partitions: range, by: float | None = None) -> None:
        """Answer a creation once its partitions are served (sink/node/settle.py), or
        after settle_s, or at `by` (a loop time: the request's own timeout)."""
        wait_s = self.settle_s
        if by is not None:
            wait_s = min(wait_s, by - asyncio.get_running_loop().time())
        if wait_s <= 0 or not partitions:
            return
        done = await settle.wait_settled(
            self.groups, self.leaders, self.poller, name, partitions, wait_s
        )
        if not done:
            log.info(
                "sink.groups topic %r partitions %d-%d not all led by their preferred "
                "replicas after %.1f s; answering anyway",
                name,
                partitions.start,
                partitions.stop - 1,
                self.settle_s,
            )

    async def create_partitions(
        self,
        name: str,
        count: int,
        validate_only: bool,
        assignments: Sequence[Sequence[int]] | None = None,
        settle_by: float | None = None,
    ) -> tuple[ErrorCode, str | None]:
        """Grow a placed topic to count partitions -> (error, message). On the
        controller leader (else NOT_CONTROLLER, as CreateTopics): the new partitions'
        replica lists (sink/node/grow_topic.py), then one ADD_PARTITIONS entry;
        validate_only runs every check, the placer included, and commits nothing."""
        svc = self.service
        if not svc.node.is_leader():
            return ErrorCode.not_controller, "not the controller (Raft leader)"
        async with self._growing:
            info = svc.fsm.topic(name)
            if info is None:
                return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
            before = info.partitions
            table = svc.fsm.placement
            current = [g.replicas for g in table.of_topic(info.topic_id.hex)]
            if len(current) != info.partitions:  # a one-group topic in a groups cluster
                return ErrorCode.invalid_request, f"topic {name!r} has no partition placement"
            if self.hosts_settled is not None:
                await self.hosts_settled()
            topology = grow_topic.topology_of(self.hosts(), table.assignments())
            if self.down is not None and not assignments and current:
                topology = grow_topic.prefer_live(topology, self.down(), len(current[0]))
            try:
                replicas = grow_topic.added_replicas(
                    topology,
                    name,
                    current,
                    count,
                    assignments,
                    svc.options.max_create_partitions,
                )
            except PlacementError as exc:
                return exc.code, str(exc)
            if validate_only:
                return ErrorCode.none, None
            incs = svc.node.incarnations()
            data = encode_add_partitions(name, info.topic_id, count, replicas, incs)
            try:
                res = await svc.node.apply(data, timeout=svc.options.produce_timeout_s)
            except Exception as exc:
                err = _error_of(exc)
                return (
                    ErrorCode.not_controller if err == ErrorCode.not_leader_or_follower else err
                ), None
        self.groups.wake()  # start the replicas placed here now, not at the next round
        result: Any = res.result
        if result.error == ErrorCode.invalid_partitions and result.topic is not None:
            # The topic changed between placing and applying (another leader grew it).
            now = result.topic.partitions
            refused = grow_topic.count_refusal(name, now, count, svc.options.max_create_partitions)
            return ErrorCode.invalid_partitions, (
                refused[1] if refused else f"topic {name!r} changed meanwhile to {now} partitions"
            )
        if result.error == ErrorCode.none:
            await self._settle(name, range(before, count), settle_by)
        return result.error, None
