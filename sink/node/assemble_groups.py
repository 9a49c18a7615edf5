"""The partition groups' wiring of a SinkNode (a part of sink.node.assemble.SinkNode,
holding no state of its own: every field is SinkNode's, set in its __init__).

With cluster.partition_groups: the RaftHost whose group 0 is the controller
(_start_host, start order step 1), then the data groups, the reconciler, the leaders
table, the routing, the pipelines' commits and the leader-balancer driver
(_start_data_groups: after the SinkService exists, before any Kafka port opens); what
those drive calls back (producer-state expiry targets, a group's preferred replicas,
a finished move); this node's host-label registration (_start_host_announcer); and the
membership lookups they share (Raft addresses, the voters and their hosts, the peers
down, the hosts new partitions may be placed on).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raftlog.runtime import HostOptions, RaftHost
from sink.lifecycle.producer_expiry import ExpiryTarget
from sink.node import settle
from sink.node.balance_driver import LeaderBalanceDriver, RaftHostSource
from sink.node.data_groups import DataGroups
from sink.node.host_labels import HostAnnouncer, labels_settled, unregistered, voter_hosts
from sink.node.leaders import LeaderPoller, LeadersTable
from sink.node.pipeline_commits import PipelineCommits
from sink.node.preferred_election import PreferredElections
from sink.node.replica_moves import MoveDriver, MoveOps
from sink.node.routed_reads import RoutedReads
from sink.node.routing import PartitionRouting
from sink.readapi.client import ReadApiClient

log = logging.getLogger("sink.node")

HOSTS_SETTLE_S = 5.0
"""Longest a topic creation (or CreatePartitions) waits for every voter to have
registered its host label (a cluster just started) before placing without them."""


def _applier(group: Any) -> Callable[[bytes], Awaitable[Any]]:
    """propose(data) -> the applied result, on one data group (producer expiry)."""

    async def apply(data: bytes) -> Any:
        return (await group.apply(data)).result

    return apply


class GroupsWiring:
    """The partition groups part of SinkNode (no state of its own)."""

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
                housekeeping_s=min(0.25, opts.proposal_timeout_s / 4),
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
        service.leader_elections = PreferredElections(  # ElectLeaders
            self.data_groups, self.host.peers_down, cfg.node_id
        )
        self.leaders = LeadersTable()
        self.leader_poller = LeaderPoller(
            cfg.node_id,
            self.leaders,
            self._read_api_peers,
            lambda a: ReadApiClient(a, credentials=self.read_api_client_credentials()),
            topics=self._topics_led_elsewhere,
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
                hosts_settled=self._hosts_settled,
                down=self._peers_down,
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

    def _topics_led_elsewhere(self) -> list[str]:
        """The topics with a partition whose data group is not hosted here: only for
        those does Metadata read the leaders table (a hosted group knows its leader)."""
        assert self.fsm is not None and self.data_groups is not None
        hosted = self.data_groups.hosted
        # One pass over the groups (every second: PlacementTable.of_topic scans them all)
        far = {g.topic_id for g in self.fsm.placement if g.group not in hosted}
        if not far:
            return []
        return sorted(n for n, info in self.fsm.topics().items() if info.topic_id.hex in far)

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
        """The controller's voters placement may use and their host labels: this
        node's `node.host`, the others' as registered through the controller's log
        (sink/node/host_labels.py: unregistered voters are left out while labels are
        in use)."""
        assert self.node is not None and self.fsm is not None
        voters = self.node.membership()["voters"]
        return voter_hosts(voters, self.fsm.members.hosts, self.config.node_id, self._label)

    def _unregistered(self) -> list[int]:
        assert self.node is not None and self.fsm is not None
        voters = self.node.membership()["voters"]
        return unregistered(voters, self.fsm.members.hosts, self.config.node_id, self._label)

    async def _hosts_settled(self) -> list[int]:
        return await labels_settled(self._unregistered, HOSTS_SETTLE_S)

    @property
    def _label(self) -> str:
        return self.config.node.host

    def _start_host_announcer(self) -> None:
        """Register this node's host label with the controller (after the read API is
        up: the registration goes through its Members call)."""
        endpoint, fsm = self.members_endpoint, self.fsm
        assert endpoint is not None and fsm is not None
        self.host_announcer = HostAnnouncer(
            self.config.node_id,
            self._label,
            lambda: fsm.members.hosts,
            lambda text: endpoint.call(text, forwarded=False),
        )
        self.host_announcer.start()

    def _peers_down(self) -> set[int]:
        """The nodes this node's host cannot reach now (RaftHost's peers_down)."""
        return set(self.host.peers_down()) if self.host is not None else set()

    def _placement_hosts(self) -> dict[int, str | None]:
        """The nodes new topics and partitions may be placed on: the voters but those
        being drained (sink/members/drain.py)."""
        assert self.fsm is not None
        draining = self.fsm.members.draining
        return {n: h for n, h in self._voter_hosts().items() if n not in draining}
