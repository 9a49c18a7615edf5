"""An idempotent producer that starts while no leader can allocate producer ids
produces once a majority is back (a real 3-node in-process cluster, real clients).

InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS then, which every client
retries as is. It used to answer NOT_COORDINATOR, and kafka-python 3.0 answers
that by looking a transaction coordinator up with a null key: a malformed
FindCoordinator v4 the node closes the connection on, again and again, so the
producer never produced, also after the cluster had a leader again (found by CI:
test_kafka_clients.py's kafka-python test, when a follower did not yet know the
leader).
"""

from __future__ import annotations

import struct
import time

import pytest

from sink.kafka.handlers import init_producer_id
from sink.kafka.protocol.errors import ErrorCode
from tests.helpers.kafka_wire import request, topic_ready_at
from tests.helpers.sink_cluster import SinkCluster

kafka = pytest.importorskip("kafka")
AdminClient = pytest.importorskip("confluent_kafka.admin").AdminClient
NewTopic = pytest.importorskip("confluent_kafka.admin").NewTopic

INIT_PRODUCER_ID = 22
TOPIC = "no-leader"


@pytest.fixture
def lone_follower(tmp_path, monkeypatch):
    """A started cluster with the leader and one follower stopped: (cluster, the
    remaining node's id, a list of the error codes InitProducerId answered)."""
    answered: list[ErrorCode] = []
    encode = init_producer_id._encode

    def spy(version: int, corr: int, err: ErrorCode, pid: int, epoch: int) -> bytes:
        answered.append(err)
        return encode(version, corr, err, pid, epoch)

    # Observes the real handler's answers; changes nothing it does.
    monkeypatch.setattr(init_producer_id, "_encode", spy)
    c = SinkCluster(str(tmp_path))
    c.start()
    try:
        lead = c.leader_id()
        # The topic exists first: a producer's send() waits for the topic's metadata.
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        # The node left alone must know the topic too (a follower learns it on apply).
        deadline = time.monotonic() + 30
        while not all(topic_ready_at(p, TOPIC, 1) for p in c.ports.values()):
            assert time.monotonic() < deadline, f"{TOPIC} not known to every node"
            time.sleep(0.05)
        rest = [i for i in c.ids if i != lead]
        c.call(c.stop_node(rest[1]))
        c.call(c.stop_node(lead))
        yield c, rest[0], answered
    finally:
        c.stop()


def test_init_producer_id_without_a_leader_is_retriable_in_place(lone_follower):
    c, node, _answered = lone_follower
    c.wait_for(lambda: not c.nodes[node].service.leader_ready(), what="no ready leader")
    resp = request(
        c.ports[node],
        INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert resp.error_code == ErrorCode.coordinator_load_in_progress
    assert (resp.producer_id, resp.producer_epoch) == (-1, -1)


def test_kafka_python_idempotent_producer_started_without_a_leader(lone_follower):
    c, node, answered = lone_follower
    prod = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{c.ports[node]}",
        enable_idempotence=True,
        acks="all",
        retry_backoff_ms=50,
    )
    try:
        futs = [prod.send(TOPIC, key=b"k%d" % i, value=struct.pack(">I", i)) for i in range(20)]
        # The producer has asked and been refused at least once before a majority returns.
        c.wait_for(
            lambda: any(e != ErrorCode.none for e in answered), what="a refused InitProducerId"
        )
        for i in c.ids:
            if i not in c.nodes:
                c.call(c.start_node(i))
        prod.flush(60)
        offsets = [f.get(timeout=1).offset for f in futs]
    finally:
        prod.close(5)
    assert offsets == list(range(20))
    assert ErrorCode.not_coordinator not in answered
