"""DeleteTopics, CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs and
producer-state expiry against a real in-memory node (its state machine applies every
command; requests parsed by kio, responses decoded strictly)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from sink.lifecycle.producer_expiry import ProducerExpiry
from sink.state import SinkStateMachine, admin_commands, commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.test_handlers import call, produce_values


def node_with_topic(partitions: int = 1, records: int = 0) -> MemoryNode:
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", partitions, uuid.uuid4()))
    for i in range(records):
        node.apply(commands.encode_produce("t", 0, -1, -1, -1, make_batch([b"r%d" % i])))
    return node


def test_delete_topic_then_produce_and_fetch_are_refused():
    node = MemoryNode(auto_create_topics=False)
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    tid = node.fsm.topic("t").topic_id
    r = call(node, 0, 9, produce_values(make_batch([b"a"])))
    assert int(r.responses[0].partition_responses[0].error_code) == 0
    # A batch proposed before the delete, applied after it, is refused at apply time.
    late = commands.encode_produce("t", 0, -1, -1, -1, make_batch([b"late"]))
    d = call(node, 20, 6, {"topics": [{"name": None, "topic_id": tid}], "timeout": 1000})
    assert (d.responses[0].name, int(d.responses[0].error_code)) == ("t", 0)
    assert d.responses[0].topic_id == tid
    assert int(node.apply(late).error) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    r = call(node, 0, 9, produce_values(make_batch([b"b"])))
    assert int(r.responses[0].partition_responses[0].error_code) == 3
    f = call(node, 1, 12)
    assert {int(p.error_code) for p in f.responses[0].partitions} == {3}
    f13 = call(node, 1, 13)  # by id: UNKNOWN_TOPIC_ID (100)
    assert {int(p.error_code) for t in f13.responses for p in t.partitions} == {100}
    again = call(node, 20, 4, {"topic_names": ["t", "nope"], "timeout": 1000})
    assert [int(x.error_code) for x in again.responses] == [3, 3]
    gone = call(node, 20, 6, {"topics": [{"name": None, "topic_id": tid}], "timeout": 1000})
    assert int(gone.responses[0].error_code) == 100  # UNKNOWN_TOPIC_ID


def test_delete_topic_with_a_stale_id_does_not_remove_a_recreated_topic():
    node = node_with_topic()
    old = node.fsm.topic("t").topic_id
    assert int(node.apply(admin_commands.encode_delete_topic("t", old))) == 0
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    assert int(node.apply(admin_commands.encode_delete_topic("t", old))) == 3
    assert node.fsm.topic("t") is not None


def test_deleted_topic_no_longer_holds_back_retention():
    node = node_with_topic(records=3)
    assert node.apply(commands.encode_commit_offsets("spark", [("t", 0, 0)])) == 1
    assert node.fsm.pipelines["spark"] == {("t", 0): 0}
    assert node.fsm.retention_floor_index() is not None
    node.apply(admin_commands.encode_delete_topic("t", node.fsm.topic("t").topic_id))
    assert node.fsm.retention_floor_index() is None
    assert node.fsm.pipelines["spark"] == {}


def test_delete_topic_on_a_follower_is_not_controller():
    node = node_with_topic()
    node.lead = 2
    d = call(node, 20, 5, {"topic_names": ["t"], "timeout": 1000})
    assert int(d.responses[0].error_code) == 41  # NOT_CONTROLLER
    assert node.fsm.topic("t") is not None


def cp(node, count, validate_only=False, version=3):
    values = {
        "topics": [{"name": "t", "count": count, "assignments": None}],
        "timeout": 1000,
        "validate_only": validate_only,
    }
    r = call(node, 37, version, values).results[0]
    return int(r.error_code), r.error_message


def test_create_partitions_grows_and_keeps_the_topic_id():
    node = node_with_topic(partitions=2)
    tid = node.fsm.topic("t").topic_id
    assert cp(node, 1)[0] == 37  # INVALID_PARTITIONS: fewer
    assert cp(node, 2)[0] == 37  # as many
    assert cp(node, 4, validate_only=True) == (0, None)
    assert node.fsm.topic("t").partitions == 2
    assert cp(node, 4, version=0) == (0, None)
    info = node.fsm.topic("t")
    assert (info.partitions, info.topic_id) == (4, tid)
    assert node.fsm.has_partition("t", 3) and node.fsm.high_watermark("t", 3) == 0
    assert cp(node, 10**6)[0] == 37  # beyond kafka.max_create_partitions
    # Survives a snapshot.
    twin = SinkStateMachine()
    twin.on_snapshot_load(node.fsm.on_snapshot_save())
    assert twin.topic("t") == info


def dr(node, offset, version=2):
    values = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": offset}]}],
        "timeout": 1000,
    }
    p = call(node, 21, version, values).topics[0].partitions[0]
    return int(p.error_code), p.low_watermark


def test_delete_records_moves_the_log_start():
    node = node_with_topic(records=5)
    assert dr(node, 6)[0] == 1  # OFFSET_OUT_OF_RANGE beyond the high watermark
    assert dr(node, 2) == (0, 2)
    assert dr(node, 1) == (0, 2)  # never moves back
    assert node.fsm.log_start_offset("t", 0) == 2
    lo = call(node, 2, 8, _list_offsets(-2)).topics[0].partitions[0]
    assert lo.offset == 2  # earliest moved
    f = call(node, 1, 12, _fetch(1))
    assert int(f.responses[0].partitions[0].error_code) == 1  # below the start
    f = call(node, 1, 12, _fetch(2))
    p = f.responses[0].partitions[0]
    assert int(p.error_code) == 0 and p.log_start_offset == 2
    assert dr(node, -1, version=0) == (0, 5)  # -1: the high watermark
    assert dr(node, 5) == (0, 5)
    node.lead = 2
    assert dr(node, 5)[0] == 6  # NOT_LEADER_OR_FOLLOWER


def _list_offsets(ts):
    from tests.unit.sink.requests import request_values

    v = request_values(2)
    v["topics"][0]["partitions"][0]["timestamp"] = ts
    return v


def _fetch(offset):
    from tests.unit.sink.requests import request_values

    v = request_values(1)
    v["topics"][0]["partitions"] = [v["topics"][0]["partitions"][0] | {"fetch_offset": offset}]
    return v


def test_describe_cluster_names_every_node_and_itself_as_the_controller():
    node = node_with_topic()
    for version in (0, 1):
        r = call(node, 60, version)
        assert int(r.error_code) == 0 and r.cluster_id == "memory"
        assert r.controller_id == 1
        assert [(b.broker_id, b.port) for b in r.brokers] == [(1, 9092), (2, 9093)]
    r = call(node, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert int(r.error_code) != 0
    node.node_id = 2  # a follower names itself too: it relays controller requests (KIP-590)
    assert call(node, 60, 1).controller_id == 2


def test_describe_log_dirs_reports_retained_sizes():
    node = node_with_topic(partitions=2, records=3)
    size = 3 * len(make_batch([b"r0"]))
    for version in (1, 4):
        r = call(node, 35, version, {"topics": None})
        (d,) = r.results
        assert int(d.error_code) == 0 and d.log_dir == "/memory"
        sizes = {p.partition_index: p.partition_size for t in d.topics for p in t.partitions}
        assert sizes == {0: size, 1: 0}
    assert call(node, 35, 4, {"topics": None}).results[0].total_bytes == 1 << 30
    node.apply(admin_commands.encode_delete_records("t", 0, 2))
    r = call(node, 35, 2, {"topics": [{"topic": "t", "partitions": [0, 7]}]})
    (t,) = r.results[0].topics
    assert [(p.partition_index, p.partition_size) for p in t.partitions] == [(0, size // 3)]


def test_idle_producers_expire_through_the_log_and_may_come_back():
    node = node_with_topic()
    now = [0.0]

    async def propose(data):
        return node.apply(data)

    exp = ProducerExpiry(node.fsm, propose, node.is_leader, 1000, clock=lambda: now[0])

    def produce(pid, seq):
        b = make_batch([b"x"], producer_id=pid, epoch=0, base_sequence=seq)
        return node.apply(commands.encode_produce("t", 0, pid, 0, seq, b))

    assert int(produce(7, 0).error) == 0 and int(produce(8, 0).error) == 0
    assert asyncio.run(exp.expire_once()) == 0  # first sighting starts the clocks
    now[0] = 0.6
    assert int(produce(8, 1).error) == 0  # 8 is active
    now[0] = 1.1
    assert asyncio.run(exp.expire_once()) == 1  # 7 idle for 1.1 s; 8 only 0.5 s
    assert set(node.fsm.producers.last_indexes()) == {8}
    # The expired producer comes back mid-sequence: accepted as a new producer.
    r = produce(7, 1)
    assert int(r.error) == 0 and not r.duplicate
    # A producer that appended after the proposal's index is kept at apply time.
    stale = admin_commands.encode_expire_producers([(8, 0)])
    assert node.apply(stale) == 0
    # Followers never propose.
    node.lead = 2
    now[0] = 100.0
    exp.idle()
    now[0] = 200.0
    assert asyncio.run(exp.expire_once()) == 0
    twin = SinkStateMachine()
    twin.on_snapshot_load(node.fsm.on_snapshot_save())
    assert twin.producers.last_indexes() == node.fsm.producers.last_indexes()


def test_unreadable_admin_entry_is_logged_not_fatal():
    node = node_with_topic()
    assert node.apply(b"X\x00\x00\x00\x05") is None
    assert node.apply(b"D\x00") is None


def test_describe_producers_lists_live_producer_state():
    node = node_with_topic(partitions=2)
    b = make_batch([b"a", b"b"], producer_id=42, epoch=3, base_sequence=0)
    assert int(node.apply(commands.encode_produce("t", 0, 42, 3, 0, b)).error) == 0
    r = call(node, 61, 0, {"topics": [{"name": "t", "partition_indexes": [0, 1, 5]}]})
    parts = {p.partition_index: p for p in r.topics[0].partitions}
    (state,) = parts[0].active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (42, 3, 1)
    assert parts[1].active_producers == () and int(parts[1].error_code) == 0
    assert int(parts[5].error_code) == 3
    node.apply(admin_commands.encode_expire_producers([(42, 10**9)]))
    r = call(node, 61, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
    assert r.topics[0].partitions[0].active_producers == ()


def test_create_topics_replica_assignments_are_checked_as_kafka_does():
    from sink.kafka.handlers.create_topics import _assignments_of
    from sink.kafka.protocol.errors import ErrorCode

    def topic(n, rf, *lists, indexes=None):
        idx = indexes if indexes is not None else range(len(lists))
        return SimpleNamespace(
            num_partitions=n,
            replication_factor=rf,
            assignments=[
                SimpleNamespace(partition_index=i, broker_ids=b)
                for i, b in zip(idx, lists, strict=True)
            ],
        )

    assert _assignments_of(topic(3, 1)) == (None, None)  # no lists: the counts decide
    assert _assignments_of(topic(-1, -1, [2, 1], [1, 2])) == ([[2, 1], [1, 2]], None)
    # given out of order: put in partition order
    assert _assignments_of(topic(-1, -1, [1, 2], [2, 1], indexes=[1, 0]))[0] == [[2, 1], [1, 2]]
    refusals = {
        "counts too": topic(2, -1, [1], [2]),
        "not 0-based": topic(-1, -1, [1], [2], indexes=[1, 2]),
        "index twice": topic(-1, -1, [1], [2], indexes=[0, 0]),
        "empty": topic(-1, -1, []),
        "duplicate": topic(-1, -1, [1, 1]),
        "uneven": topic(-1, -1, [1, 2], [1]),
    }
    codes = {k: _assignments_of(t)[1][0] for k, t in refusals.items()}
    assert codes.pop("counts too") == ErrorCode.invalid_request
    assert set(codes.values()) == {ErrorCode.invalid_replica_assignment}, codes


def test_the_configs_tools_set_at_creation_are_accepted_and_unknown_ones_refused():
    from sink.topics.configs import TopicConfigError, builtin_default, validate

    assert validate("compression.type", "lz4") == "lz4"
    assert validate("min.insync.replicas", "2") == "2"
    assert validate("unclean.leader.election.enable", "FALSE") == "false"
    assert validate("min.cleanable.dirty.ratio", "0.5") == "0.5"
    assert validate("message.format.version", "0.10.0-IV1") == "0.10.0-IV1"
    assert validate("message.format.version", "0.10.0.0") == "0.10.0.0"
    assert builtin_default("compression.type") == "producer"
    for name, value in (
        ("compression.type", "brotli"),
        ("min.insync.replicas", "0"),
        ("unclean.leader.election.enable", "maybe"),
        ("min.cleanable.dirty.ratio", "2"),
        ("message.format.version", "latest"),
        ("dummy.doesntexist", "x"),
    ):
        with pytest.raises(TopicConfigError):
            validate(name, value)


def test_the_controller_named_is_this_node_only_where_it_relays_whole_requests():
    """No authorization: every controller request is relayed as is; authorization with a
    relay user: in an Envelope. Either way this node names itself. Authorization without
    a relay user (mutual TLS or plaintext only) relays only what the client may do in
    full, so the controller group's leader is named, as before KIP-590 here."""
    node = MemoryNode(node_id=2, leader_id=1)
    ctx = node.context()
    assert ctx.controller_for_clients() == 2
    ctx.authorizer = object()  # type: ignore[assignment]
    assert not ctx.envelopes() and ctx.controller_for_clients() == 1
    ctx.relay_login = object()
    assert ctx.envelopes() and ctx.controller_for_clients() == 2
