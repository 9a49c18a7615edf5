"""Replica moves: an operator moves one partition's data group to another replica list
(`raftsink partitions move`, the read API's Members call with op "move").

Three parties, and what each one owns:

- the controller's leader (MoveOps.start) validates the new list against the cluster
  (sink.placement.move_replicas: known and live new nodes, one replica per host) and
  commits MOVE_REPLICAS, which sets the group's `target` (sink/state/placement_table.py);
- every node hosting or joining the group (sink/node/data_groups.py) hosts it while it
  is in the placement's `members` (replicas, then the target's new nodes); a new node
  starts its replica *joining*: an empty log and no configuration of its own, so it
  never campaigns and learns the group's configuration from the leader;
- the group's leader (MoveDriver) converges its Raft configuration on the target one
  single-server change at a time (sink.placement.next_step: learners first, promoted
  once caught up, a hand-off if the leader itself is being removed, then the removals),
  and once its voters are exactly the target it asks the controller's leader to commit
  MOVE_DONE (replicas := target). Only then does a removed node delete its replica: its
  leader stopped replicating to it when it left the configuration, so it would never
  learn that from its own log.

Every step reads the state as it is, so a new leader (of the group or the controller),
a restart, or a new target resumes the move where it stands; a step that fails is
retried at the next reconcile round.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sink.kafka.protocol.errors import ErrorCode
from sink.members.operator import BUSY, INVALID, NOT_LEADER, TIMEOUT, MembershipError
from sink.placement import (
    ADD_LEARNER,
    HAND_OFF,
    PROMOTE,
    REMOVE,
    WAIT,
    PlacementError,
    Topology,
    move_replicas,
    next_step,
    plan_rebalance,
)
from sink.state.members import encode_host_member
from sink.state.placement_table import GroupPlacement, encode_move, encode_move_done

log = logging.getLogger("sink.moves")

UNKNOWN_PARTITION = "unknown_partition"


class MoveOps:
    """The controller leader's side: start a move, end one."""

    def __init__(
        self,
        controller: Any,
        fsm: Any,
        hosts: Callable[[], dict[int, str | None]],
        wake: Callable[[], None],
    ) -> None:
        """controller: the controller's RaftGroup; fsm: its SinkStateMachine; hosts: the
        nodes placement may use and their host labels; wake: reconcile now."""
        self.controller = controller
        self.fsm = fsm
        self.hosts = hosts
        self.wake = wake

    def _require_leader(self) -> None:
        if not self.controller.is_leader():
            leader = self.controller.leader_id
            raise MembershipError(NOT_LEADER, "not the controller's leader", leader)

    def _group(self, topic: str, partition: int) -> GroupPlacement:
        info = self.fsm.topic(topic)
        g = None if info is None else self.fsm.placement.group_of(info.topic_id.hex, partition)
        if g is None:
            raise MembershipError(
                UNKNOWN_PARTITION, f"partition {topic}-{partition} has no data group"
            )
        return g

    async def start(
        self, topic: str, partition: int, target: list[int], timeout: float
    ) -> dict[str, Any]:
        """Commit the move of topic-partition's group to `target` (first = preferred)
        -> the plan. The same target again changes nothing; the current list cancels a
        pending move (the leader then converges back on it)."""
        self._require_leader()
        return await self._start(self._group(topic, partition), topic, target, timeout)

    async def start_group(
        self, group: int, target: list[int] | tuple[int, ...], timeout: float
    ) -> dict[str, Any]:
        """start() for a group named by its id (a drain, sink/members/drain.py)."""
        self._require_leader()
        g = self.fsm.placement.groups.get(group)
        if g is None:
            raise MembershipError(UNKNOWN_PARTITION, f"no data group {group}")
        info = self.fsm.topic_by_id(uuid.UUID(hex=g.topic_id))
        return await self._start(g, info.name if info else g.topic_id, list(target), timeout)

    async def rebalance(self, timeout: float) -> dict[str, Any]:
        """Start the moves that even out replica counts over the nodes placement may
        use (sink.placement.plan_rebalance: after `members add`, onto the new node)."""
        self._require_leader()
        topology = self.topology()
        started = []
        for mv in plan_rebalance(topology, self.fsm.placement):
            try:
                started.append(await self.start_group(mv.group, mv.target, timeout))
            except MembershipError as exc:
                if exc.code == NOT_LEADER:
                    raise
                log.info("sink.moves rebalance: group %d not moved: %s", mv.group, exc)
        return {"op": "rebalance", "moves": started}

    def topology(self) -> Topology:
        """The controller's voters; nodes being drained are not live: they may keep
        the replicas they have but get no new one."""
        hosts = self.hosts()
        draining = self.fsm.members.draining
        return Topology(hosts, frozenset(n for n in hosts if n not in draining))

    async def _start(
        self, g: GroupPlacement, topic: str, target: list[int], timeout: float
    ) -> dict[str, Any]:
        draining = sorted(
            n for n in target if n in self.fsm.members.draining and n not in g.members
        )
        if draining:
            raise MembershipError(
                INVALID, f"node(s) {draining} are being drained: they get no new replicas"
            )
        try:
            plan = move_replicas(self.topology(), g.replicas, target)
        except PlacementError as exc:
            err = MembershipError(INVALID, str(exc))
            err.kafka_code = exc.code  # type: ignore[attr-defined]
            raise err from None
        # The entry is a compare-and-set on g.replicas: two racing starts cannot both apply.
        data = encode_move(g.group, g.replicas, plan.target)
        refused = await self.commit(data, timeout)
        if refused:
            raise MembershipError(BUSY, f"the placement changed meanwhile: {refused}")
        self.wake()
        return {
            "op": "move",
            "topic": topic,
            "partition": g.partition,
            "group": g.group,
            "replicas": list(g.replicas),
            "target": list(plan.target),
            "steps": [f"{s.action} {s.node}" for s in plan.steps],
        }

    async def done(self, group: int, target: list[int], timeout: float) -> dict[str, Any]:
        """Commit MOVE_DONE for group (asked by its leader once its voters are target)."""
        self._require_leader()
        refused = await self.commit(encode_move_done(group, target), timeout)
        if refused:
            raise MembershipError(INVALID, refused)
        self.wake()
        return {"op": "move_done", "group": group, "replicas": list(target)}

    async def reassign(
        self, topic: str, partition: int, replicas: list[int] | None, timeout_s: float
    ) -> tuple[ErrorCode, str | None]:
        """AlterPartitionReassignments for one partition -> (error, message), as Kafka's
        controller answers: NOT_CONTROLLER off the controller's leader,
        NO_REASSIGNMENT_IN_PROGRESS for a cancel (replicas None) with nothing pending,
        INVALID_REPLICA_ASSIGNMENT / INVALID_REPLICATION_FACTOR for a bad list."""
        try:
            if replicas is None:
                self._require_leader()
                g = self._group(topic, partition)
                if not g.target:
                    return ErrorCode.no_reassignment_in_progress, None
                replicas = list(g.replicas)  # back where it was: the leader converges
            await self.start(topic, partition, replicas, timeout_s)
        except MembershipError as exc:
            code = {
                NOT_LEADER: ErrorCode.not_controller,
                UNKNOWN_PARTITION: ErrorCode.unknown_topic_or_partition,
                BUSY: ErrorCode.request_timed_out,
                TIMEOUT: ErrorCode.request_timed_out,
            }.get(exc.code, getattr(exc, "kafka_code", ErrorCode.invalid_replica_assignment))
            return code, str(exc)
        return ErrorCode.none, None

    async def pending_now(self, timeout: float) -> list[dict[str, Any]]:
        """The moves not finished, linearizably: on the controller's leader after a
        ReadIndex (so a move committed or finished before the call is seen; another
        node's applied placement may lag), NOT_LEADER elsewhere."""
        self._require_leader()
        try:
            await self.controller.read_index(timeout=min(timeout, 10.0))
        except Exception as exc:
            leader = getattr(exc, "leader_id", 0) or self.controller.leader_id
            raise MembershipError(NOT_LEADER, f"no read index: {exc!r}", leader) from None
        return self.pending()

    def pending(self) -> list[dict[str, Any]]:
        """The moves not finished yet, from this node's applied placement."""
        out = []
        for g in sorted(self.fsm.placement, key=lambda g: g.group):
            if g.target:
                info = self.fsm.topic_by_id(uuid.UUID(hex=g.topic_id))
                out.append(
                    {
                        "topic": info.name if info is not None else g.topic_id,
                        "partition": g.partition,
                        "group": g.group,
                        "replicas": list(g.replicas),
                        "target": list(g.target),
                        "adding": list(g.adding),
                        "removing": list(g.removing),
                    }
                )
        return out

    async def register_host(self, node: int, label: str, timeout: float) -> dict[str, Any]:
        """Commit node's host label (sent by that node: sink/node/host_labels.py); a
        label already applied commits nothing."""
        self._require_leader()
        m = self.controller.membership()
        if node not in m["voters"] and node not in m["learners"]:
            raise MembershipError(INVALID, f"host: node {node} is not a member")
        if self.fsm.members.hosts.get(node) != label:
            await self.commit(encode_host_member(node, label), timeout)  # applies as node id
        return {"op": "host", "node": node, "host": label}

    async def commit(self, data: bytes, timeout: float) -> str | None:
        """Commit one controller entry here (the leader) -> its refusal, if any."""
        try:
            res = await self.controller.apply(data, timeout=timeout)
        except TimeoutError:
            raise MembershipError(TIMEOUT, "the controller did not commit in time") from None
        except Exception as exc:
            leader = getattr(exc, "leader_id", 0) or self.controller.leader_id
            # Not proposed, or leadership moved with the outcome unknown: the entry is a
            # compare-and-set, so running the command again at the leader is safe.
            raise MembershipError(NOT_LEADER, f"not done here: {exc!r}", leader) from None
        return res.result


class CatchUp:
    """When a learner counts as caught up: its match reached the commit index the leader
    had when this round of waiting began, and a round is at most round_s long (under
    load the commit index moves on while the learner catches up)."""

    def __init__(self, round_s: float = 1.0) -> None:
        self.round_s = round_s
        self._since: dict[tuple[int, int], tuple[float, int]] = {}

    def __call__(self, group: Any, gid: int, node: int) -> bool:
        st = group.status()
        match = st.get("followers", {}).get(node, {}).get("match", 0)
        now = time.monotonic()
        t0, commit0 = self._since.setdefault((gid, node), (now, st["commit"]))
        if match >= commit0:
            self._since.pop((gid, node), None)
            return True
        if now - t0 > self.round_s:
            self._since[(gid, node)] = (now, st["commit"])
        return False


class MoveDriver:
    """The group leader's side: one membership step at a time per group."""

    def __init__(
        self,
        node_id: int,
        raft_address: Callable[[int], str | None],
        finish: Callable[[int, tuple[int, ...]], Awaitable[None]],
        step_timeout_s: float = 30.0,
    ) -> None:
        """finish(group, target): have the controller commit MOVE_DONE (raises if not)."""
        self.node_id = node_id
        self.raft_address = raft_address
        self.finish = finish
        self.step_timeout_s = step_timeout_s
        self.caught_up = CatchUp()
        self._busy: set[int] = set()
        # group -> the target whose MOVE_DONE committed: this node's controller replica
        # may still show that target for a moment (it applies after the controller's
        # leader); asking again would only be refused as stale
        self._finished: dict[int, tuple[int, ...]] = {}
        self.steps = 0
        self.finished = 0
        self.failed = 0

    def drive(
        self, gid: int, group: Any, target: tuple[int, ...], wake: Callable[[], None]
    ) -> None:
        """If this node leads group and no step of it is in flight: take the next step."""
        if self._finished.get(gid) not in (None, target):
            del self._finished[gid]  # a new move of the group
        if not target or gid in self._busy or not group.is_leader():
            return
        if self._finished.get(gid) == target:
            return
        m = group.membership()
        step = next_step(
            m["voters"],
            m["learners"],
            target,
            self.node_id,
            lambda n: self.caught_up(group, gid, n),
        )
        if step is not None and step.action == WAIT:
            return
        self._busy.add(gid)
        task = asyncio.ensure_future(self._run(gid, group, target, step))

        def done(f: asyncio.Future) -> None:
            self._busy.discard(gid)
            if f.cancelled():
                return
            if f.exception() is not None:
                self.failed += 1
                log.info("sink.moves group=%d step %s failed: %r", gid, step, f.exception())
            wake()

        task.add_done_callback(done)

    async def _run(self, gid: int, group: Any, target: tuple[int, ...], step: Any) -> None:
        t = self.step_timeout_s
        if step is None:
            await self.finish(gid, target)
            self._finished[gid] = target
            self.finished += 1
            log.info("sink.moves group=%d done: replicas %s", gid, list(target))
            return
        self.steps += 1
        log.info("sink.moves group=%d %s %d", gid, step.action, step.node)
        if step.action == ADD_LEARNER:
            await group.add_learner(step.node, self.raft_address(step.node) or "", timeout=t)
        elif step.action == PROMOTE:
            await group.add_voter(step.node, self.raft_address(step.node) or "", timeout=t)
        elif step.action == HAND_OFF:
            await group.transfer_leader(step.node, timeout=t)
        elif step.action == REMOVE:
            await group.remove_node(step.node, timeout=t)

    def status(self) -> dict[str, int]:
        return {
            "in_flight": len(self._busy),
            "steps": self.steps,
            "finished": self.finished,
            "failed": self.failed,
        }
