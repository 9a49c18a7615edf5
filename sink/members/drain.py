"""Draining a node before it leaves (partition groups): `members remove N` and
`members replace` move every data group off N first, as Redpanda's decommission does.

One call is one *round* on the controller's leader (`Drainer.round`): plan from the
placement as it is (sink.placement.plan_drain), mark N draining (an "M" drain entry,
so placement on any controller leader gives N no new replica from then on), start the
moves the plan names through MoveOps (the same path as `raftsink partitions move`),
and answer the progress. The Members endpoint answers a remove whose drain is not done
with code DRAINING and the progress; the client (sink.cli_members.call) calls again
until it is done or its timeout passes. So nothing waits on the server, a crashed or
timed-out command resumes where it stopped when run again (every round re-reads the
placement: moves already started are waiting, not started twice), and a new
controller leader simply answers the next round.

Invariants:
- the node's controller membership is removed only once no data group has it among
  its members (replicas, a move's target, `leaving`): the MOVE_DONE of its last group
  was applied on the controller's leader, so its groups keep their replication factor;
- a drain that cannot keep a group's replication factor is refused before anything is
  committed (no mark, no move): the operator adds a node first;
- the mark is cleared when the node is forgotten (removed) or by `undrain`;
- "done" is answered only after a barrier entry committed once the node was out of
  placement's view (see round), so no placement read before that lands on it later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sink.members.operator import INVALID, NOT_LEADER, MembershipError
from sink.placement import PlacementError, Topology, plan_drain
from sink.state.members import encode_drain_member

log = logging.getLogger("sink.members")

DRAINING = "draining"
"""The Members reply code of a remove whose drain is under way (call again)."""
CANNOT_DRAIN = "cannot_drain"
"""The drain would lower a group's replication factor (refused: add a node first)."""


class Drainer:
    """The controller leader's side of a drain."""

    def __init__(
        self,
        moves: Any,
        hosts: Callable[[], dict[int, str | None]],
        down: Callable[[], set[int]] = set,
    ) -> None:
        """moves: MoveOps (its controller, fsm and start); hosts: every controller
        voter and its host label (draining ones included); down: the nodes this node
        cannot reach now (no new replica goes there: it could not catch up)."""
        self.moves = moves
        self.hosts = hosts
        self.down = down

    @property
    def fsm(self) -> Any:
        return self.moves.fsm

    def draining(self) -> set[int]:
        return set(self.fsm.members.draining)

    def topology(self, node: int, also: int | None = None) -> Topology:
        """What a drain of node may place on: the voters (and `also`, a node about to
        become one), without node and without any other node being drained."""
        hosts = dict(self.hosts())
        hosts.setdefault(node, None)
        if also is not None:
            hosts.setdefault(also, None)
        out = self.draining() | self.down() | {node}
        return Topology(hosts, frozenset(n for n in hosts if n not in out))

    def _plan(self, node: int) -> Any:
        try:
            return plan_drain(self.topology(node), self.fsm.placement, node)
        except PlacementError as exc:
            raise MembershipError(CANNOT_DRAIN, str(exc)) from None

    def check(self, node: int, also: int | None = None) -> None:
        """CANNOT_DRAIN if node's drain could not keep every replication factor (with
        `also` available too); commits nothing."""
        try:
            plan_drain(self.topology(node, also), self.fsm.placement, node)
        except PlacementError as exc:
            raise MembershipError(CANNOT_DRAIN, str(exc)) from None

    async def round(self, node: int, timeout: float, mark: bool = True) -> dict[str, Any]:
        """One round of node's drain -> its progress ({"done": True} once no group
        has it). mark: commit the drain mark first (a remove; a replace's old node is
        no voter any more, so placement cannot choose it anyway)."""
        controller = self.moves.controller
        if not controller.is_leader():
            raise MembershipError(NOT_LEADER, "not the controller's leader", controller.leader_id)
        plan = self._plan(node)
        if plan.done:
            # A barrier before "done": placement reads its nodes, then proposes at
            # once, so a topic placed on node from a read made before node was left
            # out (the mark applied, or for a replace the removal appended) was
            # proposed before this entry, and is applied once it is: plan again.
            if mark and node not in self.draining():
                await self.moves.commit(encode_drain_member(node), timeout)
            await self.moves.commit(encode_drain_member(node, draining=mark), timeout)
            plan = self._plan(node)
            if plan.done:
                return {"node": node, "done": True, "groups_left": 0}
        if mark and node not in self.draining():
            await self.moves.commit(encode_drain_member(node), timeout)
            log.warning("sink.members node %d marked draining", node)
        started = []
        for mv in plan.moves:
            try:
                await self.moves.start_group(mv.group, mv.target, timeout)
            except MembershipError as exc:
                if exc.code == NOT_LEADER:
                    raise
                # A raced placement (another move landed first): the next round
                # plans again from the placement as it is then.
                log.info("sink.members drain of %d: group %d not moved: %s", node, mv.group, exc)
                continue
            started.append(
                {"group": mv.group, "replicas": list(mv.current), "target": list(mv.target)}
            )
        return {
            "node": node,
            "done": False,
            "groups_left": plan.groups_left,
            "started": started,
            "moving": list(plan.waiting),
        }

    async def undrain(self, node: int, timeout: float) -> dict[str, Any]:
        """Clear node's drain mark (placement may use it again); moves already done
        stay done."""
        controller = self.moves.controller
        if not controller.is_leader():
            raise MembershipError(NOT_LEADER, "not the controller's leader", controller.leader_id)
        if node not in self.draining():
            raise MembershipError(INVALID, f"node {node} is not being drained")
        await self.moves.commit(encode_drain_member(node, draining=False), timeout)
        return {"op": "undrain", "node": node}


def progress_error(progress: dict[str, Any]) -> MembershipError:
    """The DRAINING reply for a round that is not done: what is left, for the CLI."""
    return MembershipError(
        DRAINING,
        f"draining node {progress['node']}: {progress['groups_left']} data group(s) still "
        f"to move off it (started now: {len(progress.get('started', []))}, moving: "
        f"{len(progress.get('moving', []))}); call again to continue",
    )
