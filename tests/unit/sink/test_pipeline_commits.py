"""The read API's pipeline Commit with partition groups (sink/node/pipeline_commits.py):
rows split by data group, proposed on the groups this node leads, forwarded once to
the leader of the others, answered when all have, with one error row per partition not
committed. Fakes of the groups, the leaders and the peer's read API (unit test); the
PIPELINE_COMMIT entries are applied by real DataGroupMachines, whose retention floor
then holds back compaction (sink/node/compaction.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import grpc
import pytest

from raftlog.runtime import RaftError
from raftlog.runtime.errors import ProposalTimeoutError
from sink.node.compaction import compaction_limit
from sink.node.pipeline_commits import PipelineCommits, plan_commit
from sink.readapi import read_api_pb2 as pb
from sink.readapi.server import ReadApiService
from sink.readapi.wire import (
    ERR_NOT_LEADER,
    ERR_REQUEST_TIMED_OUT,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
)
from sink.state import commands
from sink.state import data_commands as dcmd
from tests.unit.sink.batches import make_batch
from tests.unit.sink.test_data_group import Group as MachineLog

ME = 1
TID = {"a": uuid.UUID(int=0xA), "b": uuid.UUID(int=0xB)}


class _RaftGroup:
    """A data group's Raft side: leads or not; apply() feeds a real DataGroupMachine."""

    def __init__(self, leads: bool, machine: MachineLog, fail: Exception | None = None) -> None:
        self.leads, self.machine, self.fail = leads, machine, fail
        self.proposed: list[bytes] = []

    def is_leader(self) -> bool:
        return self.leads

    async def apply(self, data: bytes, timeout: float | None = None):
        self.proposed.append(data)
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(result=self.machine.apply(data))


class _Hosted:
    def __init__(self, group: _RaftGroup, topic: str, partition: int, serves: bool = True):
        self.group, self.topic_id, self._serves = group, TID[topic], serves
        self.partition = partition

    def serves(self) -> bool:
        return self._serves


class _Cluster:
    """The partitions: (topic, partition) -> (group id, hosted here or None, leader)."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], tuple[int, _Hosted | None, int]] = {}
        self.machines: dict[int, MachineLog] = {}

    def add(self, topic: str, partition: int, gid: int, leader: int, **kw) -> _Hosted | None:
        hosted = None
        if leader == ME or kw.pop("hosted", False):
            m = self.machines[gid] = MachineLog(parts=[(TID[topic], partition, topic)])
            hosted = _Hosted(_RaftGroup(leader == ME, m, kw.pop("fail", None)), topic, partition)
            hosted._serves = kw.pop("serves", True)
        self.parts[(topic, partition)] = (gid, hosted, leader)
        return hosted

    def lookup(self, topic: str, partition: int):
        got = self.parts.get((topic, partition))
        if got is None:
            return None, None
        return SimpleNamespace(group=got[0]), got[1]

    def leader_of(self, topic: str, partition: int) -> int:
        got = self.parts.get((topic, partition))
        return -1 if got is None else got[2]


class _Peer:
    """Another node's read API: answers forwarded Commits (or fails)."""

    def __init__(self, answer=None, error: Exception | None = None) -> None:
        self.answer, self.error = answer, error
        self.calls: list[tuple[pb.CommitRequest, bool]] = []
        self.closed = 0

    async def commit_request(self, req, forwarded: bool = False, timeout: float = 15.0):
        self.calls.append((req, forwarded))
        if self.error is not None:
            raise self.error
        return self.answer(req) if callable(self.answer) else self.answer

    async def close(self) -> None:
        self.closed += 1


def _commits(cluster: _Cluster, peers: dict[int, _Peer]) -> PipelineCommits:
    by_address = {f"node{n}:1": p for n, p in peers.items()}
    return PipelineCommits(
        cluster,
        cluster.leader_of,
        ME,
        lambda n: f"node{n}:1" if n in peers else None,
        lambda address: by_address[address],
        timeout_s=1.0,
    )


def _errors(reply: pb.CommitReply) -> dict[tuple[str, int], int]:
    return {(e.topic, e.partition): e.error_code for e in reply.errors}


def _rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="gone")


def test_plan_splits_rows_by_group_and_leader():
    c = _Cluster()
    c.add("a", 0, 10, ME)
    c.add("a", 1, 11, ME)
    c.add("a", 2, 12, 2)
    c.add("a", 3, 13, 2, hosted=True)  # a follower here: its leader is node 2
    c.add("b", 0, 14, 3)
    c.add("b", 1, 15, -1)  # no leader known here
    c.add("b", 2, 16, ME, serves=False)  # led here, SERVE not applied yet
    rows = [("a", 0, 5), ("a", 1, 6), ("a", 2, 7), ("a", 3, 8), ("b", 0, 9)]
    rows += [("b", 1, 1), ("b", 2, 2), ("a", 9, 3), ("nope", 0, 4)]
    plan = plan_commit(rows, c.lookup, c.leader_of, ME, forwarded=False)
    assert {g: loc.rows for g, loc in plan.local.items()} == {10: [("a", 0, 5)], 11: [("a", 1, 6)]}
    assert plan.local[10].ids == [(TID["a"], 0, 5)]
    assert plan.remote == {2: [("a", 2, 7), ("a", 3, 8)], 3: [("b", 0, 9)]}
    codes = {(e.topic, e.partition): e.error_code for e in plan.errors}
    assert codes == {
        ("b", 1): ERR_NOT_LEADER,
        ("b", 2): ERR_NOT_LEADER,
        ("a", 9): ERR_UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ERR_UNKNOWN_TOPIC_OR_PARTITION,
    }
    # Every row is in exactly one place.
    placed = [r for loc in plan.local.values() for r in loc.rows]
    placed += [r for rs in plan.remote.values() for r in rs]
    assert len(placed) + len(plan.errors) == len(rows)


def test_a_forwarded_request_is_never_forwarded_again():
    c = _Cluster()
    c.add("a", 0, 10, ME)
    c.add("a", 1, 11, 2)  # this node's view says 2 leads: a stale view somewhere
    plan = plan_commit([("a", 0, 1), ("a", 1, 1)], c.lookup, c.leader_of, ME, forwarded=True)
    assert list(plan.local) == [10] and plan.remote == {}
    (err,) = plan.errors
    assert (err.partition, err.error_code) == (1, ERR_NOT_LEADER)
    assert "after a forward" in err.error and "leader: 2" in err.error


def test_commit_proposes_locally_forwards_the_rest_and_answers_when_all_did():
    c = _Cluster()
    c.add("a", 0, 10, ME)
    c.add("a", 1, 11, ME)
    c.add("a", 2, 12, 2)
    c.add("b", 0, 13, 2)
    c.add("b", 1, 14, 3)
    peer2 = _Peer(lambda req: pb.CommitReply(partitions=len(req.offsets)))
    peer3 = _Peer(
        pb.CommitReply(
            error_code=ERR_REQUEST_TIMED_OUT,
            error="x",
            errors=[pb.PartitionCommitError(topic="b", partition=1, error_code=7, error="t/o")],
        )
    )
    pc = _commits(c, {2: peer2, 3: peer3})
    rows = [("a", 0, 5), ("a", 1, 6), ("a", 2, 7), ("b", 0, 8), ("b", 1, 9), ("z", 0, 1)]
    reply = asyncio.run(pc.commit("spark-1", rows, forwarded=False))
    # Local groups: one PIPELINE_COMMIT each, by topic id, applied by the group's machine.
    for gid, part, offset in ((10, 0, 5), (11, 1, 6)):
        m = c.machines[gid]
        assert m.fsm.data.pipelines == {"spark-1": {(TID["a"].hex, part): offset}}
        (data,) = c.parts[("a", part)][1].group.proposed
        assert dcmd.decode_pipeline_commit(data).offsets == [(TID["a"], part, offset)]
    # One forward per leader, marked forwarded, with exactly that leader's rows.
    ((req2, fwd2),) = peer2.calls
    assert fwd2 and req2.pipeline == "spark-1"
    assert [(o.topic, o.partition, o.offset) for o in req2.offsets] == [("a", 2, 7), ("b", 0, 8)]
    ((req3, fwd3),) = peer3.calls
    assert fwd3 and [(o.topic, o.partition) for o in req3.offsets] == [("b", 1)]
    assert peer2.closed == peer3.closed == 1
    assert reply.partitions == 1 + 1 + 2  # each local group covers 1; node 2 answered 2
    assert _errors(reply) == {("z", 0): ERR_UNKNOWN_TOPIC_OR_PARTITION, ("b", 1): 7}
    assert reply.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION  # the first row's
    assert "2 of 6 partition(s) not committed" in reply.error and "z/0" in reply.error
    assert pc.proposed == 2 and pc.forwarded == 2


def test_all_committed_is_error_code_zero():
    c = _Cluster()
    c.add("a", 0, 10, ME)
    reply = asyncio.run(_commits(c, {}).commit("p", [("a", 0, 3)], forwarded=False))
    assert (reply.error_code, reply.error, list(reply.errors), reply.partitions) == (0, "", [], 1)


@pytest.mark.parametrize(
    ("fail", "code"),
    [
        (ProposalTimeoutError("no commit within 1 s"), ERR_REQUEST_TIMED_OUT),
        (TimeoutError(), ERR_REQUEST_TIMED_OUT),
        (RaftError("leader changed"), ERR_NOT_LEADER),
    ],
)
def test_a_failed_proposal_fails_only_its_groups_rows(fail, code):
    c = _Cluster()
    c.add("a", 0, 10, ME, fail=fail)
    c.add("a", 1, 11, ME)
    reply = asyncio.run(_commits(c, {}).commit("p", [("a", 0, 3), ("a", 1, 4)], forwarded=False))
    assert _errors(reply) == {("a", 0): code}
    assert reply.error_code == code and reply.partitions == 1
    assert c.machines[11].fsm.data.pipelines == {"p": {(TID["a"].hex, 1): 4}}


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (grpc.StatusCode.UNAVAILABLE, ERR_NOT_LEADER),
        (grpc.StatusCode.DEADLINE_EXCEEDED, ERR_REQUEST_TIMED_OUT),
    ],
)
def test_an_unreachable_leader_fails_every_row_forwarded_to_it(status, code):
    c = _Cluster()
    c.add("a", 0, 10, 2)
    c.add("a", 1, 11, 2)
    peer = _Peer(error=_rpc_error(status))
    reply = asyncio.run(_commits(c, {2: peer}).commit("p", [("a", 0, 1), ("a", 1, 1)], False))
    assert _errors(reply) == {("a", 0): code, ("a", 1): code}
    assert all("leader 2 unreachable" in e.error for e in reply.errors)
    assert peer.closed == 1


def test_a_whole_request_refusal_from_the_leader_names_every_row():
    c = _Cluster()
    c.add("a", 0, 10, 2)
    c.add("a", 1, 11, 4)  # node 4: no read-API address known
    peer = _Peer(pb.CommitReply(error_code=ERR_NOT_LEADER, error="no leader reachable"))
    reply = asyncio.run(_commits(c, {2: peer}).commit("p", [("a", 0, 1), ("a", 1, 1)], False))
    assert _errors(reply) == {("a", 0): ERR_NOT_LEADER, ("a", 1): ERR_NOT_LEADER}
    texts = {e.partition: e.error for e in reply.errors}
    assert "leader 2: no leader reachable" in texts[0] and "read-API address" in texts[1]


class _Ctx:
    def __init__(self, forwarded: bool) -> None:
        self.md = (("raftsink-forwarded", "1"),) if forwarded else ()

    def invocation_metadata(self):
        return self.md


@pytest.mark.parametrize("forwarded", [False, True])
def test_read_api_commit_goes_to_the_data_groups_with_the_forwarded_mark(forwarded):
    seen = []

    class _Commits:
        async def commit(self, pipeline, rows, fwd):
            seen.append((pipeline, rows, fwd))
            return pb.CommitReply(partitions=len(rows))

    class _Node:  # the controller: must not be proposed to
        async def apply(self, data):
            raise AssertionError("proposed to the controller")

    svc = ReadApiService(_Node(), None, pipeline_commits=_Commits())
    req = pb.CommitRequest(
        pipeline="p", offsets=[pb.PartitionOffset(topic="a", partition=0, offset=4)]
    )
    reply = asyncio.run(svc.commit(req, _Ctx(forwarded)))
    assert reply.partitions == 1 and seen == [("p", [("a", 0, 4)], forwarded)]


def test_read_api_commit_with_one_group_proposes_the_named_commit_as_before():
    class _Node:
        def __init__(self) -> None:
            self.data: list[bytes] = []

        def is_leader(self) -> bool:
            return True

        async def apply(self, data):
            self.data.append(data)
            return SimpleNamespace(result=1)

    node = _Node()
    svc = ReadApiService(node, None)
    req = pb.CommitRequest(
        pipeline="p", offsets=[pb.PartitionOffset(topic="a", partition=0, offset=4)]
    )
    reply = asyncio.run(svc.commit(req, _Ctx(False)))
    assert reply.partitions == 1 and reply.error_code == 0
    assert node.data == [commands.encode_commit_offsets("p", [("a", 0, 4)])]


def test_the_data_groups_pipeline_offsets_hold_its_compaction():
    """After a commit lands in the data group, its machine's retention floor stops the
    entry cap (retention.max_entries) at the first batch the pipeline has not read; the
    hard cap still wins."""
    m = MachineLog(parts=[(TID["a"], 0, "a")])  # entry 1: SERVE
    for i in range(10):  # entries 2..11, offsets 0..9
        m.produce(make_batch([b"r%d" % i]), topic=TID["a"])
    applied = len(m.entries)
    assert m.fsm.retention_floor_index() is None  # no pipeline: nothing held
    assert compaction_limit(applied, 0, m.fsm.retention_floor_index(), 2, 0) == applied - 2
    assert m.apply(dcmd.encode_pipeline_commit("p", [(TID["a"], 0, 4)])) == 1
    floor = m.fsm.retention_floor_index()
    assert floor == 5  # offset 4 is entry 6: everything before it may go
    assert compaction_limit(len(m.entries), 0, floor, 2, 0) == floor
    assert compaction_limit(len(m.entries), 0, floor, 2, 3) == len(m.entries) - 3
    assert compaction_limit(len(m.entries), 7, floor, 0, 0) == 7  # retention's own limit
