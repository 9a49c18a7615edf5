"""Draining a node (partition groups): the pure plan (sink.placement.drain) and the
controller leader's rounds (sink.members.drain) over a real SinkStateMachine applying
the entries a fake controller commits: the drain mark, resuming where a drain stands,
refusals, and the Members endpoint's remove answering "draining" until done."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.members.drain import CANNOT_DRAIN, DRAINING, Drainer
from sink.members.operator import INVALID, MembershipError
from sink.members.rpc import MembersEndpoint, parse_request
from sink.node.replica_moves import MoveOps
from sink.placement import PlacementError, Topology, plan_drain
from sink.state import SinkStateMachine
from sink.state.members import MemberTable, encode_drain_member, encode_forget_member
from sink.state.placement_table import GroupPlacement, encode_move_done, encode_place_topic
from tests.unit.sink.fake_controller import FakeController

T = uuid.UUID(int=0xD4)


def G(group: int, replicas, target=(), leaving=()) -> GroupPlacement:
    return GroupPlacement(group, T.hex, group - 1, tuple(replicas), tuple(target), tuple(leaving))


# ------------------------------------------------------------------ the plan


def test_plan_replaces_the_node_keeping_rf_on_the_least_loaded_nodes():
    groups = [G(1, (1, 2, 3)), G(2, (2, 3, 1)), G(3, (3, 1, 2)), G(4, (1, 2, 4))]
    topo = Topology.of([1, 2, 4, 5], live=[1, 2, 4, 5])
    plan = plan_drain(topo, groups, 3)
    assert plan.waiting == () and not plan.done and plan.groups_left == 3
    by_group = {m.group: m for m in plan.moves}
    assert sorted(by_group) == [1, 2, 3]
    for m in plan.moves:
        assert 3 not in m.target and len(m.target) == 3 and len(set(m.target)) == 3
        # The replacement goes last: the next old replica becomes the preferred one.
        assert m.target[:2] == tuple(n for n in m.current if n != 3)
    # Node 5 carries nothing, node 4 one replica: 5 first, then 4 (both end with 2 or 1).
    added = [m.target[-1] for m in plan.moves]
    assert added == [5, 4, 5], added


def test_plan_keeps_one_replica_per_host():
    groups = [G(1, (1, 2, 3))]
    topo = Topology({1: "a", 2: "b", 4: "a", 5: "c"}, frozenset({1, 2, 4, 5}))
    (move,) = plan_drain(topo, groups, 3).moves
    assert move.target == (1, 2, 5)  # 4 shares host a with 1


def test_plan_refuses_to_shrink_a_group_and_says_add_a_node():
    groups = [G(1, (1, 2, 3)), G(2, (2, 3, 1))]
    with pytest.raises(PlacementError) as info:
        plan_drain(Topology.of([1, 2]), groups, 3)
    assert info.value.code == 38
    assert "add a node first" in str(info.value) and "group 1 [1, 2, 3]" in str(info.value)


def test_plan_waits_for_moves_under_way_and_retargets_moves_onto_the_node():
    groups = [
        G(1, (1, 2, 3), target=(1, 2, 4)),  # already moving off 3: wait
        G(2, (1, 2, 4), target=(1, 3, 4)),  # someone's move onto 3: retarget
        G(3, (1, 2, 4), target=(1, 2, 5), leaving=(3,)),  # 3 still hosts it: wait
        G(4, (1, 2, 4)),  # not on 3
    ]
    plan = plan_drain(Topology.of([1, 2, 4, 5]), groups, 3)
    assert plan.waiting == (1, 3)
    (move,) = plan.moves
    assert move.group == 2 and move.current == (1, 2, 4) and 3 not in move.target
    assert move.target[:2] == (1, 4) and move.target[2] in (2, 5)
    assert plan_drain(Topology.of([1, 2, 4, 5]), [groups[3]], 3).done


def test_plan_never_chooses_a_node_outside_the_live_set():
    groups = [G(1, (1, 2, 3))]
    topo = Topology.of([1, 2, 4, 5], live=[1, 2, 5])  # 4 is being drained too
    assert plan_drain(topo, groups, 3).moves[0].target == (1, 2, 5)


# ------------------------------------------------------------------ the mark


def test_the_drain_mark_is_applied_cleared_and_kept_in_snapshots():
    t = MemberTable()
    t.apply(encode_drain_member(3))
    assert t.draining == {3}
    t.apply(encode_drain_member(3, draining=False))
    assert t.draining == set()
    t.apply(encode_drain_member(4))
    t.apply(encode_forget_member(4))  # removed: drained no more
    assert t.draining == set()
    fsm = SinkStateMachine()
    fsm.on_apply([LogEntry(1, 1, EntryType.DATA, encode_drain_member(5))])
    again = SinkStateMachine()
    again.on_snapshot_load(fsm.on_snapshot_save())
    assert again.members.draining == {5}


# ------------------------------------------------------------------ rounds


def _cluster(replicas) -> tuple[Drainer, MoveOps, FakeController]:
    c = FakeController()
    asyncio.run(c.apply(encode_place_topic("t", len(replicas), T, None, replicas)))
    hosts = lambda: {n: None for n in c.voters}  # noqa: E731
    ops = MoveOps(c, c.fsm, hosts, lambda: None)
    return Drainer(ops, hosts), ops, c


def _finish_moves(c: FakeController) -> None:
    """Every group's leader converged on its target: MOVE_DONE each."""
    for g in list(c.fsm.placement):
        if g.target:
            asyncio.run(c.apply(encode_move_done(g.group, g.target)))


def test_rounds_mark_start_wait_and_resume_until_done():
    drainer, ops, c = _cluster([(1, 2, 3), (3, 1, 2), (1, 2, 4)])
    first = asyncio.run(drainer.round(3, 5.0))
    assert not first["done"] and first["groups_left"] == 2 and len(first["started"]) == 2
    assert c.fsm.members.draining == {3}
    targets = {g.group: g.target for g in c.fsm.placement}
    assert all(3 not in t for t in targets.values())
    assert targets[3] == ()  # not on 3: untouched
    # A new round (a re-run, a new CLI) starts nothing new: the moves are under way.
    index = c.index
    again = asyncio.run(drainer.round(3, 5.0))
    assert again["started"] == [] and again["moving"] == [1, 2] and c.index == index
    # While 3 drains, a move onto it is refused; one keeping it is not the drain's.
    with pytest.raises(MembershipError) as info:
        asyncio.run(ops.start("t", 2, [1, 3, 4], 5.0))
    assert info.value.code == INVALID and "drained" in str(info.value)
    _finish_moves(c)
    assert asyncio.run(drainer.round(3, 5.0))["done"]
    assert all(3 not in g.members for g in c.fsm.placement)


def test_a_refused_drain_commits_nothing():
    drainer, _, c = _cluster([(1, 2, 3)])
    c.voters = [1, 2, 3]
    index = c.index
    with pytest.raises(MembershipError) as info:
        asyncio.run(drainer.round(3, 5.0))
    assert info.value.code == CANNOT_DRAIN and "add a node first" in str(info.value)
    assert c.index == index and c.fsm.members.draining == set()


def test_undrain_clears_the_mark():
    drainer, _, c = _cluster([(1, 2, 3)])
    asyncio.run(drainer.round(3, 5.0))
    assert asyncio.run(drainer.undrain(3, 5.0)) == {"op": "undrain", "node": 3}
    assert c.fsm.members.draining == set()
    with pytest.raises(MembershipError):
        asyncio.run(drainer.undrain(3, 5.0))


class Operator:
    """The MembershipOperator's surface the endpoint's remove uses."""

    def __init__(self, c: FakeController) -> None:
        self.node = SimpleNamespace(
            id=1,
            leader_id=1,
            membership=lambda: {"voters": list(c.voters), "learners": []},
        )
        self.c = c
        self.removed: list[int] = []

    def check_removable(self, node: int) -> bool:
        return node in self.c.voters

    def address_of(self, node: int) -> None:
        return None

    async def remove(self, node: int, timeout: float) -> dict:
        self.c.voters.remove(node)
        self.removed.append(node)
        return {"op": "remove", "node": node}


def test_remove_answers_draining_until_the_groups_moved_then_removes():
    drainer, ops, c = _cluster([(1, 2, 3), (2, 3, 4)])
    op = Operator(c)
    endpoint = MembersEndpoint(op, lambda n: None, moves=ops, drainer=drainer)  # type: ignore[arg-type]
    req = json.dumps({"op": "remove", "node": 3, "timeout_s": 5})
    reply = asyncio.run(endpoint.call(req, forwarded=True))
    assert reply.code == DRAINING and "2 data group(s)" in reply.error, reply
    assert op.removed == []
    reply = asyncio.run(endpoint.call(req, forwarded=True))
    assert reply.code == DRAINING and op.removed == []
    _finish_moves(c)
    reply = asyncio.run(endpoint.call(req, forwarded=True))
    assert not reply.code and json.loads(reply.json) == {"op": "remove", "node": 3}
    assert op.removed == [3]


def test_members_request_takes_undrain():
    assert parse_request('{"op": "undrain", "node": 3}')["node"] == 3
    with pytest.raises(MembershipError):
        parse_request('{"op": "undrain"}')


def test_a_move_onto_a_node_that_went_down_is_moved_again():
    groups = [G(1, (1, 2, 3), target=(1, 2, 4))]  # 4 was to take 3's place; 4 is down
    plan = plan_drain(Topology.of([1, 2, 4, 5], live=[1, 2, 5]), groups, 3)
    assert plan.waiting == () and plan.moves[0].target == (1, 2, 5)
    # With 4 up again the same move is simply waited for.
    assert plan_drain(Topology.of([1, 2, 4, 5]), groups, 3).waiting == (1,)
    # A dead node already among the replicas stays (the group's own business).
    (move,) = plan_drain(Topology.of([1, 2, 4], live=[1, 4]), [G(2, (2, 3, 1))], 3).moves
    assert move.target == (2, 1, 4)


def test_cli_builds_undrain():
    import argparse

    from sink.cli_members import build_request

    args = argparse.Namespace(
        action="undrain", node=3, timeout=60.0, new_id=None, raft=None, kafka=None, read_api=None
    )
    assert build_request(args) == {"op": "undrain", "node": 3, "timeout_s": 60.0}
    args.node = None
    with pytest.raises(ValueError, match="needs a node id"):
        build_request(args)


def test_call_repeats_a_draining_remove_and_reports_progress(monkeypatch):
    from sink import cli_members

    replies = [({}, DRAINING, "draining node 3: 2 left; call again")] * 2 + [
        ({"op": "remove", "node": 3}, "", "")
    ]
    calls: list[dict] = []

    async def fake(nodes, req, timeout):
        calls.append(req)
        return replies[len(calls) - 1]

    monkeypatch.setattr(cli_members, "_call_leader", fake)
    monkeypatch.setattr(cli_members, "DRAIN_POLL_S", 0.0)
    said: list[str] = []
    out = asyncio.run(cli_members.call(["x"], {"op": "remove", "node": 3}, 60.0, said.append))
    assert out == ({"op": "remove", "node": 3}, "", "") and len(calls) == 3
    assert said == ["draining node 3: 2 left"] * 2
    # Past the timeout: a timeout that says how to continue.
    calls.clear()
    replies[2] = replies[0]
    out = asyncio.run(cli_members.call(["x"], {"op": "remove", "node": 3}, 0.0))
    assert out[1] == "timeout" and "run the command again" in out[2], out


def test_done_only_after_a_barrier_that_applies_placements_read_before_the_mark():
    drainer, _, c = _cluster([(1, 2, 4)])  # nothing on 3
    # A CreateTopics that read the nodes before 3 was marked: proposed, not applied yet.
    late = encode_place_topic("late", 1, uuid.UUID(int=0xE5), None, [(3, 1, 2)])
    real_apply = c.apply
    pending = [late]

    async def apply(data: bytes, timeout: float | None = None):
        while pending:  # earlier log entries apply first
            await real_apply(pending.pop(0))
        return await real_apply(data)

    c.apply = apply  # type: ignore[method-assign]
    out = asyncio.run(drainer.round(3, 5.0))
    assert not out["done"] and out["groups_left"] == 1 and len(out["started"]) == 1
    _finish_moves(c)
    index = c.index
    assert asyncio.run(drainer.round(3, 5.0))["done"]
    assert c.index == index + 1  # marked already: one barrier entry
    # A replace's old node (no voter any more) is not marked: its barrier is an undrain.
    drainer, _, c = _cluster([(1, 2, 4)])
    assert asyncio.run(drainer.round(3, 5.0, mark=False))["done"]
    assert c.fsm.members.draining == set()


# ------------------------------------------------------------------ rebalance


def test_rebalance_moves_replicas_onto_a_new_node_until_even():
    from sink.placement import plan_rebalance

    groups = [G(1, (1, 2, 3)), G(2, (2, 3, 1)), G(3, (3, 1, 2)), G(4, (1, 2, 3))]
    moves = plan_rebalance(Topology.of([1, 2, 3, 4]), groups)
    assert len(moves) == 3 and all(m.target[-1] == 4 for m in moves), moves
    load = {n: 0 for n in (1, 2, 3, 4)}
    final = {g.group: g.replicas for g in groups} | {m.group: m.target for m in moves}
    for nodes in final.values():
        assert len(set(nodes)) == 3
        for n in nodes:
            load[n] += 1
    assert load == {1: 3, 2: 3, 3: 3, 4: 3}, load
    # Balanced: nothing to do; a group already moving is left alone.
    assert plan_rebalance(Topology.of([1, 2, 3]), groups) == []
    moving = [G(1, (1, 2, 3), target=(1, 2, 4)), *groups[1:]]
    assert all(m.group != 1 for m in plan_rebalance(Topology.of([1, 2, 3, 4]), moving))


def test_rebalance_keeps_one_replica_per_host():
    from sink.placement import plan_rebalance

    groups = [G(1, (1, 2)), G(2, (1, 2))]
    topo = Topology({1: "a", 2: "b", 3: "a"}, frozenset({1, 2, 3}))
    (move,) = plan_rebalance(topo, groups)  # 3 may take 1's place only (host a)
    assert move.current == (1, 2) and move.target == (2, 3)


def test_rebalance_through_move_ops():
    _, ops, _ = _cluster([(1, 2, 3), (2, 3, 1), (3, 1, 2)])
    out = asyncio.run(ops.rebalance(5.0))
    assert out["op"] == "rebalance" and len(out["moves"]) == 2
    assert all(m["target"][-1] == 4 for m in out["moves"])
    assert asyncio.run(ops.rebalance(5.0))["moves"] == []  # those are moving: left alone
    assert parse_request('{"op": "rebalance"}')["op"] == "rebalance"
