"""DataGroups: the data groups this node hosts, kept equal to the controller's placement.

With `cluster.partition_groups` on, a node's RaftHost hosts group 0 (the controller,
SinkStateMachine) and one RaftGroup with a DataGroupMachine per data group whose replica
list names this node (sink/state/placement_table.py). This module is the reconciler's
runtime: every `interval_s` (and at once when the placement changes) it

  1. starts the groups placed here that do not run (peers: the group's replicas'
     Raft addresses; storage: the host's groups/<id>/) and removes, deleting their
     data, the groups the controller no longer places here (sink/node/reconcile.py
     decides; ids are never reused);
  2. on each group this node leads, proposes SERVE until its machine hosts the
     partition, then CONFIGS while its topic's overrides differ from the controller's
     (idempotent: a duplicate changes nothing);
  3. starts a new group's replicas with the preferred replica (the placement's
     first) as the RaftGroup's preferred_leader, so its first election runs there
     (the others campaign 3 election timeouts later), and when this node still leads a
     new group (its partition holds no record yet: the preferred replica started
     late, or was down) and is not its preferred replica, hands leadership to it
     (transfer_leader, at most HAND_OFF_ATTEMPTS tries; Kafka's preferred leader at
     creation): striped preferred replicas spread leaders over the nodes. Keeping them spread after failures is the leader
     balancer's (sink.placement.balancer, driven from SinkNode.host), not this;
  4. runs each hosted group's retention (a RetentionWorker per group); the group's
     compaction limit is sink/node/compaction.py's rule over that group's own log: the
     worker's limit, retention.max_entries held at the group's retention floor (its
     pipelines' committed offsets), retention.hard_max_entries.
  5. on each group this node leads whose placement has a move pending, takes the
     move's next membership step (sink/node/replica_moves.py). A node a move adds
     starts its replica joining (no configuration of its own: it never campaigns).

Invariants: at most one RaftGroup per group id (host.start_group refuses a second);
a group is started by one coroutine at a time (_busy); a removed group's data is
deleted only by the rule in reconcile.plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftlog.runtime import NodeOptions, RaftGroup, RaftHost
from sink.node import reconcile
from sink.node.compaction import compaction_limit
from sink.node.replica_moves import MoveDriver
from sink.state import SinkStateMachine
from sink.state.data_group import DataGroupMachine
from sink.state.placement_table import GroupPlacement
from sink.topics.configs import TopicDefaults
from sink.topics.worker import RetentionWorker

log = logging.getLogger("sink.groups")

HAND_OFF_ATTEMPTS = 3
"""Tries to hand a group's first leadership to its preferred replica."""


@dataclass(slots=True)
class HostedGroup:
    """One data group's replica on this node."""

    placement: GroupPlacement
    group: RaftGroup
    fsm: DataGroupMachine
    retention: RetentionWorker
    caught_up: bool = True
    """False for a replica that started empty (a move or re-add onto this node, a wiped
    storage) until it applied a read index taken after its start: replaying from the
    start it applies SERVE long before it has the partition's recent records, and
    serving then would show a high watermark below one this node process answered
    before (chaos, 5 nodes: `hw_backwards` after a wipe and a remove-readd). Like
    Kafka, which lets only in-sync replicas serve reads."""
    catch_up: asyncio.Task | None = None  # sets caught_up (DataGroups._catch_up)
    topic_id: uuid.UUID = field(init=False)

    def __post_init__(self) -> None:
        self.topic_id = uuid.UUID(hex=self.placement.topic_id)

    def serves(self) -> bool:
        """Its machine hosts the partition (SERVE applied) and the replica has caught up
        or leads (a leader's log holds every committed entry: it never waits on the gate,
        so Produce never meets NOT_LEADER at the leader Metadata names)."""
        return (self.caught_up or self.group.is_leader()) and self.fsm.hosts(
            self.topic_id, self.placement.partition
        )


class DataGroups:
    def __init__(
        self,
        host: RaftHost,
        controller: SinkStateMachine,
        *,
        node_id: int,
        raft_address: Callable[[int], str | None],
        options: NodeOptions,
        defaults: TopicDefaults,
        retention_interval_s: float,
        interval_s: float = 1.0,
        propose_timeout_s: float = 10.0,
        max_entries: int = 0,
        hard_max_entries: int = 0,
        moves: MoveDriver | None = None,
    ) -> None:
        """max_entries / hard_max_entries: the retention section's caps, applied to each
        data group's log (sink/node/compaction.py); 0: off. moves: drives replica moves
        on the groups led here (None: moves wait)."""
        self.host = host
        self.controller = controller
        self.node_id = node_id
        self.raft_address = raft_address
        self.options = options
        self.defaults = defaults
        self.retention_interval_s = retention_interval_s
        self.interval_s = interval_s
        self.propose_timeout_s = propose_timeout_s
        self.max_entries = max_entries
        self.hard_max_entries = hard_max_entries
        self.moves = moves
        self.hosted: dict[int, HostedGroup] = {}
        self._hosted_waiters: dict[int, list[asyncio.Future[HostedGroup]]] = {}
        self._proposing: set[int] = set()  # groups with a SERVE/CONFIGS in flight
        # group -> hand-off attempts to its preferred replica (DONE: it succeeded)
        self._handed: dict[int, int] = {}
        self._handing: set[int] = set()  # a hand-off in flight
        self.hand_offs = 0
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._data_event: asyncio.Event | None = None
        self.started_groups = 0
        self.removed_groups = 0
        self.serve_proposals = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"data-groups-{self.node_id}")

    def wake(self) -> None:
        """The placement (or a leadership) changed: reconcile now."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for h in self.hosted.values():
            if h.catch_up is not None:
                h.catch_up.cancel()
            await h.retention.stop()
        # The groups themselves stop with the host (RaftHost.stop).

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:  # a bug here must not stop reconciling for good
                log.exception("sink.groups reconcile failed")

    # ------------------------------------------------------------ reconcile

    async def reconcile(self) -> None:
        """One pass: start/remove groups, then SERVE/CONFIGS where this node leads."""
        table = self.controller.placement
        decided = reconcile.plan(
            self.node_id,
            list(table),
            table.next_group_id,
            self.hosted,
            self.host.group_ids_on_disk(),
        )
        for g in decided.start:
            await self._start_group(g)
        for gid in decided.remove:
            await self._remove_group(gid)
        for gid, h in list(self.hosted.items()):
            h.placement = table.groups.get(gid, h.placement)  # a move changes it
            if gid not in self._proposing and h.group.is_leader():
                self._propose_serve(h)
                self._hand_to_preferred(h)
            if self.moves is not None and h.placement.target:
                self.moves.drive(gid, h.group, h.placement.target, self.wake)

    def _hand_to_preferred(self, h: HostedGroup) -> None:
        """At most HAND_OFF_ATTEMPTS tries per group per process, none after one
        succeeded, and only while the partition holds no record: a one-off placement of
        a new group's first leader, never a balancer (after a failover the partition
        has data, so its new leader does not hand leadership to a dead preferred node:
        a transfer in flight holds up the group's proposals)."""
        gid = h.placement.group
        preferred = h.placement.replicas[0]
        tries = self._handed.get(gid, 0)
        if tries >= HAND_OFF_ATTEMPTS or gid in self._handing or preferred == self.node_id:
            return
        if not h.serves() or h.group.leader_id != self.node_id:
            return
        if h.fsm.high_watermark(h.topic_id, h.placement.partition) > 0:
            return
        self._handed[gid] = tries + 1
        self._handing.add(gid)
        self.hand_offs += 1
        task = asyncio.ensure_future(h.group.transfer_leader(preferred, timeout=5.0))

        def done(f: asyncio.Future) -> None:
            self._handing.discard(gid)
            if f.cancelled() or f.exception() is not None:
                log.info("sink.groups hand-off group=%d to %d failed: %r", gid, preferred, f)
            else:
                self._handed[gid] = HAND_OFF_ATTEMPTS

        task.add_done_callback(done)

    async def open_on_disk(self) -> int:
        """Restart: reopen the groups on disk that the applied placement places here
        (before the Kafka port opens) -> how many were opened."""
        table = self.controller.placement
        opened = 0
        for gid in self.host.group_ids_on_disk():
            g = table.groups.get(gid)
            if g is not None and self.node_id in g.members and gid not in self.hosted:
                await self._start_group(g)
                opened += 1
        return opened

    async def _start_group(self, g: GroupPlacement) -> None:
        peers = {n: self.raft_address(n) or "" for n in g.members}
        fsm = DataGroupMachine(g.group)
        fsm.set_defaults(self.defaults)
        fsm.data.on_notify = self._notify_data
        holder: list[RetentionWorker] = []
        group_box: list[RaftGroup] = []

        def limit() -> int:
            if not holder or not group_box:
                return 0
            return compaction_limit(
                group_box[0].applied,
                holder[0].limit,
                fsm.retention_floor_index() if self.max_entries else None,
                self.max_entries,
                self.hard_max_entries,
            )

        group = RaftGroup(
            self.host,
            g.group,
            peers,
            fsm,
            options=self.options,
            compaction_limit=limit,
            # A move's new replica joins: with an empty log it must not take `peers` as
            # its configuration (it would count itself a voter and could campaign).
            join=self.node_id not in g.replicas,
            # A sealed start (PLACE_TOPIC's incarnations): no founding round, so a
            # group placed while one replica is down still elects.
            incarnations=g.incarnation_map(),
            # A new group's first election runs on its preferred replica (Kafka's
            # preferred leader at creation), so no transfer moves the leader while
            # clients already write: a transfer answers NOT_LEADER_OR_FOLLOWER to
            # requests in flight, and a producer without idempotence that retries
            # them may reorder its records (librdkafka's test 0041 saw it).
            preferred_leader=g.replicas[0],
        )
        group_box.append(group)
        retention = RetentionWorker(fsm, group, self.retention_interval_s)
        holder.append(retention)
        # Served from the group's committed log (attached before any apply).
        fsm.attach_log(group.read_committed, group.first_index)
        fsm.on_leader_change.append(self.wake)
        await self.host.start_group(group)
        retention.start()
        fresh = group.commit_index == 0 and group.applied == 0
        h = HostedGroup(g, group, fsm, retention, caught_up=not fresh)
        self._host(h)
        if fresh:
            h.catch_up = asyncio.create_task(self._catch_up(h), name=f"catch-up-{g.group}")
        self.started_groups += 1
        log.info(
            "sink.groups started group=%d replicas=%s%s",
            g.group,
            list(g.replicas),
            f" joining (move to {list(g.target)})" if self.node_id not in g.replicas else "",
        )

    async def _catch_up(self, h: HostedGroup) -> None:
        """Mark a replica that started empty caught up once it applied a read index
        taken after its start (retried until a leader answers)."""
        gid = h.placement.group
        delay = 0.05
        while self.hosted.get(gid) is h:
            try:
                await h.group.read_index(timeout=5.0)
            except Exception as exc:  # no leader yet, leader changed, timeout
                log.debug("sink.groups catch-up group=%d retry: %r", gid, exc)
                if h.group.fatal_error is not None:
                    return
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            h.catch_up = None  # done: mark_caught_up must not cancel this task
            self.mark_caught_up(h)
            return

    def _host(self, h: HostedGroup) -> None:
        """h's replica runs here from now on: lookups find it, waiters get it."""
        gid = h.placement.group
        self.hosted[gid] = h
        for waiter in self._hosted_waiters.pop(gid, []):
            if not waiter.done():
                waiter.set_result(h)

    async def wait_hosted(self, gid: int, timeout: float) -> HostedGroup | None:
        """The group's replica here once a reconcile pass started it (None: not within
        timeout)."""
        h = self.hosted.get(gid)
        if h is not None:
            return h
        waiter: asyncio.Future[HostedGroup] = asyncio.get_running_loop().create_future()
        self._hosted_waiters.setdefault(gid, []).append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return None
        finally:
            waiters = self._hosted_waiters.get(gid)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._hosted_waiters[gid]

    def mark_caught_up(self, h: HostedGroup) -> None:
        """h's replica applied a read index taken after its start (its catch-up task, or a
        linearizable read that ran one): it serves from now on."""
        if h.caught_up:
            return
        h.caught_up = True
        if h.catch_up is not None:
            h.catch_up.cancel()
            h.catch_up = None
        self._notify_data()
        self.wake()

    async def _remove_group(self, gid: int) -> None:
        h = self.hosted.pop(gid, None)
        if h is not None:
            if h.catch_up is not None:
                h.catch_up.cancel()
            await h.retention.stop()
        await self.host.remove_group(gid, delete=True)
        self.removed_groups += 1
        log.info("sink.groups removed group=%d (deleted its data)", gid)

    def _propose_serve(self, h: HostedGroup) -> None:
        name = self._topic_name(h.placement.topic_id)
        overrides = None if name is None else self.controller.topic_configs.overrides(name)
        data = reconcile.serve_command(
            h.placement, name, overrides, h.fsm, h.fsm.configs.overrides(h.placement.topic_id)
        )
        if data is None:
            return
        gid = h.placement.group
        self._proposing.add(gid)
        self.serve_proposals += 1
        fut = h.group.propose(data, timeout=self.propose_timeout_s)

        def done(f: asyncio.Future) -> None:
            self._proposing.discard(gid)
            if not f.cancelled() and f.exception() is not None:
                log.info("sink.groups serve group=%d failed: %r", gid, f.exception())
            self.wake()  # check again (a config may have changed meanwhile)

        fut.add_done_callback(done)

    def _topic_name(self, topic_id_hex: str) -> str | None:
        info = self.controller.topic_by_id(uuid.UUID(hex=topic_id_hex))
        return None if info is None else info.name

    async def hand_off_all(self, timeout_s: float) -> int:
        """Graceful shutdown: every group led here hands leadership to another voter
        (its preferred replica first) -> how many moved within timeout_s."""

        async def one(h: HostedGroup) -> bool:
            voters = h.group.membership()["voters"]
            others = [n for n in h.placement.replicas if n != self.node_id and n in voters]
            if not others:
                return False
            try:
                await asyncio.wait_for(h.group.transfer_leader(others[0], timeout_s), timeout_s)
            except Exception as exc:  # shutting down anyway: say why
                log.info("sink.groups hand-off group=%d failed: %r", h.placement.group, exc)
                return False
            return True

        led = [h for h in self.hosted.values() if h.group.is_leader()]
        return sum(await asyncio.gather(*(one(h) for h in led)))

    # ------------------------------------------------------------- lookups

    def lookup(self, topic: str, partition: int) -> tuple[GroupPlacement | None, Any]:
        """(the partition's placement or None, its HostedGroup here or None)."""
        info = self.controller.topic(topic)
        if info is None:
            return None, None
        g = self.controller.placement.group_of(info.topic_id.hex, partition)
        if g is None:
            return None, None
        return g, self.hosted.get(g.group)

    def compact_now(self) -> None:
        """The disk guard refuses produce: every hosted group runs retention and
        snapshots at once (they share the node's disk). One group's failure does not
        keep the others from compacting."""
        for gid, h in list(self.hosted.items()):
            try:
                h.retention.compact_now()
            except Exception:
                log.exception("sink.groups compact_now failed group=%d", gid)

    def data_event(self) -> asyncio.Event:
        """Set the next time any hosted group applies new records (Fetch long-poll)."""
        if self._data_event is None:
            self._data_event = asyncio.Event()
        return self._data_event

    def _notify_data(self) -> None:
        ev, self._data_event = self._data_event, None
        if ev is not None:
            ev.set()

    def status(self) -> dict[str, Any]:
        return {
            "hosted": len(self.hosted),
            "leading": sum(1 for h in self.hosted.values() if h.group.is_leader()),
            "started": self.started_groups,
            "removed": self.removed_groups,
            "serve_proposals": self.serve_proposals,
            "hand_offs": self.hand_offs,
            "moves": self.moves.status() if self.moves is not None else None,
            "groups": [self._group_row(h) for _, h in sorted(self.hosted.items())],
        }

    def _group_row(self, h: HostedGroup) -> dict[str, Any]:
        """This node's replica of one data group (`raftsink status` merges the nodes' rows
        into one line per partition)."""
        g, p = h.group, h.placement
        info = self.controller.topic_by_id(h.topic_id)
        return {
            "group": p.group,
            "topic": info.name if info is not None else None,
            "partition": p.partition,
            "replicas": list(p.replicas),
            "target": list(p.target),
            "role": g.role.value,
            "term": g.term,
            "leader": g.leader_id,
            "commit": g.commit_index,
            "applied": g.applied,
            # above commit: entries this replica holds that no quorum has yet (a leader
            # cut off appends what it can never commit; the container tests watch it)
            "last_index": g.queue.last_index(),
            "serving": h.serves(),
            # False while this replica's storage is a replacement not yet admitted (a
            # wiped or repaired group): the chaos campaign waits on it between faults
            "may_vote": g.core.may_vote,
        }
