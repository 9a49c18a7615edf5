"""SinkNode: the one place a raftsink node is assembled from its configuration.

    RaftNode (raftlog) --on_apply--> SinkStateMachine (sink.state)
         ^                                   |
    SinkService (produce/fetch glue)  <------+  read side
         ^                    ^
    KafkaServer(s)        ReadApiService (gRPC, connectors)      /metrics (Prometheus)

`raftsink serve` (sink.node.serve) and the in-process test cluster
(tests/helpers/sink_cluster.py) both build nodes here; nothing else wires one.
A caller may inject the Raft transport (tests: a LocalNetwork's) and the RNG
seed; everything else comes from the SinkConfig.

Start order and why:
  1. storage + Raft node: the state machine's read side needs the node's log;
  2. SinkService over node + state machine;
  3. Kafka listener(s), 4. read API, 5. metrics: each serves only once the
     service exists, so no request ever meets a half-built node.
stop() runs the reverse, so no listener outlives the node it answers for.

TLS (the `tls` section): the certificate files are read once before anything starts
(a missing or mismatched file fails the start, not the first handshake); reload_tls()
(SIGHUP in `raftsink serve`) reads them again for new connections.

SinkNode is one class in four modules, one part each; the parts hold no state of their
own (every field is set in SinkNode.__init__): the partition groups' wiring
(assemble_groups.py: the RaftHost, the data groups and what drives them), security
(assemble_security.py: SASL users, ACLs and the authorizer, the SASL policy, TLS as a
read-API client and its reload) and the listeners (assemble_listeners.py: Kafka, the
read API, metrics). This module keeps the fields, the start order, the Raft transport
and disk watch, the leadership hand-off, stop(), the fatal-error latch and the node's
policies (client quotas, how far the log compacts, the read API's long poll).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc

from raftlog.runtime import RaftGroup, RaftHost, RaftNode
from raftlog.storage import DiskGuard
from raftlog.transport import GatedTransport, GrpcTransport, TransportOptions
from sink.config import SinkConfig, parse_hostport
from sink.kafka.server import KafkaServer
from sink.lifecycle.producer_expiry import GroupsProducerExpiry, ProducerExpiry
from sink.members.operator import MembershipOperator
from sink.members.rpc import MembersEndpoint
from sink.members.watch import MemberWatch
from sink.node.assemble_groups import GroupsWiring
from sink.node.assemble_listeners import ListenerWiring
from sink.node.assemble_security import SecurityWiring
from sink.node.balance_driver import LeaderBalanceDriver
from sink.node.compaction import compaction_limit
from sink.node.data_groups import DataGroups
from sink.node.disk_watch import DiskWatch
from sink.node.host_labels import HostAnnouncer
from sink.node.layout import resolve_layout
from sink.node.leaders import LeaderPoller, LeadersTable
from sink.node.pipeline_commits import PipelineCommits
from sink.node.replica_moves import MoveOps
from sink.quotas import ClientQuotaManager, QuotaTable
from sink.security.tls import NodeTls
from sink.security.user_service import UserService
from sink.service import SinkService
from sink.state import SinkStateMachine
from sink.state.members import MemberAddress
from sink.topics.worker import RetentionWorker

log = logging.getLogger("sink.node")


class SinkNode(GroupsWiring, SecurityWiring, ListenerWiring):
    """One raftsink node. Attributes are valid after start(): node (RaftNode), fsm,
    service, kafka (the main listener), kafka_external (or None), transport,
    read_api_port and metrics_port (bound ports; 0 when not served)."""

    def __init__(
        self, config: SinkConfig, *, transport: Any | None = None, seed: int | None = None
    ) -> None:
        self.config = config
        self._transport_override = transport
        self._seed = seed
        self.node: RaftGroup | None = None
        self.move_ops: MoveOps | None = None  # partition groups: replica moves
        self.members_endpoint: MembersEndpoint | None = None
        self._fatal: BaseException | None = None  # the first group failure seen (latched)
        # With cluster.partition_groups: the process's RaftHost (group 0 = the
        # controller = self.node, plus the data groups), the reconciler and the leaders
        # table, and the leader-balancer driver over the data groups `host` runs.
        self.host: RaftHost | None = None
        self.balancer: LeaderBalanceDriver | None = None
        self.data_groups: DataGroups | None = None
        self.leaders: LeadersTable | None = None
        self.leader_poller: LeaderPoller | None = None
        self.reads: Any = None  # what partition reads go to (fsm, or RoutedReads)
        self.fsm: SinkStateMachine | None = None
        self.service: SinkService | None = None
        self.producer_expiry: ProducerExpiry | None = None
        # With partition groups: expiry per data group, and the read API's Commit into
        # each partition's data group (None with one group).
        self.group_expiry: GroupsProducerExpiry | None = None
        self.pipeline_commits: PipelineCommits | None = None
        self.users: UserService | None = None
        self.kafka: KafkaServer | None = None
        self.kafka_external: KafkaServer | None = None
        self.host_announcer: HostAnnouncer | None = None
        self.transport: Any = None
        self.disk: DiskWatch | None = None
        self.retention: RetentionWorker | None = None
        self.read_api_port = 0
        self.metrics_port = 0
        self._read_server: grpc.aio.Server | None = None
        self._metrics_server: Any = None
        self.members: MembershipOperator | None = None
        self.member_watch: MemberWatch | None = None
        self.tls: NodeTls | None = None

    @property
    def server(self) -> KafkaServer | None:
        """The main Kafka listener (the name the in-process tests use)."""
        return self.kafka

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # An existing data directory keeps its layout whatever the setting (layout.py).
        self.config = cfg = resolve_layout(self.config)
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.tls = NodeTls(cfg.tls) if cfg.tls.enabled else None
        self.disk = self._disk_watch()
        # Inbound Raft traffic passes the disk gates (see DiskWatch).
        self.transport = GatedTransport(
            self._transport_override or self._grpc_transport(),
            refuse_appends=lambda: not self.disk.appends_allowed(),
            refuse_leadership=lambda: not self.disk.accepts_leadership(),
        )
        self.fsm = SinkStateMachine(
            default_partitions=cfg.kafka.default_partitions,
            auto_create_topics=cfg.kafka.auto_create_topics,
        )
        self.fsm.topic_configs.set_defaults(cfg.topics)
        if cfg.cluster.partition_groups:
            await self._start_host()
        else:
            self.node = RaftNode(
                cfg.node_id,
                cfg.data_dir,
                {i: p.raft for i, p in cfg.peers.items()},
                self.fsm,
                self.transport,
                cfg.node_options(),
                seed=self._seed,
                join=cfg.node.join,
                compaction_limit=self._compaction_limit,
            )
            await self.node.start()
        self.reads = self.fsm
        self.disk.node = self.node
        if self.host is not None:  # partition groups: every group shares this disk
            host = self.host
            self.disk.groups_of = lambda: list(host.groups.values())
        self.retention = RetentionWorker(self.fsm, self.node, cfg.topics.retention_check_ms / 1000)
        self.retention.start()
        self.disk.on_refuse = self._compact_now
        self.disk.start()
        # The state machine serves batches from the committed Raft log (applying
        # starts on the next loop turn, so it is attached before any apply).
        self.fsm.attach_log(self.node.read_committed, self.node.first_index)
        self.service = SinkService(
            self.node,
            self.fsm,
            node_id=cfg.node_id,
            brokers={i: parse_hostport("node.peers", p.kafka) for i, p in cfg.peers.items()},
            cluster_id=cfg.kafka.cluster_id,
            options=cfg.kafka.service,
            quotas=ClientQuotaManager(self._quota_table, cfg.quotas),
            write_gate=self.disk.admit_write,
            offsets_options=cfg.offsets,
            group_options=cfg.groups,
            log_dir=os.path.abspath(cfg.data_dir),
        )
        self.service.offsets.start()  # expiry rounds (acts only while leading)
        if self.host is not None:
            await self._start_data_groups()
        self._start_users()
        self._start_acls()
        # The live configuration is the log's (sink.members): `peers` is the initial one.
        initial = {i: MemberAddress(p.raft, p.kafka, p.read_api) for i, p in cfg.peers.items()}
        self.members = MembershipOperator(self.node, self.fsm, initial)
        self.member_watch = MemberWatch(
            self.node, self.fsm, self.service.brokers, initial, self._kafka_servers
        )
        self.producer_expiry = ProducerExpiry(
            self.fsm,
            self.service.apply_command,
            self.node.is_leader,
            cfg.producers.id_expiration_ms,
        )
        self.producer_expiry.start()
        if self.data_groups is not None:
            self.group_expiry = GroupsProducerExpiry(
                self._expiry_targets, cfg.producers.id_expiration_ms
            )
            self.group_expiry.start()
        await self._start_kafka()
        self.member_watch.start()
        await self._start_read_api()
        if self.data_groups is not None:
            self._start_host_announcer()
        self._start_metrics()
        log.warning(
            "sink.ready node=%d kafka=%s raft=%s read_api=%s",
            cfg.node_id,
            cfg.me.kafka,
            cfg.listen("raft"),
            cfg.listen("read_api"),
        )

    def _disk_watch(self) -> DiskWatch:
        """The free-space reserve of every volume under the data directory (the log and
        the snapshots may be mounts of their own)."""
        cfg, storage = self.config, self.config.storage
        paths = [cfg.data_dir, *(os.path.join(cfg.data_dir, d) for d in ("log", "snapshots"))]
        guard = DiskGuard(
            paths, reserve_bytes=storage.reserve_bytes, reserve_percent=storage.reserve_percent
        )
        return DiskWatch(guard, cfg.node_id, interval_s=storage.space_check_ms / 1000)

    def _grpc_transport(self) -> GrpcTransport:
        cfg = self.config
        others = {i: p.raft for i, p in cfg.peers.items() if i != cfg.node_id}
        options: TransportOptions = cfg.transport
        security = self.tls.grpc if (self.tls is not None and cfg.tls.raft) else None
        return GrpcTransport(
            cfg.node_id, cfg.listen("raft"), others, options=options, security=security
        )

    async def hand_off_leadership(self, timeout_s: float) -> int | None:
        """Graceful shutdown's first step: a leader hands leadership to its most
        caught-up voter (TimeoutNow once that one has the whole log). Returns the new
        leader, or None (not leading, no other voter, or timeout: the others then
        elect one after an election timeout, as after a crash). With partition groups
        the data groups led here hand off too (each to another of its replicas)."""
        if self.balancer is not None:
            await self.balancer.stop()  # no transfer back while handing off
        if self.data_groups is not None and timeout_s > 0:
            # The data groups this node leads hand off alongside (each to another
            # replica; a failure leaves that group to an election, as after a crash).
            moved = asyncio.ensure_future(self.data_groups.hand_off_all(timeout_s))
            target = await self._hand_off_controller(timeout_s)
            log.warning("sink.shutdown handed off %d data groups", await moved)
            return target
        return await self._hand_off_controller(timeout_s)

    async def _hand_off_controller(self, timeout_s: float) -> int | None:
        node, members = self.node, self.members
        if node is None or members is None or not node.is_leader() or timeout_s <= 0:
            return None
        target = members.most_caught_up()
        if target is None:
            return None
        try:
            await asyncio.wait_for(node.transfer_leader(target, timeout=timeout_s), timeout_s)
        except Exception as exc:  # shutting down anyway: say why the hand-off failed
            log.warning("sink.shutdown hand-off to node %d failed: %r", target, exc)
            return None
        log.warning("sink.shutdown node=%d handed leadership to node %d", node.id, target)
        return target

    async def drain_clients(self, grace_s: float) -> None:
        """Graceful shutdown, after the hand-off: the Kafka listeners answer what their
        connections already sent (a produce in flight settles when its entry applies
        here, or after raft.outcome_wait_ticks), then close them; at most grace_s."""
        listeners = [k for k in (self.kafka, self.kafka_external) if k is not None]
        left = await asyncio.gather(*(k.drain(grace_s) for k in listeners))
        if sum(left):
            log.warning(
                "sink.shutdown %d Kafka connections still owed answers after %.1f s: cut",
                sum(left),
                grace_s,
            )

    async def stop(self) -> None:
        if self.host_announcer is not None:
            await self.host_announcer.stop()
        if self.member_watch is not None:
            await self.member_watch.stop()
        if self.producer_expiry is not None:
            await self.producer_expiry.stop()
        if self.group_expiry is not None:
            await self.group_expiry.stop()
        if self.users is not None:
            self.users.stop()
        for kafka in (self.kafka, self.kafka_external):
            if kafka is not None:
                await kafka.stop()
        if self._read_server is not None:
            await self._read_server.stop(grace=0.5)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self.service is not None:
            await self.service.offsets.stop()
        if self.disk is not None:
            await self.disk.stop()
        if self.retention is not None:
            await self.retention.stop()
        if self.service is not None:
            self.service.groups.close()
        if self.balancer is not None:
            await self.balancer.stop()
        if self.leader_poller is not None:
            await self.leader_poller.stop()
        if self.data_groups is not None:
            await self.data_groups.stop()
        if self.host is not None:
            await self.host.stop()  # every group: the controller and the data groups
        elif self.node is not None:
            await self.node.stop()

    @property
    def fatal_error(self) -> BaseException | None:
        """The storage failure that stopped a Raft group of this node, if any: the
        controller's or, with partition groups, any data group's. Every group of the
        process shares its disk and its LMDB index, and a failed disk queue refuses all
        further writes, so one failed group means a half-alive node: serve() stops the
        whole node on it, as on the one group's (a data group's ENOSPC used to leave the
        node running with that replica dead). Latched: the host forgets its groups as
        it stops, and the exit code after stop() must still say why."""
        if self._fatal is None and self.node is not None:
            self._fatal = self.node.fatal_error
        if self._fatal is None and self.host is not None:
            for group in list(self.host.groups.values()):
                if group.fatal_error is not None:
                    self._fatal = group.fatal_error
                    break
        return self._fatal

    # ---------------------------------------------------- policies of the node

    def _compact_now(self) -> None:
        """Below the disk reserve: the controller's retention and, with partition
        groups, every data group's compact at once (one disk for all of them)."""
        assert self.retention is not None
        self.retention.compact_now()
        if self.data_groups is not None:
            self.data_groups.compact_now()

    def _quota_table(self) -> QuotaTable:
        """The applied client quota configuration (a snapshot load replaces the object)."""
        assert self.fsm is not None
        return self.fsm.quotas

    def _compaction_limit(self) -> int | None:
        """How far the Raft log may compact: below what topic retention keeps (the
        retention worker's limit: per-topic retention.ms / retention.bytes, pipelines'
        holds and their hard limits); retention.max_entries compacts further to that
        many entries, never past data a registered pipeline still needs; and
        retention.hard_max_entries forces it."""
        retention, node, fsm = self.config.retention, self.node, self.fsm
        assert node is not None and fsm is not None
        return compaction_limit(
            node.applied,
            self.retention.limit if self.retention is not None else 0,
            fsm.retention_floor_index() if retention.max_entries else None,
            retention.max_entries,
            retention.hard_max_entries,
        )

    async def _wait_for_data(self, topic: str, partition: int, offset: int, timeout: float) -> None:
        """Long poll of the read API: until data past offset is applied, or timeout."""
        fsm = self.reads
        assert fsm is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while fsm.high_watermark(topic, partition) <= offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            event = fsm.data_event()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return
