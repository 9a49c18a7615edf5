"""ElectLeaders on real `raftsink serve` processes with partition groups: a partition whose
leader moved off its preferred replica (that node was killed and came back; the leader
balancer is off, so nothing moves it back by itself) is handed back on request, sent to
a node that does not lead the partition (which passes it on to the leader), and with
librdkafka's AdminClient.elect_leaders; then there is nothing left to elect."""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers.kafka_wire import metadata_of, request
from tests.helpers.partition_groups import (
    create_topic,
    groups_cluster,
    kafka_port,
    metadata,
    wait_for,
)

TOPIC = "elect"
ELECT_LEADERS = 43


def elect(port: int, kind: int, partitions: list[int] | None, version: int = 2) -> dict:
    """(topic, partition) -> error code of one raw ElectLeaders at 127.0.0.1:port."""
    tps = None if partitions is None else [{"topic": TOPIC, "partitions": partitions}]
    values = {"election_type": kind, "topic_partitions": tps, "timeout": 30000}
    resp = request(port, ELECT_LEADERS, version, values)
    assert int(resp.error_code) == 0, resp
    return {
        (r.topic, int(p.partition_id)): (int(p.error_code), p.error_message)
        for r in resp.replica_election_results
        for p in r.partition_result
    }


def isr_at(port: int) -> list[int]:
    """Partition 0's ISR as the node at port answers Metadata."""
    for t in metadata_of(port, TOPIC).topics:
        for p in t.partitions:
            if p.partition_index == 0:
                return list(p.isr_nodes)
    return []


def _moved(answer: tuple[int, str | None], refusals: list) -> bool:
    """One ElectLeaders answer for partition 0: moved (True), or the one refusal a
    restarted preferred replica may meet for a moment, PREFERRED_LEADER_NOT_AVAILABLE with
    its reason (the leader's host can declare it down again while it starts: CI), which
    is asked again. ELECTION_NOT_NEEDED is the state asked for, reached by an election of
    its own: on a loaded machine the old leader can miss its beats and the preferred
    replica win the vote between the fixture's check and the request (eight copies beside
    busy loops: the first answer was 84); the caller checks Metadata after."""
    code, why = answer
    if code in (0, 84):
        return True
    assert code == 80 and why, answer  # PREFERRED_LEADER_NOT_AVAILABLE, saying why
    refusals.append(why)
    return False


@pytest.fixture
def off_preferred(tmp_path):
    """(cluster, partition 0's preferred replica, its leader now): that preferred replica
    was killed, another took the lead, and it is back and in sync."""
    with groups_cluster(str(tmp_path), 3, ["--cluster-leader-balance", "false"]) as c:
        create_topic(c, TOPIC, 3, 3)
        wait_for(
            lambda: (
                all(
                    lead == reps[0] for lead, _e, reps in metadata(kafka_port(c, 1), TOPIC).values()
                )
                and len(metadata(kafka_port(c, 1), TOPIC)) == 3
            ),
            60,
            "every partition led by its preferred replica",
        )
        _lead, _epoch, replicas = metadata(kafka_port(c, 1), TOPIC)[0]
        preferred = replicas[0]
        other = next(n for n in c.alive() if n != preferred)
        # On a loaded machine the new leader can lose its lead for a moment after the
        # restart (six copies beside busy loops: Metadata answered -1), and the preferred
        # replica may even win it back by itself (leader balancing is off, elections are
        # not): then kill it again.
        seen: dict = {}
        for _attempt in range(3):
            c.kill(preferred)
            wait_for(
                lambda: metadata(kafka_port(c, other), TOPIC)[0][0] not in (-1, preferred),
                60,
                "a new leader for partition 0",
            )
            c.start(preferred)

            def settled() -> bool:
                lead = seen["lead"] = metadata(kafka_port(c, other), TOPIC)[0][0]
                # In sync as the leader sees it (the leader's host hears from it again).
                return lead == preferred or (
                    lead != -1 and preferred in isr_at(kafka_port(c, lead))
                )

            wait_for(settled, 60, lambda: f"node {preferred} back in sync: {seen}")
            if seen["lead"] != preferred:
                break
        else:
            pytest.fail(f"node {preferred} took partition 0 back by itself three times")
        yield c, preferred, seen["lead"]


def test_elect_preferred_sent_to_a_node_that_does_not_lead(off_preferred):
    c, preferred, leader = off_preferred
    # The third node: neither the partition's leader nor its preferred replica.
    third = next(n for n in c.alive() if n not in (preferred, leader))
    refusals: list = []

    def elected() -> bool:
        got = elect(kafka_port(c, third), 0, [0, 9])
        assert got[(TOPIC, 9)][0] == 3, got  # UNKNOWN_TOPIC_OR_PARTITION
        return _moved(got[(TOPIC, 0)], refusals)

    wait_for(elected, 60, lambda: f"partition 0 moved; refusals {refusals}")
    wait_for(
        lambda: all(metadata(kafka_port(c, n), TOPIC)[0][0] == preferred for n in c.alive()),
        30,
        "every node naming the preferred replica as partition 0's leader",
    )
    # Nothing is left to elect: named, ELECTION_NOT_NEEDED; null, nothing listed.
    assert elect(kafka_port(c, leader), 0, [0])[(TOPIC, 0)][0] == 84
    assert elect(kafka_port(c, third), 0, None) == {}
    # UNCLEAN: Raft elects no unclean leader; the partitions have leaders.
    assert elect(kafka_port(c, third), 1, [0, 1, 2]) == {(TOPIC, p): (84, None) for p in range(3)}


def test_librdkafka_elect_leaders_through_the_restarted_replica(off_preferred):
    """librdkafka sends ElectLeaders to its controller: every node names itself, and here
    the client knows only the restarted preferred replica, whose replica of the quiesced
    group may not know its leader yet (CI: it answered "no leader now"); it sends the
    partition on to another replica, which knows."""
    c, preferred, _leader = off_preferred
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port(c, preferred)}"})
    refusals: list = []

    def elected() -> bool:
        fut = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)])
        result = fut.result(timeout=60)
        errors = {(tp.topic, tp.partition): err for tp, err in result.items()}
        assert set(errors) == {(TOPIC, 0)}, errors
        err = errors[(TOPIC, 0)]
        # Documented as KafkaException, delivered by confluent-kafka 2.16 as KafkaError.
        kerr = err.args[0] if isinstance(err, KafkaException) else err
        answer = (0, None) if kerr is None else (kerr.code(), kerr.str())
        return _moved(answer, refusals)

    wait_for(elected, 60, lambda: f"partition 0 moved; refusals {refusals}")
    wait_for(
        lambda: metadata(kafka_port(c, preferred), TOPIC)[0][0] == preferred,
        30,
        "the preferred replica leading partition 0",
    )
