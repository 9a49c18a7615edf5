"""Hand-rolled Produce/Fetch responses are byte-identical to kio for every served version."""

import uuid

import pytest

from sink.kafka.handlers import ADVERTISED, SUPPORTED
from sink.kafka.handlers.api_versions import encode_api_versions
from sink.kafka.protocol import response_schema
from sink.kafka.protocol.build import build, encode_entity
from sink.kafka.protocol.encoders import (
    FetchPartition,
    ProducePartition,
    encode_fetch,
    encode_produce,
)


def kio_produce(version, corr, topics, endpoints):
    vals = {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": p.error,
                        "base_offset": p.base_offset,
                        "log_start_offset": p.log_start_offset,
                        "log_append_time": None,
                        "record_errors": [],
                        "error_message": None,
                        "current_leader": {
                            "leader_id": p.leader_id,
                            "leader_epoch": p.leader_epoch,
                        },
                    }
                    for p in parts
                ],
            }
            for name, parts in topics
        ],
        "throttle_time": 0,
        "node_endpoints": [
            {"node_id": n, "host": h, "port": port, "rack": None} for n, h, port in endpoints
        ],
    }
    return encode_entity(corr, build(response_schema(0, version), vals))


PRODUCE_CASES = [
    ([("t1", [ProducePartition(0, 0, 5, 0)])], []),
    (
        [("t1", [ProducePartition(0, 0, 5, 0), ProducePartition(1, 6, -1, -1, 2, 7)])],
        [(2, "host-2", 9092)],
    ),
    ([("a", [ProducePartition(3, 45, -1, -1)]), ("bé", [ProducePartition(0, 0, 1 << 40, 17)])], []),
    ([], []),
]


@pytest.mark.parametrize("version", range(SUPPORTED[0][0], SUPPORTED[0][1] + 1))
@pytest.mark.parametrize("case", range(len(PRODUCE_CASES)))
def test_produce_identical_to_kio(version, case):
    topics, endpoints = PRODUCE_CASES[case]
    assert encode_produce(version, 42, topics, endpoints) == kio_produce(
        version, 42, topics, endpoints
    )


def kio_fetch(version, corr, topics, endpoints=()):
    vals = {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "node_endpoints": [
            {"node_id": n, "host": h, "port": port, "rack": None} for n, h, port in endpoints
        ],
        "responses": [
            {
                "topic": name,
                "topic_id": name,
                "partitions": [
                    {
                        "partition_index": p.index,
                        "error_code": p.error,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.high_watermark,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"".join(bytes(x) for x in p.batches),
                        "current_leader": {
                            "leader_id": p.leader_id,
                            "leader_epoch": p.leader_epoch,
                        },
                    }
                    for p in parts
                ],
            }
            for name, parts in topics
        ],
    }
    return encode_entity(corr, build(response_schema(1, version), vals))


FETCH_CASES = [
    [
        (
            "tt",
            [
                FetchPartition(0, 0, 10, 2, [b"abc", memoryview(b"defg")], 7),
                FetchPartition(1, 1, 3, 0, [], 0),
            ],
        )
    ],
    [("x", [FetchPartition(0, 0, 0, 0, [], 0)]), ("y", [FetchPartition(2, 3, -1, -1, [], 0)])],
    [("big", [FetchPartition(0, 0, 99, 0, [b"z" * 300], 300)])],  # multi-byte varint length
    [],
]


@pytest.mark.parametrize("version", range(SUPPORTED[1][0], SUPPORTED[1][1] + 1))
@pytest.mark.parametrize("case", range(len(FETCH_CASES)))
def test_fetch_identical_to_kio(version, case):
    topics = FETCH_CASES[case]
    if version >= 13:  # topics keyed by id (KIP-516)
        topics = [(uuid.uuid5(uuid.NAMESPACE_DNS, name), parts) for name, parts in topics]
    assert b"".join(encode_fetch(version, 7, topics)) == kio_fetch(version, 7, topics)


@pytest.mark.parametrize("version", [v for v in range(12, SUPPORTED[1][1] + 1)])
def test_fetch_leader_hints_identical_to_kio(version):
    """KIP-951 (v16+): current_leader per partition and the leader's endpoint."""
    key = uuid.UUID(int=7) if version >= 13 else "t"
    topics = [(key, [FetchPartition(0, 6, -1, -1, [], 0, 2, 9), FetchPartition(1, 0, 5, 0, [], 0)])]
    endpoints = [(2, "host-2", 9092)]
    hints = version >= 16
    got = b"".join(encode_fetch(version, 7, topics, node_endpoints=endpoints))
    if not hints:  # not written before v16
        topics = [(key, [p._replace(leader_id=-1, leader_epoch=-1) for p in topics[0][1]])]
        endpoints = []
    assert got == kio_fetch(version, 7, topics, endpoints)


def test_api_versions_fallback_is_v0_body_with_error_35():
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.serial import entity_reader

    data = encode_api_versions(0, 9, ADVERTISED, 35)
    assert data[:4] == b"\x00\x00\x00\x09"  # response header v0
    resp, _ = entity_reader(ApiVersionsResponse)(data, 4)
    assert resp.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == ADVERTISED


def test_advertised_apis_gate_librdkafka_features():
    assert SUPPORTED[1][1] >= 10  # zstd needs Fetch >= 10
    assert 10 in SUPPORTED  # lz4 needs FindCoordinator
    assert 22 in SUPPORTED  # idempotence needs InitProducerId
    # KIP-320: librdkafka sends OffsetForLeaderEpoch v2 to validate positions after a leader
    # change, the Java client needs a maximum >= v3 (kafka-protocol notes); never telemetry.
    assert SUPPORTED[23][0] <= 2 and SUPPORTED[23][1] >= 3
    assert 71 not in SUPPORTED
