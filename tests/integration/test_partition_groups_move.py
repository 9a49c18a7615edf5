"""Moving a partition's replicas on real processes: 4 `raftsink serve` nodes with
partition groups, a topic of one partition at replication factor 3, moved off the node
that leads it onto the fourth with `raftsink partitions move --wait` while an idempotent
acks=all producer keeps writing.

- the CLI answers the plan (add the new node as a learner, promote it, hand leadership
  over, remove the old node) and returns once the move is done;
- afterwards every node's Metadata names the new replica list, the old node hosts no
  replica and its group directory is gone, the new node's replica has applied
  everything the leader committed;
- every acknowledged record is read back once, in order, with dense offsets;
- bad moves are refused with a reason: an unknown node, two replicas on one node, an
  unknown partition;
- the same through Kafka's AlterPartitionReassignments / ListPartitionReassignments with
  kafka-python's admin client (what kafka-reassign-partitions sends): a move, a cancel
  with nothing to cancel, a bad list, and the list empty once the move is done.
Waits are on conditions with deadlines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402

from tests.helpers.partition_groups import (  # noqa: E402
    create_topic,
    groups_cluster,
    kafka_port,
    metadata,
    read_back,
    wait_for,
)

TOPIC = "moving"
NODES = 4


def partitions_cli(cluster, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    nodes = ",".join(p.read_api for _, p in sorted(cluster.peers.items()))
    return subprocess.run(
        [sys.executable, "-m", "sink.cli", "partitions", *args, "--nodes", nodes],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.getcwd(),
    )


def group_row(cluster, node: int) -> dict | None:
    st = asyncio.run(cluster.status(node, timeout=5.0))
    if st is None:
        return None
    rows = (st.get("data_groups") or {}).get("groups", [])
    return next((r for r in rows if r["topic"] == TOPIC), {})


@pytest.fixture(scope="module")
def groups4(tmp_path_factory):
    with groups_cluster(str(tmp_path_factory.mktemp("move")), NODES) as cluster:
        yield cluster


def test_move_a_partition_off_its_leader_while_producing(groups4):
    cluster = groups4
    create_topic(cluster, TOPIC, 1, 3)
    wait_for(
        lambda: metadata(kafka_port(cluster, 1), TOPIC).get(0, (-1,))[0] > 0,
        60,
        "a leader for the partition",
    )
    leader, _, replicas = metadata(kafka_port(cluster, 1), TOPIC)[0]
    (newcomer,) = set(range(1, NODES + 1)) - set(replicas)
    target = [newcomer] + [n for n in replicas if n != leader]
    print(f"leader {leader}, replicas {replicas} -> {target}")

    # Refusals first: nothing may change.
    bad = partitions_cli(cluster, "move", TOPIC, "0", "--replicas", f"{target[0]},9,{leader}")
    assert bad.returncode == 1 and "unknown node" in bad.stderr, bad.stderr
    twice = partitions_cli(cluster, "move", TOPIC, "0", "--replicas", "1,1,2")
    assert twice.returncode == 1 and "named twice" in twice.stderr, twice.stderr
    nope = partitions_cli(cluster, "move", TOPIC, "5", "--replicas", "1,2,3")
    assert nope.returncode == 1 and "no data group" in nope.stderr, nope.stderr
    listed = partitions_cli(cluster, "moves")
    assert listed.returncode == 0 and "no move in progress" in listed.stdout, listed

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "metadata.max.age.ms": 1_000,
        }
    )
    acked: list[bytes] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        (failed.append(str(err)) if err is not None else acked.append(msg.value()))

    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        while not stop.is_set():
            producer.produce(TOPIC, value=f"v{sent[0]}".encode(), on_delivery=on_delivery)
            sent[0] += 1
            producer.poll(0.002)

    for _ in range(300):
        producer.produce(TOPIC, value=f"v{sent[0]}".encode(), on_delivery=on_delivery)
        sent[0] += 1
    assert producer.flush(60) == 0
    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    try:
        moved = partitions_cli(
            cluster, "move", TOPIC, "0", "--replicas", ",".join(map(str, target)), "--wait"
        )
    finally:
        stop.set()
        writer.join(30)
    assert moved.returncode == 0, moved.stderr
    print(moved.stdout)
    assert "done" in moved.stdout and f"add_learner {newcomer}" in moved.stdout
    assert producer.flush(120) == 0, "records still in flight after 120 s"
    assert not failed, f"{len(failed)} deliveries failed, first: {failed[0]}"
    assert len(acked) == sent[0] > 300

    def moved_everywhere() -> bool:
        return all(
            metadata(kafka_port(cluster, n), TOPIC).get(0, (0, 0, []))[2] == target
            for n in cluster.alive()
        )

    wait_for(moved_everywhere, 60, lambda: f"Metadata {metadata(kafka_port(cluster, 1), TOPIC)}")

    # The old node let go of the group, data and all; the new one has everything.
    wait_for(lambda: group_row(cluster, leader) == {}, 60, "the old node to drop its replica")
    groups_dir = os.path.join(cluster.nodes[leader].data_dir, "groups")

    def data_groups_on_disk() -> list[str]:
        return [d for d in os.listdir(groups_dir) if d != "0" and d.isdigit()]

    # The host stops listing a removed group before its directory is deleted (closed
    # first, then removed in a thread: RaftHost.remove_group), so wait for that too.
    wait_for(
        lambda: not data_groups_on_disk(), 60, lambda: f"left on disk: {data_groups_on_disk()}"
    )

    def caught_up() -> bool:
        row = group_row(cluster, newcomer)
        return bool(row) and row["role"] != "learner" and row["applied"] >= row["commit"] > 0

    wait_for(caught_up, 60, lambda: f"node {newcomer}: {group_row(cluster, newcomer)}")

    got = read_back(cluster.bootstrap_servers, TOPIC, {0: len(acked)}, 60, "mv-check")[0]
    assert [o for o, _ in got] == list(range(len(got))), "offsets not dense"
    values = [v for _, v in got]
    assert len(values) == len(set(values)) == len(acked), "lost or duplicated records"
    assert sorted(values) == sorted(acked)


def test_kafka_reassignment_apis_move_a_partition(groups4):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

    cluster = groups4
    topic = "reassigned"
    create_topic(cluster, topic, 2, 3)
    wait_for(
        lambda: (
            all(v[0] > 0 for v in metadata(kafka_port(cluster, 1), topic).values())
            and len(metadata(kafka_port(cluster, 1), topic)) == 2
        ),
        60,
        "leaders for both partitions",
    )
    _, _, replicas = metadata(kafka_port(cluster, 1), topic)[1]
    (spare,) = set(range(1, NODES + 1)) - set(replicas)
    target = [replicas[1], replicas[2], spare]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=60_000)
    try:
        nothing = admin.alter_partition_reassignments({KTP(topic, 0): None})
        assert nothing[KTP(topic, 0)] is NoReassignmentInProgressError, nothing
        bad = admin.alter_partition_reassignments({KTP(topic, 1): [replicas[0], 99, spare]})
        assert bad[KTP(topic, 1)] is InvalidReplicationAssignmentError, bad
        ok = admin.alter_partition_reassignments({KTP(topic, 1): target})
        assert ok[KTP(topic, 1)] is None, ok

        def done() -> bool:
            return (
                admin.list_partition_reassignments() == {}
                and metadata(kafka_port(cluster, 1), topic)[1][2] == target
            )

        wait_for(done, 90, lambda: f"moving: {admin.list_partition_reassignments()}")
        assert (
            metadata(kafka_port(cluster, 1), topic)[0][2]
            == metadata(kafka_port(cluster, 2), topic)[0][2]
        ), "the other partition did not move"

        # A move and its cancel at once: either the cancel caught it (the partition goes
        # back) or the move was done first (nothing to cancel); either way every node
        # ends agreeing, and only the replicas host the group.
        _, _, before = metadata(kafka_port(cluster, 1), topic)[0]
        (other,) = set(range(1, NODES + 1)) - set(before)
        moved = [other, before[1], before[2]]
        assert admin.alter_partition_reassignments({KTP(topic, 0): moved})[KTP(topic, 0)] is None
        cancel = admin.alter_partition_reassignments({KTP(topic, 0): None})[KTP(topic, 0)]
        assert cancel in (None, NoReassignmentInProgressError), cancel
        final = before if cancel is None else moved

        def settled() -> bool:
            return admin.list_partition_reassignments() == {} and all(
                metadata(kafka_port(cluster, n), topic)[0][2] == final for n in cluster.alive()
            )

        wait_for(
            settled, 90, lambda: f"settling on {final}: {metadata(kafka_port(cluster, 1), topic)}"
        )

        def hosts() -> set[int]:
            out = set()
            for n in cluster.alive():
                st = asyncio.run(cluster.status(n, timeout=5.0)) or {}
                rows = (st.get("data_groups") or {}).get("groups", [])
                if any(r["topic"] == topic and r["partition"] == 0 for r in rows):
                    out.add(n)
            return out

        wait_for(lambda: hosts() == set(final), 60, lambda: f"hosting {hosts()} != {final}")
        print(f"cancel: {cancel}, settled on {final}")
    finally:
        admin.close()
