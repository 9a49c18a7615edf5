"""OffsetCommit / OffsetFetch / OffsetDelete / OffsetForLeaderEpoch / transactional
InitProducerId through their handlers, against a real in-memory node
(tests/unit/sink/memory_services.py: the real GroupOffsetService and state machine)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from sink.groups.membership import GroupStatus
from sink.kafka.protocol.errors import ErrorCode
from sink.offsets import OffsetsOptions
from sink.state import commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import request_values
from tests.unit.sink.test_handlers import call


def _node(**kw) -> MemoryNode:
    node = MemoryNode(**kw)
    node.apply(commands.encode_create_topic("t", 2, uuid.uuid4()))
    return node


def _commit(node: MemoryNode, version: int, parts: list[dict], **top) -> dict[int, int]:
    values = request_values(8) | top
    values["topics"] = [
        {
            "name": p.pop("topic", "t"),
            "partitions": [
                {
                    "partition_index": 0,
                    "committed_offset": 5,
                    "committed_leader_epoch": -1,
                    "commit_timestamp": -1,
                    "committed_metadata": "",
                }
                | p
            ],
        }
        for p in parts
    ]
    r = call(node, 8, version, values)
    return {(t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions}


def _fetch(node: MemoryNode, version: int, partitions=(0, 1), group: str = "g"):
    values = request_values(9) | {
        "group_id": group,
        "topics": [{"name": "t", "partition_indexes": list(partitions)}],
    }
    values["groups"] = [
        {"group_id": group, "member_id": None, "member_epoch": -1, "topics": values["topics"]}
    ]
    r = call(node, 9, version, values)
    if version >= 8:
        (g,) = r.groups
        return int(g.error_code), g.topics
    return int(getattr(r, "error_code", 0)), r.topics  # v0-1: no top-level error


@pytest.mark.parametrize("version", [6, 8, 9])
def test_commit_stores_epoch_and_metadata_returned_by_fetch_v5_plus(version):
    node = _node()
    codes = _commit(
        node,
        version,
        [
            {
                "partition_index": 0,
                "committed_offset": 42,
                "committed_leader_epoch": 3,
                "committed_metadata": "m",
            }
        ],
    )
    assert codes == {("t", 0): 0}
    for fv in (5, 7, 8, 9):
        err, topics = _fetch(node, fv)
        p0, p1 = topics[0].partitions
        assert err == 0
        assert (p0.committed_offset, p0.committed_leader_epoch, p0.metadata) == (42, 3, "m")
        assert (p1.committed_offset, p1.committed_leader_epoch, p1.metadata) == (-1, -1, "")
    err, topics = _fetch(node, 4)  # no epoch field before v5
    assert topics[0].partitions[0].committed_offset == 42
    assert not hasattr(topics[0].partitions[0], "committed_leader_epoch")
    # the offset went through the log: the applied table holds it
    assert node.fsm.group_offsets.get("g", "t", 0).offset == 42


def test_fetch_with_null_topics_returns_every_committed_partition():
    node = _node()
    _commit(node, 8, [{"partition_index": 1, "committed_offset": 7}])
    values = request_values(9) | {"group_id": "g", "topics": None}
    r = call(node, 9, 7, values)
    assert [
        (t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in r.topics
    ] == [("t", [(1, 7)])]


def test_oversize_metadata_and_unknown_partitions_are_refused_per_partition():
    node = _node(offsets_options=OffsetsOptions(metadata_max_bytes=10))
    codes = _commit(
        node,
        8,
        [
            {"partition_index": 0, "committed_metadata": "x" * 11},
            {"topic": "nope", "partition_index": 0},
            {"partition_index": 1, "committed_metadata": "é" * 5},  # 10 bytes: fits
        ],
    )
    assert codes == {("t", 0): 12, ("nope", 0): 3, ("t", 1): 0}  # OFFSET_METADATA_TOO_LARGE
    assert node.fsm.group_offsets.get("g", "t", 0) is None
    assert node.fsm.group_offsets.get("g", "t", 1).metadata == "é" * 5


def test_default_metadata_limit_is_kafkas_4096_bytes():
    node = _node()
    assert _commit(node, 8, [{"committed_metadata": "m" * 4096}]) == {("t", 0): 0}
    assert _commit(node, 8, [{"committed_metadata": "m" * 4097}]) == {("t", 0): 12}


def test_only_the_coordinator_answers_and_only_once_loaded():
    follower = _node(node_id=2, leader_id=1)
    assert _commit(follower, 8, [{}]) == {("t", 0): 16}  # NOT_COORDINATOR
    assert _fetch(follower, 8)[0] == 16
    assert _fetch(follower, 3)[0] == 16
    assert len(follower.fsm.group_offsets) == 0
    loading = _node()
    loading.ready = False  # a new leader, own-term entry not applied yet
    assert _commit(loading, 8, [{}]) == {("t", 0): 14}  # COORDINATOR_LOAD_IN_PROGRESS
    assert _fetch(loading, 8)[0] == 14
    _err, topics = _fetch(loading, 1)  # v0-1: per-partition errors only
    assert {int(p.error_code) for p in topics[0].partitions} == {14}


class _Coordinator:
    """A group coordinator as the `groups` part will implement GroupMembership."""

    def __init__(self, generation: int, members: set[str], status: GroupStatus | None) -> None:
        self.generation, self.members, self._status = generation, members, status
        self.asked: list = []

    def check_commit(self, group, generation, member_id, instance_id):
        self.asked.append((group, generation, member_id, instance_id))
        if generation < 0 and not self.members:
            return ErrorCode.none
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def status(self, group):
        return self._status


def test_member_commits_are_checked_by_the_group_coordinator():
    node = _node()
    coord = _Coordinator(4, {"m1"}, GroupStatus(False, subscribed=frozenset({"t"})))
    node.offsets.membership = coord
    top = {"generation_id_or_member_epoch": 3, "member_id": "m1", "group_instance_id": "i1"}
    assert _commit(node, 8, [{}], **top) == {("t", 0): 22}  # ILLEGAL_GENERATION
    assert coord.asked[-1] == ("g", 3, "m1", "i1")
    assert _commit(node, 8, [{}], **top | {"member_id": "zz"}) == {("t", 0): 25}
    assert _commit(node, 8, [{}], **top | {"generation_id_or_member_epoch": 4}) == {("t", 0): 0}
    assert len(node.fsm.group_offsets) == 1  # only the accepted commit was stored


def test_without_a_coordinator_only_simple_commits_pass():
    node = _node()
    assert _commit(node, 8, [{}], generation_id_or_member_epoch=-1) == {("t", 0): 0}
    assert _commit(node, 8, [{}], generation_id_or_member_epoch=1, member_id="m") == {("t", 0): 22}


def _delete(node: MemoryNode, group: str = "g", topic: str = "t", parts=(0, 1)):
    values = {
        "group_id": group,
        "topics": [{"name": topic, "partitions": [{"partition_index": i} for i in parts]}],
    }
    r = call(node, 47, 0, values)
    return int(r.error_code), {
        (t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions
    }


def test_offset_delete():
    node = _node()
    assert _delete(node) == (69, {})  # GROUP_ID_NOT_FOUND: nothing committed, no coordinator
    _commit(node, 8, [{"partition_index": 0}, {"partition_index": 1}])
    assert _delete(node, parts=(0, 7)) == (0, {("t", 0): 0, ("t", 7): 3})
    assert node.fsm.group_offsets.partitions("g") == [("t", 1)]
    # a group with members: its subscribed topics are refused, others deleted
    node.offsets.membership = _Coordinator(
        1, {"m"}, GroupStatus(False, subscribed=frozenset({"t"}))
    )
    assert _delete(node) == (0, {("t", 0): 86, ("t", 1): 86})  # GROUP_SUBSCRIBED_TO_TOPIC
    node.offsets.membership = _Coordinator(1, {"m"}, GroupStatus(False))
    assert _delete(node)[0] == 68  # NON_EMPTY_GROUP: subscription unknown
    node.offsets.membership = _Coordinator(1, set(), GroupStatus(True))
    assert _delete(node) == (0, {("t", 0): 0, ("t", 1): 0})
    assert not node.fsm.group_offsets.has_group("g")
    assert _delete(_node(node_id=2, leader_id=1))[0] == 16


def test_commit_retention_time_v2_sets_an_explicit_expiry():
    node = _node()
    _commit(node, 2, [{}], retention_time=timedelta(milliseconds=60_000))
    c = node.fsm.group_offsets.get("g", "t", 0)
    assert c.expire_ms == node.now_ms + 60_000
    _commit(node, 2, [{}], retention_time=timedelta(milliseconds=-1))
    assert node.fsm.group_offsets.get("g", "t", 0).expire_ms == -1


# ------------------------------------------------------- OffsetForLeaderEpoch


def _ofle(node: MemoryNode, version: int, epoch: int, current: int = -1, parts=(0,)):
    values = {
        "replica_id": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": i, "current_leader_epoch": current, "leader_epoch": epoch}
                    for i in parts
                ],
            }
        ],
    }
    r = call(node, 23, version, values)
    return [(int(p.error_code), p.leader_epoch, p.end_offset) for p in r.topics[0].partitions]


def _produce(node: MemoryNode, n: int) -> None:
    node.apply(commands.encode_produce("t", 0, -1, -1, -1, make_batch([b"r"] * n)))


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_across_terms(version):
    node = _node(term=2)
    _produce(node, 3)  # term 2: offsets 0-2
    node.term = 5
    _produce(node, 4)  # term 5: offsets 3-6
    node.term = 7  # a later leader, no records yet
    assert _ofle(node, version, 7, 7) == [(0, 7, 7)]  # the current term: high watermark
    assert _ofle(node, version, 5) == [(0, 5, 7)]
    assert _ofle(node, version, 4) == [(0, 2, 3)]  # term 2 ends where term 5 began
    assert _ofle(node, version, 1) == [(0, 1, 0)]
    assert _ofle(node, version, 8) == [(0, -1, -1)]  # above the current term: undefined
    assert _ofle(node, version, 2, parts=(0, 1, 9)) == [(0, 2, 3), (0, 2, 0), (3, -1, -1)]


def test_offset_for_leader_epoch_errors():
    node = _node(term=5)
    _produce(node, 2)
    assert _ofle(node, 4, 5, current=4)[0][0] == 74  # FENCED_LEADER_EPOCH
    assert _ofle(node, 4, 5, current=6)[0][0] == 75  # UNKNOWN_LEADER_EPOCH
    node.ready = False
    assert _ofle(node, 4, 5, current=5) == [(78, -1, -1)]  # OFFSET_NOT_AVAILABLE
    follower = _node(node_id=2, leader_id=1, term=5)
    assert _ofle(follower, 2, 5)[0][0] == 6  # NOT_LEADER_OR_FOLLOWER


def test_fetched_batches_and_metadata_carry_the_same_epochs():
    """A consumer validates with the epoch its fetched batch carried: that epoch is the
    entry's term, and OffsetForLeaderEpoch knows it."""
    node = _node(term=3)
    _produce(node, 2)
    node.term = 6
    r = call(node, 1, 12)
    records = r.responses[0].partitions[0].records
    assert int.from_bytes(records[12:16], "big") == 3  # partitionLeaderEpoch of the batch
    meta = call(node, 3, 12)
    assert meta.topics[0].partitions[0].leader_epoch == 6
    assert _ofle(node, 4, 3, 6) == [(0, 3, 2)]


def test_transactional_init_producer_id_is_refused_at_once():
    node = _node()
    for version in (0, 4):
        r = call(node, 22, version, request_values(22) | {"transactional_id": "tx"})
        assert (int(r.error_code), r.producer_id) == (
            53,
            -1,
        )  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert int(call(node, 22, 4).error_code) == 0  # no transactional id: a new producer id


def test_an_oversize_group_id_is_invalid_not_a_crash():
    node = _node()
    big = "g" * 40_000  # only flexible versions can carry it
    assert _commit(node, 8, [{}], group_id=big) == {("t", 0): 24}  # INVALID_GROUP_ID
    assert _fetch(node, 7, group=big)[0] == 24
    assert len(node.fsm.group_offsets) == 0


class _AskPerTopic:
    """A subscription the coordinator answers per topic (the `groups` part's shape)."""

    def __init__(self, topics: set[str]) -> None:
        self.topics = topics

    def __contains__(self, topic: object) -> bool:
        return topic in self.topics


def test_subscription_may_be_any_container():
    node = _node()
    _commit(node, 8, [{"partition_index": 0}, {"partition_index": 1}])
    node.offsets.membership = _Coordinator(
        1, {"m"}, GroupStatus(False, subscribed=_AskPerTopic({"other"}))
    )
    assert _delete(node) == (0, {("t", 0): 0, ("t", 1): 0})  # not subscribed to "t"
