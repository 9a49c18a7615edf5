"""Each API's handler against a real in-memory node (tests/unit/sink/memory_services.py):
requests parsed by kio, responses decoded strictly with the version's schema."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.serial import entity_reader

from sink.kafka.handlers import ADVERTISED, REGISTRY, SUPPORTED, Call
from sink.kafka.protocol import request_schema, response_schema
from sink.state import commands
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import encode, request_values


def call(node: MemoryNode, api_key: int, version: int, values: dict | None = None):
    """One request through its handler -> the decoded response (None: no response)."""
    frame = encode(api_key, version, values or request_values(api_key), corr=9)
    cls = request_schema(api_key, version)
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req = entity_reader(cls)(frame, n)[0]

    async def run():
        fut = await REGISTRY[api_key].handle(node.context(), Call(version, 9, req, frame))
        return await fut

    data = asyncio.run(run())
    if data is None:
        return None
    raw = b"".join(bytes(p) for p in data) if isinstance(data, list) else data
    rcls = response_schema(api_key, version)
    hdr, n = entity_reader(rcls.__header_schema__)(raw, 0)
    body, m = entity_reader(rcls)(raw, n)
    assert hdr.correlation_id == 9 and n + m == len(raw)
    return body


def produce_values(records: bytes, acks: int = -1, topic: str = "t") -> dict:
    return request_values(0, records) | {
        "acks": acks,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


def test_registry_is_keyed_by_kio_schemas_and_advertised():
    for key, api in REGISTRY.items():
        assert api.key == key == api.request.__api_key__
        assert SUPPORTED[key] == api.versions
        lo, hi = api.versions
        for v in (lo, hi):
            assert request_schema(key, v).__api_key__ == key


def test_produce_then_fetch_and_list_offsets():
    node = MemoryNode()
    r = call(node, 0, 9, produce_values(make_batch([b"a", b"b"])))
    part = r.responses[0].partition_responses[0]
    assert (int(part.error_code), part.base_offset) == (0, 0)  # topic auto-created
    r = call(node, 0, 9, produce_values(make_batch([b"c"])))
    assert r.responses[0].partition_responses[0].base_offset == 2
    f = call(node, 1, 12)  # partitions 0-3 of "t": only 0 exists
    parts = {p.partition_index: p for p in f.responses[0].partitions}
    assert int(parts[0].error_code) == 0 and parts[0].high_watermark == 3
    assert len(parts[0].records) > 0
    assert {int(parts[i].error_code) for i in (1, 2, 3)} == {3}  # UNKNOWN_TOPIC_OR_PARTITION
    lo = call(node, 2, 8)
    p = lo.topics[0].partitions[0]
    assert (int(p.error_code), p.offset, p.leader_epoch) == (0, 3, 1)


def test_produce_acks_0_gets_no_response():
    node = MemoryNode()
    assert call(node, 0, 9, produce_values(make_batch([b"x"]), acks=0)) is None
    assert node.fsm.high_watermark("t", 0) == 1


def test_produce_errors_per_partition():
    node = MemoryNode()
    bad = bytearray(make_batch([b"x"]))
    bad[-1] ^= 1
    r = call(node, 0, 9, produce_values(bytes(bad)))
    assert int(r.responses[0].partition_responses[0].error_code) == 2  # CORRUPT_MESSAGE
    r = call(node, 0, 9, produce_values(make_batch([b"x"]), acks=5))
    assert int(r.responses[0].partition_responses[0].error_code) == 21  # INVALID_REQUIRED_ACKS


def test_produce_on_a_follower_names_the_leader_kip_951():
    node = MemoryNode(node_id=2, leader_id=1)
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    r = call(node, 0, 10, produce_values(make_batch([b"x"])))
    part = r.responses[0].partition_responses[0]
    assert int(part.error_code) == 6
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 1)
    assert [(e.node_id, e.port) for e in r.node_endpoints] == [(1, 9092)]


def test_metadata_and_find_coordinator():
    node = MemoryNode()
    md = call(node, 3, 12)
    (t,) = md.topics
    assert (t.name, int(t.error_code), t.partitions[0].leader_id) == ("t", 0, 1)
    assert t.topic_id != uuid.UUID(int=0) and md.controller_id == 1
    assert {b.node_id for b in md.brokers} == {1, 2}
    fc = call(node, 10, 4)
    assert [(c.key, c.node_id, int(c.error_code)) for c in fc.coordinators] == [
        ("g", 1, 0),
        ("h", 1, 0),
    ]
    fc = call(MemoryNode(leader_id=-1), 10, 2)
    assert int(fc.error_code) == 15  # COORDINATOR_NOT_AVAILABLE


def test_metadata_and_describe_cluster_leave_out_nodes_declared_down_by_a_majority():
    """As Kafka lists only live broker registrations: a node declared down is not a
    broker nor a partition's leader (-1, LEADER_NOT_AVAILABLE: clients look again), while
    the answering node hears a majority (itself included); an isolated node lists every
    node and its last leader (its view is its isolation). Itself: always listed, and the
    controller it names (it relays controller requests)."""
    five = {i: ("127.0.0.1", 9091 + i) for i in range(1, 6)}
    node = MemoryNode(node_id=1, leader_id=2, brokers=five)
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))

    def seen(down: set[int]):
        node.peers_down = lambda: frozenset(down)
        md = call(node, 3, 12)
        part = md.topics[0].partitions[0]
        dc = call(node, 60, 1)
        brokers = sorted(b.node_id for b in md.brokers)
        assert sorted(b.broker_id for b in dc.brokers) == brokers
        assert md.controller_id == dc.controller_id == 1
        return brokers, (part.leader_id, int(part.error_code))

    assert seen(set()) == ([1, 2, 3, 4, 5], (2, 0))
    assert seen({5}) == ([1, 2, 3, 4], (2, 0))
    assert seen({4, 5}) == ([1, 2, 3], (2, 0))  # 3 of 5 heard: a majority
    assert seen({2, 5}) == ([1, 3, 4], (-1, 5))  # the leader declared down
    assert seen({2, 3, 4}) == ([1, 2, 3, 4, 5], (2, 0))  # 2 of 5: no majority, all listed
    assert seen({2, 3, 4, 5}) == ([1, 2, 3, 4, 5], (2, 0))  # isolated
    assert seen({1, 5}) == ([1, 2, 3, 4], (2, 0))  # itself: never left out


def test_metadata_without_auto_create():
    md = call(MemoryNode(auto_create_topics=False), 3, 9)
    assert [(t.name, int(t.error_code)) for t in md.topics] == [("t", 3)]


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_topics_on_leader_and_follower(version):
    lead = MemoryNode()
    ok = call(lead, 19, version).topics[0]
    assert (ok.name, int(ok.error_code)) == ("t", 0)
    assert lead.fsm.topic("t").partitions == 2
    again = call(lead, 19, version).topics[0]
    assert int(again.error_code) == 36  # TOPIC_ALREADY_EXISTS
    follower = call(MemoryNode(node_id=2, leader_id=1), 19, version).topics[0]
    assert int(follower.error_code) == 41  # NOT_CONTROLLER
    if version >= 7:
        assert ok.topic_id is not None and follower.topic_id is None  # kio: zero UUID = None


def test_init_producer_id_and_offsets():
    node = MemoryNode()
    r = call(node, 22, 4)
    assert (int(r.error_code), r.producer_id, r.producer_epoch) == (0, 1000, 0)
    assert call(node, 22, 4).producer_id == 1001
    oc = call(node, 8, 8)
    assert int(oc.topics[0].partitions[0].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    oc = call(node, 8, 8)
    assert int(oc.topics[0].partitions[0].error_code) == 0
    of = call(node, 9, 7)
    got = {p.partition_index: p.committed_offset for p in of.topics[0].partitions}
    assert got == {0: 5, 1: -1}
    all_of = call(node, 9, 7, request_values(9) | {"topics": None})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in all_of.topics] == [
        ("t", [0])
    ]
    follower = MemoryNode(node_id=2, leader_id=1)
    assert int(call(follower, 8, 8).topics[0].partitions[0].error_code) == 16
    # COORDINATOR_LOAD_IN_PROGRESS: retried as is (an idempotent producer has no
    # coordinator to look up; see sink/kafka/handlers/init_producer_id.py)
    assert int(call(follower, 22, 4).error_code) == 14


def test_api_versions_lists_the_registry():
    r = call(MemoryNode(), 18, 3)
    assert {k.api_key: (k.min_version, k.max_version) for k in r.api_keys} == dict(ADVERTISED)
    assert 58 in SUPPORTED and 58 not in ADVERTISED  # Envelope: served, never advertised


def _fetch_by_id(topic_id: uuid.UUID) -> dict:
    values = request_values(1) | {"max_wait": 0}
    values["topics"] = [values["topics"][0] | {"topic_id": topic_id}]
    return values


@pytest.mark.parametrize("version", [13, 14, 15, 16])
def test_fetch_by_topic_id(version):
    """KIP-516: v13+ name topics by id; an unknown id is UNKNOWN_TOPIC_ID."""
    node = MemoryNode()
    call(node, 0, 9, produce_values(make_batch([b"a", b"b"])))
    tid = node.fsm.topic("t").topic_id
    (t,) = call(node, 1, version, _fetch_by_id(tid)).responses
    assert t.topic_id == tid
    p0 = t.partitions[0]
    assert (int(p0.error_code), p0.high_watermark) == (0, 2) and p0.records
    (u,) = call(node, 1, version, _fetch_by_id(uuid.UUID(int=99))).responses
    assert u.topic_id == uuid.UUID(int=99)
    assert {int(p.error_code) for p in u.partitions} == {100}  # UNKNOWN_TOPIC_ID


def test_fetch_v16_from_a_new_leader_names_the_leader_kip_951():
    """A partition sent away (NOT_LEADER_OR_FOLLOWER) carries the leader and its epoch,
    and the response the leader's endpoint; before v16 neither is written."""
    node = MemoryNode(node_id=1, leader_id=1, term=4)
    call(node, 0, 9, produce_values(make_batch([b"a"])))
    node.ready = False  # a new leader whose own-term entry is not applied yet
    tid = node.fsm.topic("t").topic_id
    r = call(node, 1, 16, _fetch_by_id(tid))
    p0 = r.responses[0].partitions[0]
    assert int(p0.error_code) == 6
    assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (1, 4)
    assert [(e.node_id, e.host, e.port) for e in r.node_endpoints] == [(1, "127.0.0.1", 9092)]
    r15 = call(node, 1, 15, _fetch_by_id(tid))
    assert r15.responses[0].partitions[0].current_leader.leader_id == -1
    assert not hasattr(r15, "node_endpoints")  # v15 has no such field


@pytest.mark.parametrize("version", [8, 9])
def test_offset_commit_v9_and_offset_fetch_v8_v9_groups(version):
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    assert int(call(node, 8, 9).topics[0].partitions[0].error_code) == 0
    r = call(node, 9, version)
    (g,) = r.groups
    assert (g.group_id, int(g.error_code)) == ("g", 0)
    assert [(p.partition_index, p.committed_offset) for p in g.topics[0].partitions] == [(0, 5)]
    follower = call(MemoryNode(node_id=2, leader_id=1), 9, version)
    assert int(follower.groups[0].error_code) == 16  # NOT_COORDINATOR


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_of_the_zero_topic_id_is_unknown(version):
    """kio reads the all-zero id as None: the answer is UNKNOWN_TOPIC_ID, not a crash."""
    node = MemoryNode()
    call(node, 0, 9, produce_values(make_batch([b"a"])))
    (u,) = call(node, 1, version, _fetch_by_id(uuid.UUID(int=0))).responses
    assert u.topic_id is None  # the zero id, read back by kio
    assert {int(p.error_code) for p in u.partitions} == {100}


def test_find_coordinator_refuses_unknown_key_types():
    node = MemoryNode()
    for version in (1, 3):
        r = call(node, 10, version, request_values(10) | {"key_type": 7})
        assert (int(r.error_code), r.node_id) == (42, -1)  # INVALID_REQUEST
        assert int(call(node, 10, version).error_code) == 0
    r = call(node, 10, 4, request_values(10) | {"key_type": 7})
    assert {int(c.error_code) for c in r.coordinators} == {42}


@pytest.mark.parametrize(
    ("num_partitions", "replication_factor", "code"),
    [(0, -1, 37), (-2, -1, 37), (1, 0, 38), (1, -3, 38), (1, 99, 38), (-1, 1, 0)],
)
def test_create_topics_refuses_impossible_counts(num_partitions, replication_factor, code):
    """INVALID_PARTITIONS (37) / INVALID_REPLICATION_FACTOR (38; more replicas than brokers); -1 is
    the broker default; nothing is created on a refusal."""
    node = MemoryNode()
    values = request_values(19)
    values["topics"] = [
        values["topics"][0]
        | {"num_partitions": num_partitions, "replication_factor": replication_factor}
    ]
    (t,) = call(node, 19, 5, values).topics
    assert int(t.error_code) == code
    assert (node.fsm.topic("t") is not None) == (code == 0)
    if code:
        assert (t.num_partitions, t.replication_factor) == (-1, -1)


def test_zstd_needs_produce_v7_and_fetch_v10():
    """KIP-110: UNSUPPORTED_COMPRESSION_TYPE (76) for zstd below Produce v7 / Fetch v10."""
    node = MemoryNode()
    zstd = make_batch([b"z"], compression=4)
    r = call(node, 0, 6, produce_values(zstd))
    assert int(r.responses[0].partition_responses[0].error_code) == 76
    assert node.fsm.high_watermark("t", 0) == 0  # nothing appended
    r = call(node, 0, 7, produce_values(zstd))
    assert int(r.responses[0].partition_responses[0].error_code) == 0
    fetch = request_values(1) | {"max_wait": 0}
    fetch["topics"] = [fetch["topics"][0] | {"partitions": [fetch["topics"][0]["partitions"][0]]}]
    old = call(node, 1, 9, fetch).responses[0].partitions[0]
    assert (int(old.error_code), old.records) == (76, b"")
    new = call(node, 1, 10, fetch).responses[0].partitions[0]
    assert int(new.error_code) == 0 and new.records


def test_fetch_answers_whole_batches_within_max_bytes_and_partition_max_bytes():
    """KIP-74 as Kafka's log read: both limits bind every partition (the first too), a
    batch that does not fit whole is left for the next Fetch, and only the response's
    first data may cross a limit, by its first batch alone (progress). librdkafka drops
    an answer larger than fetch.max.bytes + 512 (its 0082 test: two 900 KiB batches of
    one partition under fetch.max.bytes=1000000 were answered together)."""
    node = MemoryNode()
    batch = make_batch([b"x" * 600])
    for topic in ("t", "u"):
        for _ in range(3):
            r = call(node, 0, 9, produce_values(batch, topic=topic))
            assert int(r.responses[0].partition_responses[0].error_code) == 0

    def fetch(max_bytes: int, partition_max: int) -> dict[str, int]:
        values = request_values(1) | {"max_wait": 0, "max_bytes": max_bytes}
        values["topics"] = [
            {
                "topic": name,
                "topic_id": uuid.UUID(int=0),
                "partitions": [
                    values["topics"][0]["partitions"][0] | {"partition_max_bytes": partition_max}
                ],
            }
            for name in ("t", "u")
        ]
        resp = call(node, 1, 12, values)
        out = {}
        for t in resp.responses:
            (p,) = t.partitions
            assert int(p.error_code) == 0
            out[t.topic] = len(p.records)
        return out

    n = len(batch)
    assert fetch(1 << 20, 1 << 20) == {"t": 3 * n, "u": 3 * n}
    assert fetch(2 * n + 10, 1 << 20) == {"t": 2 * n, "u": 0}  # never past max_bytes
    assert fetch(1 << 20, n + 10) == {"t": n, "u": n}  # each partition's own limit
    assert fetch(10, 1 << 20) == {"t": n, "u": 0}  # the first batch alone crosses it
    assert fetch(1 << 20, 10) == {"t": n, "u": 0}  # ... either limit


def test_create_topics_answers_a_name_given_twice_invalid_request_and_creates_the_rest():
    node = MemoryNode()
    values = request_values(19)
    one = values["topics"][0]
    values["topics"] = [one, one | {"name": "other"}, one]
    answers = [(t.name, int(t.error_code)) for t in call(node, 19, 5, values).topics]
    assert answers == [("t", 42), ("other", 0), ("t", 42)]  # in the request's order
    assert node.fsm.topic("t") is None and node.fsm.topic("other") is not None


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_on_the_leader_and_elsewhere(version):
    """__cluster_metadata-0 only; the leader describes its quorum, a node that is not the
    leader and cannot relay answers NOT_LEADER_OR_FOLLOWER, another partition
    UNKNOWN_TOPIC_OR_PARTITION (Kafka's KafkaRaftClient answers)."""
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    values = request_values(55)
    values["topics"] = [
        {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]},
        {"topic_name": "t", "partitions": [{"partition_index": 0}]},
    ]
    r = call(node, 55, version, values)
    assert int(r.error_code) == 0
    meta, other = r.topics
    p = meta.partitions[0]
    assert (int(p.error_code), p.leader_id, p.leader_epoch) == (0, node.node_id, node.term)
    assert p.high_watermark == len(node.log.entries) > 0
    assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [
        (b, p.high_watermark) for b in sorted(node.brokers)
    ]
    assert list(p.observers) == []
    assert int(other.partitions[0].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    if version >= 2:
        assert sorted(n.node_id for n in r.nodes) == sorted(node.brokers)
    follower = MemoryNode(node_id=2, leader_id=1)
    r = call(follower, 55, version, request_values(55))
    assert int(r.topics[0].partitions[0].error_code) == 6  # NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_with_one_group(version):
    """One group: no preferred leader per partition, so nothing to elect while it has a
    leader; an unknown partition UNKNOWN_TOPIC_OR_PARTITION; v1+ refuses an election type
    that is neither PREFERRED nor UNCLEAN with INVALID_REQUEST at the top level."""
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))
    values = request_values(43)
    values["topic_partitions"] = [{"topic": "t", "partitions": [0, 7]}]
    r = call(node, 43, version, values)
    got = {
        (x.topic, p.partition_id): int(p.error_code)
        for x in r.replica_election_results
        for p in x.partition_result
    }
    assert got == {("t", 0): 84, ("t", 7): 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    if version >= 1:
        r = call(node, 43, version, values | {"election_type": 1})
        assert int(r.replica_election_results[0].partition_result[0].error_code) == 84
        r = call(node, 43, version, values | {"election_type": 5})
        assert int(r.error_code) == 42 and not r.replica_election_results  # INVALID_REQUEST
    # null: every partition off its preferred leader; one group has none such
    r = call(node, 43, version, values | {"topic_partitions": None})
    assert list(r.replica_election_results) == []


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_is_empty_with_kafka_s_filter_checks(version):
    node = MemoryNode()
    r = call(node, 66, version)
    assert (int(r.error_code), list(r.transaction_states)) == (0, [])
    assert list(r.unknown_state_filters) == ["Bogus"]
    if version >= 2:
        bad = request_values(66) | {"transactional_id_pattern": "tx-(["}
        assert int(call(node, 66, version, bad).error_code) == 128  # INVALID_REGULAR_EXPRESSION
        ok = request_values(66) | {"transactional_id_pattern": "tx-.*"}
        assert int(call(node, 66, version, ok).error_code) == 0


def test_describe_transactions_finds_none():
    r = call(MemoryNode(), 65, 0)
    got = [(s.transactional_id, int(s.error_code), s.producer_id) for s in r.transaction_states]
    assert got == [("tx-a", 105, 0), ("tx-b", 105, 0)]  # TRANSACTIONAL_ID_NOT_FOUND


def test_list_config_resources_by_type():
    node = MemoryNode()
    node.apply(commands.encode_create_topic("t", 1, uuid.uuid4()))

    def listed(version: int, types: list[int]) -> tuple[int, list[tuple[int, str]]]:
        r = call(node, 74, version, {"resource_types": types})
        got = [(int(c.resource_type), c.resource_name) for c in r.config_resources]
        return int(r.error_code), got

    assert listed(1, [2, 4]) == (0, [(2, "t"), (4, "1"), (4, "2")])
    assert listed(1, []) == (0, [(2, "t"), (4, "1"), (4, "2"), (8, "1"), (8, "2")])
    assert listed(1, [32, 16]) == (0, [])  # no group or client-metrics configs here
    assert listed(1, [3])[0] == 42  # INVALID_REQUEST: Kafka lists no configs for it
    assert listed(0, []) == (0, [])  # v0: client metrics only
