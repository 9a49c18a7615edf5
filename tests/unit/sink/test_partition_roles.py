"""Handlers answer each partition from its own group's role (PartitionRoles), not from
one cluster-wide leadership: a node among several partition groups.

The node under test is node 1 of brokers 1-3, leader of the controller group (group 0)
and of topic "t" partition 0; a fake roles table (this test only) gives the other
partitions other groups: partition 1 led by node 2 at epoch 9 with node 3 offline,
partition 2 leaderless, partition 3 hosted nowhere on node 1.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from raftlog.runtime import RaftGroup
from sink.kafka.handlers.services import PartitionRole
from sink.kafka.protocol.errors import ErrorCode
from sink.readapi.server import ReadApiService
from sink.service import SinkService
from sink.state import commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import request_values
from tests.unit.sink.test_handlers import call

BROKERS = {1: ("h", 9091), 2: ("h", 9092), 3: ("h", 9093)}
TERM = 5  # group 0's term (node 1 leads it)


def _role(**kw) -> PartitionRole:
    base = dict(
        group=0,
        leader=1,
        hint=1,
        leader_epoch=TERM,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        offline=(),
        leads=True,
        ready=True,
        hosted=True,
        caught_up=True,
    )
    return PartitionRole(**(base | kw))


FOLLOWER = dict(leads=False, ready=False)
ROLES = {
    # led here, in its own group with its own term; node 3 behind (not in the ISR)
    0: _role(group=10, leader_epoch=4, isr=(1, 2)),
    # led by node 2; node 3 down; a voter 7 this listener does not advertise
    1: _role(
        group=11,
        leader=2,
        hint=2,
        leader_epoch=9,
        replicas=(2, 3, 1, 7),
        isr=(2, 1),
        offline=(3,),
        **FOLLOWER,
    ),
    # leaderless, no guess
    2: _role(group=12, leader=-1, hint=-1, leader_epoch=3, **FOLLOWER),
    # node 1 hosts no replica of this group
    3: _role(
        group=13,
        leader=3,
        hint=3,
        leader_epoch=2,
        replicas=(2, 3),
        isr=(2, 3),
        hosted=False,
        **FOLLOWER,
    ),
}


def node() -> MemoryNode:
    n = MemoryNode(node_id=1, leader_id=1, brokers=dict(BROKERS), term=TERM)
    n.apply(commands.encode_create_topic("t", 4, uuid.uuid4()))
    for p in range(4):  # every partition has offsets 0..2 in the (shared) applied state
        n.apply(commands.encode_produce("t", p, -1, -1, -1, make_batch([b"a", b"b", b"c"])))
    n.roles = {("t", p): r for p, r in ROLES.items()}
    return n


def test_metadata_reports_each_partition_s_own_leader_epoch_replicas_isr_offline():
    md = call(node(), 3, 12)
    (t,) = md.topics
    got = {
        p.partition_index: (
            int(p.error_code),
            p.leader_id,
            p.leader_epoch,
            list(p.replica_nodes),
            list(p.isr_nodes),
            list(p.offline_replicas),
        )
        for p in t.partitions
    }
    assert got == {
        0: (0, 1, 4, [1, 2, 3], [1, 2], []),
        1: (0, 2, 9, [2, 3, 1], [2, 1], [3]),  # node 7 is not advertised: left out
        2: (int(ErrorCode.leader_not_available), -1, 3, [1, 2, 3], [1, 2, 3], []),
        3: (0, 3, 2, [2, 3], [2, 3], []),
    }
    assert md.controller_id == 1  # the answering node (it relays controller requests)


def _produce_all(version: int):
    values = request_values(0) | {
        "topic_data": [
            {
                "name": "t",
                "partition_data": [{"index": p, "records": make_batch([b"x"])} for p in range(4)],
            }
        ]
    }
    r = call(node(), 0, version, values)
    return {p.index: p for p in r.responses[0].partition_responses}, r


def test_produce_to_partitions_led_elsewhere_names_each_partition_s_leader():
    parts, r = _produce_all(10)
    assert (int(parts[0].error_code), parts[0].base_offset) == (0, 3)  # led here: written
    for p in (1, 2, 3):
        assert int(parts[p].error_code) == ErrorCode.not_leader_or_follower
    leaders = {
        p: (parts[p].current_leader.leader_id, parts[p].current_leader.leader_epoch)
        for p in (1, 2, 3)
    }
    # Each partition's own leader and epoch; the leaderless one says nothing.
    assert leaders == {1: (2, 9), 2: (-1, -1), 3: (3, 2)}
    assert sorted((e.node_id, e.port) for e in r.node_endpoints) == [(2, 9092), (3, 9093)]


def test_produce_before_v10_answers_not_leader_without_a_current_leader():
    parts, _ = _produce_all(9)
    assert [int(parts[p].error_code) for p in range(4)] == [0, 6, 6, 6]


def _fetch(version: int, epochs: dict[int, int], offset: int = 0):
    values = request_values(1) | {"max_wait": 0}
    part = values["topics"][0]["partitions"][0]
    values["topics"] = [
        {
            "topic": "t",
            "topic_id": uuid.UUID(int=0),
            "partitions": [
                part | {"partition": p, "fetch_offset": offset, "current_leader_epoch": e}
                for p, e in epochs.items()
            ],
        }
    ]
    n = node()
    if version >= 13:
        values["topics"][0]["topic_id"] = n.fsm.topic("t").topic_id
    r = call(n, 1, version, values)
    return {p.partition_index: p for p in r.responses[0].partitions}, r


def test_fetch_checks_each_partition_s_own_epoch():
    # Partition 0's epoch is 4, partition 1's 9: the same client epoch 4 is current for
    # one and stale for the other.
    parts, _ = _fetch(12, {0: 4, 1: 4})
    assert int(parts[0].error_code) == 0 and len(parts[0].records) > 0
    assert int(parts[1].error_code) == ErrorCode.fenced_leader_epoch
    assert parts[1].records in (None, b"")
    # The current epoch of partition 1, or none given: a follower serves committed data.
    parts, _ = _fetch(12, {1: 9, 0: -1})
    assert int(parts[1].error_code) == 0 and len(parts[1].records) > 0
    assert int(parts[0].error_code) == 0


def test_fetch_v16_names_the_leader_of_each_partition_sent_away():
    parts, r = _fetch(16, {1: 8, 3: -1})
    assert int(parts[1].error_code) == ErrorCode.fenced_leader_epoch
    assert (parts[1].current_leader.leader_id, parts[1].current_leader.leader_epoch) == (2, 9)
    # No replica of partition 3's group here: NOT_LEADER_OR_FOLLOWER, naming node 3.
    assert int(parts[3].error_code) == ErrorCode.not_leader_or_follower
    assert (parts[3].current_leader.leader_id, parts[3].current_leader.leader_epoch) == (3, 2)
    assert sorted(e.node_id for e in r.node_endpoints) == [2, 3]


def test_fetch_above_the_high_watermark_asks_the_partition_s_group():
    # Node 1 is the ready leader of group 0 and of partition 0, not of partition 1:
    # only partition 0's answer may be OFFSET_OUT_OF_RANGE.
    parts, _ = _fetch(12, {0: -1, 1: -1}, offset=50)
    assert int(parts[0].error_code) == ErrorCode.offset_out_of_range
    assert int(parts[1].error_code) == ErrorCode.not_leader_or_follower


def test_list_offsets_per_partition_leader_and_epoch():
    values = request_values(2)
    values["topics"][0]["partitions"] = [
        {"partition_index": p, "current_leader_epoch": e, "timestamp": -1}
        for p, e in ((0, 4), (1, -1), (3, -1), (0, 3), (0, 6))
    ]
    r = call(node(), 2, 8, values)
    got = [
        (p.partition_index, int(p.error_code), p.offset, p.leader_epoch)
        for p in r.topics[0].partitions
    ]
    assert got == [
        (0, 0, 3, 4),  # led here: its own epoch 4, not group 0's term
        (1, int(ErrorCode.not_leader_or_follower), -1, -1),
        (3, int(ErrorCode.not_leader_or_follower), -1, -1),  # no replica here
        (0, int(ErrorCode.fenced_leader_epoch), -1, -1),
        (0, int(ErrorCode.unknown_leader_epoch), -1, -1),
    ]


def test_offset_for_leader_epoch_fences_against_the_partition_s_term():
    values = request_values(23)
    values["topics"][0]["partitions"] = [
        {"partition": p, "current_leader_epoch": c, "leader_epoch": 4}
        for p, c in ((0, 4), (0, 3), (1, 9), (3, -1))
    ]
    r = call(node(), 23, 4, values)
    got = [(int(p.error_code), p.end_offset) for p in r.topics[0].partitions]
    assert got == [
        (0, 3),
        (int(ErrorCode.fenced_leader_epoch), -1),
        (int(ErrorCode.not_leader_or_follower), -1),
        (int(ErrorCode.not_leader_or_follower), -1),
    ]


def test_describe_producers_and_delete_records_only_on_the_partition_s_leader():
    values = {"topics": [{"name": "t", "partition_indexes": [0, 1, 3]}]}
    r = call(node(), 61, 0, values)
    assert [int(p.error_code) for p in r.topics[0].partitions] == [0, 6, 6]
    values = {
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": p, "offset": 1} for p in (0, 1, 3)],
            }
        ],
        "timeout": 1000,
    }
    r = call(node(), 21, 2, values)
    got = [(int(p.error_code), p.low_watermark) for p in r.topics[0].partitions]
    assert got == [(0, 1), (6, -1), (6, -1)]


# ------------------------------------------------------------ SinkService, one group


class _OneGroupNode(SimpleNamespace):
    leader_epoch = RaftGroup.leader_epoch

    def is_leader(self) -> bool:
        return self.leading

    def leads_current(self) -> bool:
        return self.leading and not getattr(self, "stalled", False)

    def membership(self) -> dict[str, list[int]]:
        return {"voters": [1, 2, 3], "learners": [4]}

    def in_sync_voters(self, voters=None) -> tuple[int, ...]:
        return (1, 3)  # node 2 declared down by this node's host


def _one_group_node(term: int, **state) -> _OneGroupNode:
    """Node 1 leads group 0 in `term`, everything applied; state overrides."""
    fields = dict(leading=False, leader_id=1, last_leader_id=1, last_leader_term=term)
    fields.update(term=term, core=SimpleNamespace(term=term), applied=9, commit_index=9)
    return _OneGroupNode(**{**fields, **state})


def _one_group_service(node: _OneGroupNode, me: int, fsm_term: int, brokers: int) -> SinkService:
    fsm = SimpleNamespace(leader_term=fsm_term, on_leader_change=[])
    addresses = {i: ("h", 9090 + i) for i in range(1, brokers + 1)}
    return SinkService(node, fsm, node_id=me, brokers=addresses, cluster_id="c")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("me", "leading", "fsm_term", "leads", "ready", "hosted", "stalled"),
    [
        (1, True, 7, True, True, True, False),
        (1, True, 6, True, False, True, False),  # own-term entry not applied yet
        (1, True, 7, True, False, True, True),  # stalled past its lease: maybe deposed
        (2, False, 7, False, False, True, False),
        (4, False, 7, False, False, True, False),  # a learner holds the data
        (5, False, 7, False, False, False, False),  # removed: no replica
    ],
)
def test_sink_service_answers_group_0_for_every_partition(
    me, leading, fsm_term, leads, ready, hosted, stalled
):
    node = _one_group_node(term=7, leading=leading, stalled=stalled)
    svc = _one_group_service(node, me, fsm_term, brokers=5)
    roles = {svc.role(t, p) for t in ("a", "b") for p in range(3)}
    assert roles == {
        PartitionRole(
            group=0,
            leader=1,
            hint=1,
            leader_epoch=7,
            replicas=(1, 2, 3, 4),  # voters and the learner
            isr=(1, 3),  # voters only (they count toward commit), less the down node 2
            offline=(),
            leads=leads,
            ready=ready,
            hosted=hosted,
            caught_up=True,
        )
    }


def test_a_leaderless_node_names_the_last_leader_s_epoch_not_its_new_term():
    """Term 8 begun (this node voted) and no leader known yet: the epoch stays 7, the
    last leader's, so that the leader of term 8 raises it and clients validate their
    positions toward that leader (KIP-320; CI: librdkafka saw the epoch rise while
    the partition had no leader, could validate nowhere, and never did)."""
    node = _one_group_node(term=8, leader_id=0, last_leader_term=7)
    svc = _one_group_service(node, 2, 7, brokers=3)
    role = svc.role("a", 0)
    assert (role.leader, role.hint, role.leader_epoch) == (-1, 1, 7)
    node.leader_id, node.last_leader_id, node.last_leader_term = 3, 3, 8
    role = svc.role("a", 0)
    assert (role.leader, role.hint, role.leader_epoch) == (3, 3, 8)


# ------------------------------------------------------------ read API Partitions


def test_read_api_partitions_name_each_partition_s_leader_and_replicas():
    n = node()
    addresses = {1: "h:7001", 2: "h:7002", 3: "h:7003"}
    raft = SimpleNamespace(leader_id=1, term=TERM)
    svc = ReadApiService(raft, n.fsm, leader_read_api=addresses.get, roles=n)
    req = SimpleNamespace(linearizable=False, topics=["t"])
    reply = asyncio.run(svc.partitions(req, None))  # type: ignore[arg-type]
    got = {
        p.partition: (
            p.high_watermark,
            p.leader_id,
            p.leader_epoch,
            [(r.node_id, r.read_api) for r in p.replicas],
        )
        for p in reply.partitions
    }
    assert got == {
        0: (3, 1, 4, [(1, "h:7001"), (2, "h:7002"), (3, "h:7003")]),
        1: (3, 2, 9, [(2, "h:7002"), (3, "h:7003"), (1, "h:7001"), (7, "")]),
        2: (3, 0, 3, [(1, "h:7001"), (2, "h:7002"), (3, "h:7003")]),  # 0: no leader known
        3: (3, 3, 2, [(2, "h:7002"), (3, "h:7003")]),
    }
    assert (reply.leader_id, reply.leader_epoch) == (1, TERM)  # the controller's
    # Without roles (an old wiring): the fields stay empty, as before they existed.
    bare = ReadApiService(raft, n.fsm)
    reply = asyncio.run(bare.partitions(req, None))  # type: ignore[arg-type]
    assert [(p.leader_id, len(p.replicas)) for p in reply.partitions] == [(0, 0)] * 4


def test_read_api_partitions_answer_unchanged_only_to_the_current_fingerprint():
    n = node()
    raft = SimpleNamespace(leader_id=1, term=TERM)
    version = [41]
    svc = ReadApiService(raft, n.fsm, roles=n, roles_version=lambda: version[0])

    def ask(since: int, linearizable: bool = False):
        req = SimpleNamespace(linearizable=linearizable, topics=["t"], roles_since=since)
        return asyncio.run(svc.partitions(req, None))  # type: ignore[arg-type]

    full = ask(0)
    assert len(full.partitions) == 4 and full.roles_version == 41 and not full.unchanged
    same = ask(41)
    assert same.unchanged and list(same.partitions) == [] and same.roles_version == 41
    assert (same.leader_id, same.leader_epoch) == (1, TERM)
    version[0] = 42  # a leader, epoch or replica set moved: the rows again
    moved = ask(41)
    assert len(moved.partitions) == 4 and moved.roles_version == 42 and not moved.unchanged
    # Without a fingerprint (one group) every answer is full and names none.
    bare = ReadApiService(raft, n.fsm, roles=n)
    req = SimpleNamespace(linearizable=False, topics=["t"], roles_since=41)
    reply = asyncio.run(bare.partitions(req, None))  # type: ignore[arg-type]
    assert len(reply.partitions) == 4 and reply.roles_version == 0 and not reply.unchanged
