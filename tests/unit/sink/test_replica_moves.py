"""Replica moves on a node, with fakes: MoveOps (the controller leader's side),
MoveDriver (a group leader's side: one membership step at a time, then MOVE_DONE), the
Members request's move ops, and `raftsink partitions` argument handling."""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from types import SimpleNamespace

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.cli_partitions import build_request
from sink.members.operator import BUSY, INVALID, NOT_LEADER, MembershipError
from sink.members.rpc import parse_request
from sink.node.replica_moves import UNKNOWN_PARTITION, MoveDriver, MoveOps
from sink.state import SinkStateMachine
from sink.state.placement_table import encode_place_topic

T = uuid.UUID(int=0xC3)


class Controller:
    """The controller RaftGroup, applying entries to a real SinkStateMachine."""

    def __init__(self, leader: bool = True) -> None:
        self.fsm = SinkStateMachine()
        self.leader = leader
        self.leader_id = 1 if leader else 2
        self.index = 0

    def is_leader(self) -> bool:
        return self.leader

    async def read_index(self, timeout: float | None = None) -> int:
        return self.index

    async def apply(self, data: bytes, timeout: float | None = None):
        self.index += 1
        res = self.fsm.on_apply([LogEntry(self.index, 1, EntryType.DATA, data)])[0]
        return SimpleNamespace(result=res)


def _ops(leader: bool = True) -> tuple[MoveOps, Controller, list[int]]:
    c = Controller(leader)
    asyncio.run(c.apply(encode_place_topic("t", 1, T, None, [(1, 2, 3)])))
    woken: list[int] = []
    ops = MoveOps(c, c.fsm, lambda: {n: None for n in (1, 2, 3, 4)}, lambda: woken.append(1))
    return ops, c, woken


def test_start_commits_the_target_and_answers_the_plan():
    ops, c, woken = _ops()
    out = asyncio.run(ops.start("t", 0, [4, 2, 3], 5.0))
    assert out["steps"] == ["add_learner 4", "promote 4", "hand_off 4", "remove 1"]
    assert c.fsm.placement.groups[1].target == (4, 2, 3) and woken
    assert ops.pending() == [
        {
            "topic": "t",
            "partition": 0,
            "group": 1,
            "replicas": [1, 2, 3],
            "target": [4, 2, 3],
            "adding": [4],
            "removing": [1],
        }
    ]
    assert asyncio.run(ops.pending_now(5.0)) == ops.pending()
    done = asyncio.run(ops.done(1, [4, 2, 3], 5.0))
    assert done["replicas"] == [4, 2, 3] and ops.pending() == []
    with pytest.raises(MembershipError) as stale:  # a second done is stale
        asyncio.run(ops.done(1, [4, 2, 3], 5.0))
    assert stale.value.code == INVALID


@pytest.mark.parametrize(
    ("topic", "partition", "target", "code", "text"),
    [
        ("t", 0, [9, 2, 3], INVALID, "unknown node"),
        ("t", 0, [2, 2, 3], INVALID, "named twice"),
        ("t", 3, [1, 2, 3], UNKNOWN_PARTITION, "no data group"),
        ("x", 0, [1, 2, 3], UNKNOWN_PARTITION, "no data group"),
    ],
)
def test_start_refuses_bad_moves_and_changes_nothing(topic, partition, target, code, text):
    ops, c, _ = _ops()
    with pytest.raises(MembershipError) as exc:
        asyncio.run(ops.start(topic, partition, target, 5.0))
    assert exc.value.code == code and text in str(exc.value)
    assert c.fsm.placement.groups[1].target == ()


def test_a_follower_of_the_controller_says_who_leads():
    ops, _, _ = _ops(leader=False)
    with pytest.raises(MembershipError) as exc:
        asyncio.run(ops.start("t", 0, [4, 2, 3], 5.0))
    assert exc.value.code == NOT_LEADER and exc.value.leader_id == 2
    with pytest.raises(MembershipError) as exc:  # `moves` is answered by the leader
        asyncio.run(ops.pending_now(5.0))
    assert exc.value.code == NOT_LEADER


def test_a_lost_compare_and_set_is_busy():
    ops, c, _ = _ops()
    real = c.apply

    async def racing(data, timeout=None):  # another move lands first
        await real(b'V{"group":1,"replicas":[1,2,3],"target":[1,2,4]}')
        await real(b'F{"group":1,"target":[1,2,4]}')
        return await real(data)

    c.apply = racing
    with pytest.raises(MembershipError) as exc:
        asyncio.run(ops.start("t", 0, [4, 2, 3], 5.0))
    assert exc.value.code == BUSY


class Group:
    """A data group's leader replica: membership changes apply at once."""

    def __init__(self, voters, leader=1) -> None:
        self.voters, self.learners, self.leader, self.commit = list(voters), [], leader, 50
        self.match: dict[int, int] = {}
        self.calls: list[str] = []

    def is_leader(self) -> bool:
        return self.leader == 1

    def membership(self) -> dict:
        return {"voters": list(self.voters), "learners": list(self.learners)}

    def status(self) -> dict:
        return {
            "commit": self.commit,
            "followers": {n: {"match": m} for n, m in self.match.items()},
        }

    async def add_learner(self, n, addr, timeout=None):
        self.calls.append(f"learner {n} {addr}")
        self.learners.append(n)

    async def add_voter(self, n, addr, timeout=None):
        self.calls.append(f"voter {n}")
        self.learners.remove(n)
        self.voters.append(n)

    async def transfer_leader(self, n, timeout=None):
        self.calls.append(f"transfer {n}")
        self.leader = n

    async def remove_node(self, n, timeout=None):
        self.calls.append(f"remove {n}")
        (self.voters if n in self.voters else self.learners).remove(n)


def test_the_driver_takes_one_step_per_round_and_waits_for_catch_up():
    finished: list[tuple] = []

    async def finish(gid, target):
        finished.append((gid, target))

    async def rounds(g: Group, n: int) -> None:
        driver = MoveDriver(1, lambda n: f"h:{n}", finish)
        for _ in range(n):
            driver.drive(7, g, (4, 2, 3), lambda: None)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    g = Group([1, 2, 3])
    asyncio.run(rounds(g, 3))
    # The learner has not caught up (match 0 < commit 50): no promotion yet.
    assert g.calls == ["learner 4 h:4"] and not finished
    g.match[4] = 50
    asyncio.run(rounds(g, 5))
    # Promoted, then leadership handed over (this leader is leaving): a leader
    # elsewhere takes the rest, so this driver stops here.
    assert g.calls == ["learner 4 h:4", "voter 4", "transfer 4"] and not finished
    g.leader = 1  # as if this node were the new leader with node 1 gone from the target
    g.voters = [4, 2, 3]
    asyncio.run(rounds(g, 3))
    # Done: MOVE_DONE is asked for once; later rounds that still see the target (this
    # node's controller replica applies it after the controller's leader) do not ask
    # again (a repeat would be refused as stale).
    assert finished == [(7, (4, 2, 3))]


def test_the_driver_retries_a_refused_move_done_and_forgets_a_finished_target():
    calls: list[tuple] = []

    async def finish(gid, target):
        calls.append((gid, target))
        if len(calls) == 1:
            raise RuntimeError("move_done refused: the controller moved")

    async def run() -> None:
        driver = MoveDriver(1, lambda n: f"h:{n}", finish)
        g = Group([1, 2, 4])
        for _ in range(4):
            driver.drive(7, g, (1, 2, 4), lambda: None)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert calls == [(7, (1, 2, 4))] * 2 and driver.failed == 1 and driver.finished == 1
        # the group moves again (to a list this node's voters already equal after a
        # move back): the new target is finished anew
        driver.drive(7, g, (1, 2, 3), lambda: None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        g.voters, g.learners = [1, 2, 4], []  # (the step it took, undone)
        driver.drive(7, g, (1, 2, 4), lambda: None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert calls[-1] == (7, (1, 2, 4)) and len(calls) == 3

    asyncio.run(run())


def test_members_request_checks_the_move_fields():
    req = parse_request(json.dumps({"op": "move", "topic": "t", "partition": 0, "replicas": [1]}))
    assert req["op"] == "move"
    for bad in (
        {"op": "move", "partition": 0, "replicas": [1]},
        {"op": "move", "topic": "t", "partition": -1, "replicas": [1]},
        {"op": "move", "topic": "t", "partition": 0, "replicas": []},
        {"op": "move", "topic": "t", "partition": 0, "replicas": [0]},
        {"op": "move_done", "group": 0, "target": [1]},
        {"op": "move_done", "group": 1, "target": [True]},
    ):
        with pytest.raises(MembershipError) as exc:
            parse_request(json.dumps(bad))
        assert exc.value.code == INVALID


def _args(**kw) -> argparse.Namespace:
    base = {"action": "move", "topic": None, "partition": None, "replicas": None, "timeout": 9.0}
    return argparse.Namespace(**{**base, **kw})


def test_cli_builds_the_request_and_refuses_bad_usage():
    req = build_request(_args(topic="t", partition=2, replicas="4, 2,3"))
    assert req == {
        "op": "move",
        "topic": "t",
        "partition": 2,
        "replicas": [4, 2, 3],
        "timeout_s": 9.0,
    }
    assert build_request(_args(action="moves"))["op"] == "moves"
    for kw in ({"topic": "t", "partition": 0}, {"topic": "t", "partition": 0, "replicas": "a,b"}):
        with pytest.raises(ValueError):
            build_request(_args(**kw))


def test_register_host_commits_a_member_label_once_and_refuses_others():
    ops, c, _ = _ops()
    c.membership = lambda: {"voters": {1, 2, 3}, "learners": {4}}  # type: ignore[attr-defined]
    out = asyncio.run(ops.register_host(4, "h2", 5.0))
    assert out == {"op": "host", "node": 4, "host": "h2"}
    assert c.fsm.members.hosts == {4: "h2"}
    index = c.index
    asyncio.run(ops.register_host(4, "h2", 5.0))  # already applied: nothing committed
    assert c.index == index
    with pytest.raises(MembershipError, match="not a member") as err:
        asyncio.run(ops.register_host(9, "h2", 5.0))
    assert err.value.code == INVALID
    follower, _, _ = _ops(leader=False)
    with pytest.raises(MembershipError) as err:
        asyncio.run(follower.register_host(4, "h2", 5.0))
    assert err.value.code == NOT_LEADER
