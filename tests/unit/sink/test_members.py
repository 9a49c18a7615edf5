"""sink.members: the "M" command and table, the operator's validation and steps (over a
fake Raft node: only the membership bookkeeping the operator reads and calls), the read
API request parsing and the CLI's request building. The real-process behaviour is in
tests/integration/test_members_processes.py."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from raftlog.entry import EntryType, LogEntry
from raftlog.runtime import BusyError
from sink.cli_members import build_request, format_list
from sink.members.operator import (
    ALREADY_MEMBER,
    BUSY,
    INVALID,
    LAST_VOTER,
    NOT_LEADER,
    OUTCOME_UNKNOWN,
    TIMEOUT,
    UNKNOWN_NODE,
    CatchUp,
    MembershipError,
    MembershipOperator,
)
from sink.members.rpc import parse_request
from sink.state import SinkStateMachine
from sink.state.members import (
    MemberAddress,
    MemberTable,
    decode_member_command,
    encode_forget_member,
    encode_host_member,
    encode_set_member,
)

A4 = MemberAddress("h4:1", "h4:2", "h4:3")


def test_member_command_round_trip_and_table():
    data = encode_set_member(4, A4)
    assert decode_member_command(data) == ("set", 4, A4)
    t = MemberTable()
    assert t.apply(data) == 4 and t.get(4) == A4 and t.version == 1
    t.apply(encode_forget_member(4))
    assert t.get(4) is None and t.version == 2
    t.apply(data)
    again = MemberTable.from_json(json.loads(json.dumps(t.to_json())))
    assert again.addresses == {4: A4}


def test_host_labels_are_registered_replaced_forgotten_and_snapshotted():
    t = MemberTable()
    t.apply(encode_host_member(2, "h1"))
    t.apply(encode_host_member(3, ""))  # registered without a label: its own host
    assert t.hosts == {2: "h1", 3: ""}
    t.apply(encode_host_member(2, "rack-b"))  # restarted with another node.host
    assert t.hosts == {2: "rack-b", 3: ""}
    t.apply(encode_forget_member(3))
    assert t.hosts == {2: "rack-b"}
    fsm = SinkStateMachine()
    fsm.on_apply([LogEntry(1, 1, EntryType.DATA, encode_host_member(5, "h2"))])
    restored = SinkStateMachine()
    restored.on_snapshot_load(fsm.on_snapshot_save())
    assert restored.members.hosts == {5: "h2"}


@pytest.mark.parametrize("label", ["a b", "h1,h2", "r=1", "a/b", "x" * 256, "\x00", 7, None])
def test_bad_host_labels_are_refused(label):
    body = json.dumps({"op": "host", "id": 2, "host": label}).encode()
    with pytest.raises(ValueError, match="host label"):
        decode_member_command(b"M" + body)
    if isinstance(label, str):
        with pytest.raises(ValueError, match="host label"):
            encode_host_member(2, label)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"M{", "not JSON"),
        (b"M[]", "JSON object"),
        (b'M{"op":"set","id":0}', "bad node id"),
        (b'M{"op":"set","id":true}', "bad node id"),
        (b'M{"op":"zap","id":3}', "unknown op"),
        (b'M{"op":"set","id":3,"raft":"h:1","kafka":"h","read_api":"h:3"}', "kafka"),
        (b'M{"op":"set","id":3,"raft":"h:99999","kafka":"h:2","read_api":"h:3"}', "raft"),
    ],
)
def test_bad_member_commands_are_refused_with_the_reason(data, says):
    with pytest.raises(ValueError, match=says):
        decode_member_command(data)


def test_encode_refuses_bad_input():
    with pytest.raises(ValueError, match="node id"):
        encode_set_member(0, A4)
    with pytest.raises(ValueError, match="read_api"):
        encode_set_member(4, MemberAddress("h:1", "h:2", "nope"))


def test_state_machine_applies_members_skips_garbage_and_snapshots_them():
    fsm = SinkStateMachine()
    out = fsm.on_apply(
        [
            LogEntry(1, 1, EntryType.DATA, encode_set_member(4, A4)),
            LogEntry(2, 1, EntryType.DATA, b"M{broken"),
        ]
    )
    assert out == [4, None] and fsm.applied_index == 2
    restored = SinkStateMachine()
    restored.on_snapshot_load(fsm.on_snapshot_save())
    assert restored.members.get(4) == A4
    # A snapshot written before member addresses existed still loads.
    old = SinkStateMachine()
    old.on_snapshot_load(SinkStateMachine().on_snapshot_save())
    assert old.members.addresses == {}


class FakeNode:
    """The RaftNode surface the operator uses; followers catch up as the test says."""

    def __init__(self, voters=(1, 2, 3), learners=(), me=1, leader=1) -> None:
        self.id = me
        self.leader_id = leader
        self.voters, self.learners = set(voters), set(learners)
        self.commit_index = 100
        self.matches = {v: 100 for v in self.voters | self.learners if v != me}
        self.applied: list[bytes] = []
        self.calls: list[tuple] = []
        self.catch_up_at: dict[int, int] = {}  # node -> match it reaches when added
        self.busy = False
        self.fsm = None

    def membership(self):
        return {"voters": sorted(self.voters), "learners": sorted(self.learners)}

    def is_leader(self) -> bool:
        return self.leader_id == self.id

    def status(self):
        return {
            "term": 3,
            "commit": self.commit_index,
            "durable_index": self.commit_index,
            "followers": {i: {"match": m} for i, m in self.matches.items()},
        }

    async def apply(self, data, timeout=None):
        self.applied.append(data)
        if self.fsm is not None:  # committed and applied at once
            self.fsm.members.apply(data)

    async def add_learner(self, node, address, timeout=None):
        if self.busy:
            raise BusyError("a membership change is still uncommitted")
        self.calls.append(("learner", node, address))
        self.learners.add(node)
        self.matches[node] = self.catch_up_at.get(node, self.commit_index)

    async def add_voter(self, node, address, timeout=None):
        self.calls.append(("voter", node))
        self.learners.discard(node)
        self.voters.add(node)

    async def remove_node(self, node, timeout=None):
        self.calls.append(("remove", node))
        self.voters.discard(node)
        self.learners.discard(node)
        self.matches.pop(node, None)

    async def transfer_leader(self, target, timeout=None):
        self.calls.append(("transfer", target))
        self.leader_id = target


def operator(node: FakeNode, fsm=None) -> MembershipOperator:
    fsm = fsm or SinkStateMachine()
    node.fsm = fsm
    initial = {i: MemberAddress(f"h{i}:1", f"h{i}:2", f"h{i}:3") for i in (1, 2, 3)}
    return MembershipOperator(node, fsm, initial, CatchUp(poll_s=0.001, round_s=5.0))


def run(coro):
    return asyncio.run(coro)


def code_of(coro) -> str:
    with pytest.raises(MembershipError) as info:
        run(coro)
    return info.value.code


def test_add_writes_the_address_then_learner_then_voter():
    node = FakeNode()
    out = run(operator(node).add(4, A4, 5))
    assert node.applied == [encode_set_member(4, A4)]
    assert node.calls == [("learner", 4, "h4:1"), ("voter", 4)]
    assert out["op"] == "add" and out["node"] == 4


def test_add_of_a_peers_node_without_addresses_writes_no_address():
    node = FakeNode(voters=(1, 2))
    run(operator(node).add(3, None, 5))
    assert node.applied == [] and node.calls == [("learner", 3, "h3:1"), ("voter", 3)]
    assert code_of(operator(FakeNode()).add(9, None, 5)) == INVALID


def test_a_learner_that_does_not_catch_up_stays_a_learner():
    node = FakeNode()
    node.catch_up_at[4] = 10  # never reaches the commit index
    assert code_of(operator(node).add(4, A4, 0.05)) == TIMEOUT
    assert node.membership() == {"voters": [1, 2, 3], "learners": [4]}


def test_refusals_name_the_problem():
    node = FakeNode()
    op = operator(node)
    assert code_of(op.add(2, A4, 5)) == ALREADY_MEMBER
    assert code_of(op.remove(9, 5)) == UNKNOWN_NODE
    assert code_of(op.transfer(9, 5)) == UNKNOWN_NODE
    assert code_of(op.add(0, A4, 5)) == INVALID
    assert code_of(op.add(4, MemberAddress("x", "h:2", "h:3"), 5)) == INVALID
    assert code_of(op.replace(9, 4, A4, 5)) == UNKNOWN_NODE
    assert code_of(op.replace(1, 2, A4, 5)) == ALREADY_MEMBER
    assert code_of(operator(FakeNode(voters=(1,))).remove(1, 5)) == LAST_VOTER
    follower = FakeNode(me=2, leader=1)
    with pytest.raises(MembershipError) as info:
        run(operator(follower).remove(3, 5))
    assert info.value.code == NOT_LEADER and info.value.leader_id == 1
    node.busy = True  # the core still has an uncommitted configuration entry
    assert code_of(operator(node).add(4, A4, 5)) == BUSY
    assert node.calls == []


def test_a_second_change_while_one_is_in_flight_is_refused():
    node = FakeNode()
    node.catch_up_at[4] = 10
    op = operator(node)

    async def two():
        first = asyncio.ensure_future(op.add(4, A4, 0.5))
        await asyncio.sleep(0.05)
        with pytest.raises(MembershipError) as info:
            await op.remove(3, 5)
        assert info.value.code == BUSY and "add 4" in str(info.value)
        with pytest.raises(MembershipError) as info:
            await op.transfer(None, 5)
        assert info.value.code == BUSY
        with pytest.raises(MembershipError):
            await first

    run(two())
    assert ("remove", 3) not in node.calls
    run(op.remove(3, 5))  # free again once the first ended
    assert ("remove", 3) in node.calls


async def two_adds_of_4(op: MembershipOperator, node: FakeNode) -> tuple:
    """An add of node 4 in flight (a learner that has not caught up), and the same add
    again, both running."""
    first = asyncio.ensure_future(op.add(4, A4, 5))
    while 4 not in node.learners:
        await asyncio.sleep(0.001)
    return first, asyncio.ensure_future(op.add(4, A4, 5))


def lagging_learner_4() -> tuple[FakeNode, MembershipOperator]:
    node = FakeNode()
    node.catch_up_at[4] = 10  # behind until the test lets it catch up
    return node, operator(node)


def test_the_same_change_again_joins_the_one_in_flight():
    """The CLI moves on to another node when the one forwarding its call dies, and an
    operator re-runs a command: the same change in flight is joined, not refused."""
    node, op = lagging_learner_4()

    async def joined():
        first, again = await two_adds_of_4(op, node)
        other = MemberAddress("h9:1", "h9:2", "h9:3")
        with pytest.raises(MembershipError) as info:  # same node, other addresses
            await op.add(4, other, 5)
        assert info.value.code == BUSY
        with pytest.raises(MembershipError) as info:  # a joiner's own deadline
            await op.add(4, A4, 0.01)
        assert info.value.code == TIMEOUT and "goes on" in str(info.value)
        node.matches[4] = node.commit_index
        return await first, await again

    first, again = run(joined())
    assert first == again and first["node"] == 4
    assert node.calls == [("learner", 4, "h4:1"), ("voter", 4)]  # one change, not two

    node, op = lagging_learner_4()

    async def first_caller_gone():
        first, again = await two_adds_of_4(op, node)
        await asyncio.sleep(0.01)
        first.cancel()  # its client went away: the change stops
        with pytest.raises(MembershipError) as info:
            await again
        assert info.value.code == OUTCOME_UNKNOWN and "run the command again" in str(info.value)
        node.matches[4] = node.commit_index
        return await op.add(4, A4, 5)  # the re-run resumes: 4 is a learner already

    out = run(first_caller_gone())
    assert out["node"] == 4 and node.membership()["voters"] == [1, 2, 3, 4]


def test_removing_the_leader_hands_over_first_and_says_where():
    node = FakeNode()
    node.matches = {2: 90, 3: 100}
    with pytest.raises(MembershipError) as info:
        run(operator(node).remove(1, 5))
    assert info.value.code == NOT_LEADER and info.value.leader_id == 3
    assert node.calls == [("transfer", 3)]


def test_transfer_goes_to_the_most_caught_up_voter_never_a_learner():
    node = FakeNode(learners=(4,))
    node.matches = {2: 99, 3: 97, 4: 100}
    out = run(operator(node).transfer(None, 5))
    assert out["node"] == 2 and node.calls == [("transfer", 2)]
    node = FakeNode(learners=(4,))
    assert code_of(operator(node).transfer(4, 5)) == UNKNOWN_NODE


def test_replace_removes_the_old_node_before_adding_the_new():
    node = FakeNode()
    out = run(operator(node).replace(3, 4, A4, 5))
    assert node.calls == [("remove", 3), ("learner", 4, "h4:1"), ("voter", 4)]
    # The new node's address is written first: a re-run after a leader change resumes.
    assert node.applied == [encode_set_member(4, A4), encode_forget_member(3)]
    assert out["replaced"] == 3 and node.membership()["voters"] == [1, 2, 4]
    same = FakeNode()
    run(operator(same).replace(2, 2, MemberAddress("n:1", "n:2", "n:3"), 5))
    assert same.calls == [("remove", 2), ("learner", 2, "n:1"), ("voter", 2)]


def test_an_interrupted_replace_resumes_when_run_again():
    node = FakeNode()
    op = operator(node)
    node.catch_up_at[4] = 10  # the first attempt's new node never catches up
    assert code_of(op.replace(3, 4, A4, 0.05)) == TIMEOUT
    assert node.membership() == {"voters": [1, 2], "learners": [4]}
    node.matches[4] = node.commit_index  # now it has caught up
    out = run(op.replace(3, 4, A4, 5))
    assert out["replaced"] == 3 and node.membership()["voters"] == [1, 2, 4]
    assert node.calls.count(("remove", 3)) == 1
    # Without a trace of the new node, a gone old node is just unknown.
    assert code_of(operator(FakeNode()).replace(9, 5, A4, 5)) == UNKNOWN_NODE


def test_describe_shows_voters_learners_lag_and_addresses():
    node = FakeNode(learners=(4,))
    fsm = SinkStateMachine()
    fsm.members.apply(encode_set_member(4, A4))
    fsm.members.apply(encode_host_member(4, "rack-b"))
    fsm.members.apply(encode_host_member(2, ""))
    node.matches = {2: 100, 3: 98, 4: 40}
    d = operator(node, fsm).describe()
    assert d["voters"] == [1, 2, 3] and d["learners"] == [4]
    assert d["members"]["4"] == {
        "voter": False,
        "addresses": A4._asdict(),
        "match": 40,
        "lag": 60,
        "host": "rack-b",
    }
    assert d["members"]["3"]["lag"] == 2 and "host" not in d["members"]["3"]
    text = format_list(d)
    assert "learner" in text and "h4:2" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert rows["4"][4] == "rack-b" and rows["2"][4] == "(2)" and rows["3"][4] == "-"


@pytest.mark.parametrize(
    ("req", "says"),
    [
        ("{", "not JSON"),
        ("[1]", "JSON object"),
        ('{"op": "zap"}', "unknown op"),
        ('{"op": "remove"}', "needs a node id"),
        ('{"op": "remove", "node": -1}', "node must be"),
        ('{"op": "add", "node": 4, "new_node": "x"}', "new_node must be"),
        ('{"op": "list", "timeout_s": 0}', "timeout_s"),
    ],
)
def test_bad_requests_are_invalid(req, says):
    with pytest.raises(MembershipError, match=says) as info:
        parse_request(req)
    assert info.value.code == INVALID


def _args(**kw) -> argparse.Namespace:
    base = dict(
        action="list", node=None, new_id=None, raft=None, kafka=None, read_api=None, timeout=60.0
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_cli_builds_requests_and_refuses_bad_usage():
    assert build_request(_args(action="transfer-leader")) == {"op": "transfer", "timeout_s": 60.0}
    req = build_request(
        _args(action="replace", node=3, new_id=4, raft="a:1", kafka="a:2", read_api="a:3")
    )
    assert req["op"] == "replace" and req["new_node"] == 4 and req["kafka"] == "a:2"
    assert build_request(_args(action="add", node=3)) == {"op": "add", "node": 3, "timeout_s": 60.0}
    with pytest.raises(ValueError, match="--kafka"):
        build_request(_args(action="add", node=4, raft="a:1", read_api="a:3"))
    with pytest.raises(ValueError, match="needs a node id"):
        build_request(_args(action="remove"))
    with pytest.raises(ValueError, match="--new-id is for replace"):
        build_request(_args(action="add", node=4, new_id=5))


class FakeTransport:
    def __init__(self) -> None:
        self.moves: list[tuple[int, str]] = []

    def add_peer(self, peer, address):
        self.moves.append((peer, address))

    move_peer = add_peer


class FakeListener:
    def __init__(self) -> None:
        self.running = True

    async def stop(self):
        self.running = False

    async def start(self):
        self.running = True


def test_watch_follows_the_live_configuration_and_retires_a_removed_node():
    from sink.members.watch import MemberWatch

    async def scenario():
        node = FakeNode(me=3, leader=1)
        node.transport = FakeTransport()
        node.peers = {1: "h1:1", 2: "h2:1", 3: "h3:1"}
        fsm = SinkStateMachine()
        initial = {i: MemberAddress(f"h{i}:1", f"h{i}:2", f"h{i}:3") for i in (1, 2, 3)}
        brokers = {i: (f"h{i}", 2) for i in (1, 2, 3)}
        listener = FakeListener()
        watch = MemberWatch(node, fsm, brokers, initial, lambda: [listener], grace_s=0.01)
        assert watch.refresh() and not watch.refresh()  # nothing changed the second time
        fsm.members.apply(encode_set_member(4, A4))
        node.learners.add(4)
        assert watch.refresh()
        assert brokers == {1: ("h1", 2), 2: ("h2", 2), 3: ("h3", 2), 4: ("h4", 2)}
        assert node.transport.moves == [(4, "h4:1")] and node.peers[4] == "h4:1"
        node.voters.discard(3)  # this node was removed
        watch.refresh()
        await watch._bg
        assert watch.retired and not listener.running and 3 not in brokers
        node.voters.add(3)  # and added back
        watch.refresh()
        await watch._bg
        assert not watch.retired and listener.running and 3 in brokers

    run(scenario())
