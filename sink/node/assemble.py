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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import start_http_server

from raftlog.runtime import HostOptions, RaftGroup, RaftHost, RaftNode
from raftlog.storage import DiskGuard
from raftlog.transport import GatedTransport, GrpcTransport, TransportOptions
from sink.config import SinkConfig, parse_hostport
from sink.kafka import NodeMemory
from sink.kafka.server import KafkaServer
from sink.lifecycle.producer_expiry import ExpiryTarget, GroupsProducerExpiry, ProducerExpiry
from sink.members.drain import Drainer
from sink.members.operator import MembershipOperator
from sink.members.rpc import MembersEndpoint
from sink.members.watch import MemberWatch
from sink.metrics import KafkaCollector, NodeCollector, QuotaCollector, make_registry
from sink.node import observe, settle
from sink.node.balance_driver import BalancerCollector, LeaderBalanceDriver, RaftHostSource
from sink.node.compaction import compaction_limit
from sink.node.data_groups import DataGroups
from sink.node.disk_watch import DiskWatch
from sink.node.leaders import LeaderPoller, LeadersTable
from sink.node.pipeline_commits import PipelineCommits
from sink.node.replica_moves import MoveDriver, MoveOps
from sink.node.routed_reads import RoutedReads
from sink.node.routing import PartitionRouting
from sink.quotas import ClientQuotaManager, QuotaTable
from sink.readapi.client import ReadApiClient
from sink.readapi.server import ReadApiService
from sink.security.acl_service import AclService
from sink.security.authorizer import Authorizer
from sink.security.principal import parse_rules
from sink.security.sasl import PLAIN, SaslPolicy
from sink.security.sasl_client import Login
from sink.security.sasl_options import fake_key
from sink.security.tls import NodeTls
from sink.security.user_service import UserService
from sink.service import SinkService
from sink.state import SinkStateMachine
from sink.state.members import MemberAddress
from sink.topics.worker import RetentionWorker

log = logging.getLogger("sink.node")

READ_API_MAX_MESSAGE_BYTES = 128 * 1024 * 1024


def _applier(group: Any) -> Callable[[bytes], Awaitable[Any]]:
    """propose(data) -> the applied result, on one data group (producer expiry)."""

    async def apply(data: bytes) -> Any:
        return (await group.apply(data)).result

    return apply


"""Largest read-API response (a Fetch of many batches)."""


class SinkNode:
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
        cfg = self.config
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
        self.retention = RetentionWorker(self.fsm, self.node, cfg.topics.retention_check_ms / 1000)
        self.retention.start()
        self.disk.on_refuse = self.retention.compact_now
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
        self._start_metrics()
        log.warning(
            "sink.ready node=%d kafka=%s raft=%s read_api=%s",
            cfg.node_id,
            cfg.me.kafka,
            cfg.listen("raft"),
            cfg.listen("read_api"),
        )

    async def _start_host(self) -> None:
        """Partition groups: a RaftHost over the data directory (groups/<id>/ per
        group) whose group 0 is the controller (SinkStateMachine)."""
        cfg = self.config
        opts = cfg.node_options()
        self.host = RaftHost(
            cfg.node_id,
            self.transport,
            cfg.data_dir,
            HostOptions(
                tick_ms=opts.tick_ms,
                housekeeping_s=min(0.1, opts.proposal_timeout_s / 4),
                quiesce=opts.quiesce_ticks > 0,  # node beats only where groups quiesce
                beat_ticks=opts.heartbeat_ticks,
                storage=opts.storage,
            ),
        )
        await self.host.start()
        self.node = await self.host.add_group(
            0,
            {i: p.raft for i, p in cfg.peers.items()},
            self.fsm,
            opts,
            seed=self._seed,
            join=cfg.node.join,
            compaction_limit=self._compaction_limit,
        )

    async def _start_data_groups(self) -> None:
        """The reconciler, the leaders table and the routing (sink.node.routing); the
        data groups on disk reopen here, before any Kafka port opens."""
        cfg, node, fsm, service = self.config, self.node, self.fsm, self.service
        assert self.host is not None and node is not None and fsm is not None
        assert service is not None
        self.data_groups = DataGroups(
            self.host,
            fsm,
            node_id=cfg.node_id,
            raft_address=self._raft_address_of,
            options=cfg.node_options(),
            defaults=cfg.topics,
            retention_interval_s=cfg.topics.retention_check_ms / 1000,
            max_entries=cfg.retention.max_entries,
            hard_max_entries=cfg.retention.hard_max_entries,
            moves=MoveDriver(cfg.node_id, self._raft_address_of, self._finish_move),
        )
        self.move_ops = MoveOps(node, fsm, self._voter_hosts, self.data_groups.wake)
        service.partition_moves = self.move_ops  # the Kafka reassignment APIs
        self.leaders = LeadersTable()
        self.leader_poller = LeaderPoller(
            cfg.node_id,
            self.leaders,
            self._read_api_peers,
            lambda a: ReadApiClient(a, credentials=self.read_api_client_credentials()),
        )
        self.reads = RoutedReads(fsm, self.data_groups)
        self.pipeline_commits = PipelineCommits(
            self.data_groups,
            lambda topic, partition: service.role(topic, partition).leader,
            cfg.node_id,
            self._read_api_of,
            lambda a: ReadApiClient(a, credentials=self.read_api_client_credentials()),
        )
        service.partition_reads = self.reads
        service.use_routing(
            PartitionRouting(
                service,
                self.data_groups,
                self.leaders,
                self.leader_poller,
                self._placement_hosts,
                cfg.cluster.default_replication_factor,
                settle_s=settle.SETTLE_S,
            )
        )
        # Restart: the controller's own replica applies what it knows to be committed
        # (its placement) before the groups it names are reopened (bounded: a node
        # whose controller lags reopens the rest in the reconciler's first rounds).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while node.applied < node.commit_index and loop.time() < deadline:
            await asyncio.sleep(0.02)
        opened = await self.data_groups.open_on_disk()
        if opened:
            log.warning("sink.groups node=%d reopened %d data groups", cfg.node_id, opened)
        self.data_groups.start()
        self.leader_poller.start()
        # Every node moves only the groups it leads, toward the placement's preferred
        # replica (docs/partition-groups.md, "The balancer driver").
        self.balancer = LeaderBalanceDriver(
            RaftHostSource(self.host, self._preferred_replicas, exclude=frozenset({0})),
            cfg.cluster.balancer_options(),
        )
        self.balancer.start()

    def _expiry_targets(self) -> dict[int, ExpiryTarget]:
        """Every data group hosted here, for its producer-state expiry (scanned on every
        replica, proposed on the group's leader)."""
        groups = self.data_groups.hosted if self.data_groups is not None else {}
        return {
            gid: ExpiryTarget(h.fsm.data, _applier(h.group), h.group.is_leader)
            for gid, h in groups.items()
        }

    def _preferred_replicas(self, group: int) -> tuple[int, ...] | None:
        """A data group's replicas in placement order (the first is preferred); during
        a move the target's order (never hand leadership back to a leaving node)."""
        assert self.fsm is not None
        placed = self.fsm.placement.groups.get(group)
        return (placed.target or placed.replicas) if placed is not None else None

    async def _finish_move(self, group: int, target: tuple[int, ...]) -> None:
        """A group led here reached its move's target: have the controller's leader
        commit MOVE_DONE (through the Members call, which forwards to it)."""
        if self.members_endpoint is None:
            raise RuntimeError("the read API is not up yet")
        req = {"op": "move_done", "group": group, "target": list(target), "timeout_s": 10.0}
        reply = await self.members_endpoint.call(json.dumps(req), forwarded=False)
        if reply.code:
            raise RuntimeError(f"move_done refused: {reply.code}: {reply.error}")

    def _raft_address_of(self, node_id: int) -> str | None:
        addr = self.members.address_of(node_id) if self.members else None
        if addr is not None:
            return addr.raft
        peer = self.config.peers.get(node_id)
        return peer.raft if peer is not None else None

    def _members_now(self) -> list[int]:
        assert self.node is not None
        m = self.node.membership()
        return sorted({*m["voters"], *m["learners"]})

    def _read_api_peers(self) -> dict[int, str]:
        return {
            n: a
            for n in self._members_now()
            if n != self.config.node_id and (a := self._read_api_of(n))
        }

    def _voter_hosts(self) -> dict[int, str | None]:
        """The controller's voters and their host labels: this node's `node.host`;
        every other node counts as its own host until the controller's membership
        carries labels (docs/partition-groups.md)."""
        assert self.node is not None
        me = self.config.node_id
        label = self.config.node.host or None
        return {n: (label if n == me else None) for n in self.node.membership()["voters"]}

    def _peers_down(self) -> set[int]:
        """The nodes this node's host cannot reach now (RaftHost's peers_down)."""
        return set(self.host.status()["peers_down"]) if self.host is not None else set()

    def _placement_hosts(self) -> dict[int, str | None]:
        """The nodes new topics and partitions may be placed on: the voters but those
        being drained (sink/members/drain.py)."""
        assert self.fsm is not None
        draining = self.fsm.members.draining
        return {n: h for n, h in self._voter_hosts().items() if n not in draining}

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

    def _start_users(self) -> None:
        """SASL users (sink.security.user_service): read by every listener's logins,
        the bootstrap users written by the first ready leader (also when SASL is off,
        so users can exist before it is turned on)."""
        sasl = self.config.sasl
        self.users = UserService(
            lambda: self.fsm.users,
            self.service._apply_entry,
            is_leader=self.node.is_leader,
            leader_ready=self.service.leader_ready,
            bootstrap=sasl.users(),
            iterations=sasl.iterations,
        )
        self.service.users = self.users  # type: ignore[attr-defined]
        self.fsm.on_leader_change.append(self.users.on_leadership_change)
        self.users.on_leadership_change()  # led before the callback was registered

    def _start_acls(self) -> None:
        """ACL bindings (always kept, so they can be written before authorization is
        turned on) and, with authorization.enabled, the authorizer every listener's
        handlers ask. The SASL relay user is a super user: a follower authorizes a
        request for its client before relaying it to the leader as that user."""
        authz = self.config.authorization
        self.service.acls = AclService(  # type: ignore[attr-defined]
            lambda: self.fsm.acls, self.service._apply_entry, is_leader=self.node.is_leader
        )
        if not authz.enabled:
            self.service.authorizer = None  # type: ignore[attr-defined]
            log.warning(
                "sink.authorization OFF on node %d: every client may do everything "
                "(authorization.enabled=false; `raftsink local` default)",
                self.config.node_id,
            )
            return
        relay = self.config.sasl.relay_login() if self.config.sasl.enabled else None
        extra = [f"User:{relay[0]}"] if relay is not None else []
        self.service.authorizer = Authorizer(  # type: ignore[attr-defined]
            lambda: self.fsm.acls, authz, extra_super_users=extra
        )
        log.warning(
            "sink.authorization ON node=%d super_users=%s allow_if_no_acls=%s",
            self.config.node_id,
            sorted(self.service.authorizer.super_users),  # type: ignore[attr-defined]
            authz.allow_if_no_acls,
        )

    def _sasl(self) -> tuple[SaslPolicy | None, Login | None]:
        """The listeners' SASL policy (None: open) and the relay's login."""
        sasl = self.config.sasl
        if not sasl.enabled:
            return None, None
        mechs = sasl.mechanism_list()
        policy = SaslPolicy(mechs, sasl.session_lifetime_ms, fake_key())
        who = sasl.relay_login()
        if who is None:
            return policy, None
        scram = [m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256") if m in mechs]
        return policy, Login(scram[0] if scram else PLAIN, *who)

    async def _start_kafka(self) -> None:
        cfg = self.config
        host, port = parse_hostport("kafka.listen", cfg.listen("kafka"))
        # One memory budget for the node: every listener draws on it.
        memory = NodeMemory.of(cfg.kafka.limits)
        ssl_context = self.tls.kafka if self.tls is not None else None
        policy, relay = self._sasl()
        security = {
            "ssl_context": ssl_context,
            "forward_tls": (lambda: ssl_context.forward) if ssl_context is not None else None,
            "sasl": policy,
            "relay_login": relay,
            "principal_rules": parse_rules(cfg.authorization.tls_principal_rules),
        }
        self.kafka = KafkaServer(
            self.service, host, port, cfg.kafka.limits, memory=memory, **security
        )
        await self.kafka.start()
        if cfg.kafka.external_listen:
            ehost, eport = parse_hostport("kafka.external_listen", cfg.kafka.external_listen)
            advertised = {
                i: parse_hostport("kafka.external_addresses", a)
                for i, a in cfg.kafka.external_addresses.items()
            }
            self.kafka_external = KafkaServer(
                self.service,
                ehost,
                eport,
                cfg.kafka.limits,
                advertised=advertised,
                memory=memory,
                **security,
            )
            await self.kafka_external.start()

    def _members_endpoint(self) -> MembersEndpoint:
        assert self.members is not None and self.member_watch is not None
        self.members_endpoint = MembersEndpoint(
            self.members,
            self._read_api_of,
            self.member_watch.retire,
            client_credentials=self.read_api_client_credentials,
            moves=self.move_ops,
            drainer=(
                Drainer(self.move_ops, self._voter_hosts, self._peers_down)
                if self.move_ops is not None
                else None
            ),
        )
        return self.members_endpoint

    async def _start_read_api(self) -> None:
        cfg = self.config
        read_api = ReadApiService(
            self.node,
            self.reads,
            self._wait_for_data,
            leader_read_api=self._read_api_of,
            extra_status=self._extra_status,
            members=self._members_endpoint(),
            client_credentials=self.read_api_client_credentials,
            roles=self.service,
            pipeline_commits=self.pipeline_commits,
        )
        server = grpc.aio.server(
            options=[("grpc.max_send_message_length", READ_API_MAX_MESSAGE_BYTES)]
        )
        server.add_generic_rpc_handlers((read_api.handler(),))
        if self.tls is not None and self.tls.grpc is not None and cfg.tls.read_api:
            creds = self.tls.grpc.read_api_server_credentials()
            self.read_api_port = server.add_secure_port(cfg.listen("read_api"), creds)
        else:
            self.read_api_port = server.add_insecure_port(cfg.listen("read_api"))
        if self.read_api_port == 0:
            raise OSError(f"cannot listen on {cfg.listen('read_api')} (read API)")
        await server.start()
        self._read_server = server

    def read_api_client_credentials(self) -> grpc.ChannelCredentials | None:
        """This node as a client of another node's read API: TLS with its own
        certificate when the read API is TLS (current files), else None (plaintext)."""
        if self.tls is None or self.tls.grpc is None or not self.config.tls.read_api:
            return None
        return self.tls.grpc.channel_credentials()

    def reload_tls(self) -> bool:
        """Read the TLS files again (SIGHUP): new connections and handshakes use them,
        open ones keep theirs; a failed reload keeps the old files (logged). False
        when TLS is off or the reload failed."""
        return self.tls.reload() if self.tls is not None else False

    def _read_api_of(self, node_id: int) -> str | None:
        """A member's read API address: the log's, else the `peers` setting's."""
        addr = self.members.address_of(node_id) if self.members else None
        return addr.read_api if addr else None

    def _kafka_servers(self) -> list[KafkaServer]:
        return [k for k in (self.kafka, self.kafka_external) if k is not None]

    def _start_metrics(self) -> None:
        cfg = self.config
        if not cfg.node.metrics_listen:
            return
        host, port = parse_hostport("node.metrics_listen", cfg.node.metrics_listen)
        assert self.service is not None
        registry = make_registry(
            NodeCollector(
                self.node, self.transport, self._extra_metrics, gauges=self._extra_gauges
            ),
            KafkaCollector(cfg.node_id, self.kafka_stats),
            QuotaCollector(str(cfg.node_id), self.service.quotas),
            *(
                [BalancerCollector(cfg.node_id, self.balancer.stats)]
                if self.balancer is not None
                else []
            ),
        )
        self._metrics_server, _ = start_http_server(port, addr=host, registry=registry)
        self.metrics_port = self._metrics_server.server_port

    def _extra_metrics(self) -> dict[str, float]:
        return observe.extra_metrics(self)

    def kafka_stats(self) -> dict[str, float]:
        """The Kafka listeners' overload figures (sink/node/observe.py)."""
        return observe.kafka_stats(self)

    def _extra_gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        return observe.extra_gauges(self)

    def _extra_status(self) -> dict[str, Any]:
        return observe.extra_status(self)

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

    async def stop(self) -> None:
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
