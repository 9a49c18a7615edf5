"""Partition groups on real processes (cluster.partition_groups on): 5 `raftsink serve`
nodes, a topic with replication factor 3 over 12 partitions, each its own Raft group.

- Metadata: 3 replicas per partition, leaders on several nodes;
- an idempotent acks=all confluent-kafka producer writes while the node leading the most
  data groups is killed -9; every acknowledged record is read back exactly once (dense
  offsets, no duplicate), through a consumer bootstrapped on every live node;
- the killed node's groups get new leaders within a deadline (the time is printed);
- bad input: replication factor above the node count -> INVALID_REPLICATION_FACTOR; a
  Produce to a node that hosts no replica of the partition -> NOT_LEADER_OR_FOLLOWER
  naming the partition's current leader (the leaders table).
Waits are on conditions with deadlines; the random choices print their seed."""

from __future__ import annotations

import asyncio
import collections
import os
import random
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from sink.process_cluster import SinkProcessCluster  # noqa: E402
from tests.helpers.kafka_wire import request  # noqa: E402
from tests.helpers.partition_groups import (  # noqa: E402
    create_topic,
    groups_cluster,
    isrs,
    kafka_port,
    metadata,
    read_back,
    wait_for,
)
from tests.unit.sink.batches import make_batch  # noqa: E402

TOPIC = "pg"
PARTITIONS = 12
RF = 3
NODES = 5
FAILOVER_DEADLINE_S = 30.0
"""Leadership of every group the killed node led must move within this (loaded CI; the
issue's target on a quiet machine is 2 s, printed, not asserted here)."""


def leaders_seen(cluster: SinkProcessCluster, node: int) -> dict[int, int]:
    try:
        return {p: v[0] for p, v in metadata(kafka_port(cluster, node), TOPIC).items()}
    except OSError:
        return {}


def data_groups_led(cluster: SinkProcessCluster) -> dict[int, int]:
    """node -> data groups it leads now (its read API Status; waits until every live
    node answers: a Status can time out on a loaded machine)."""
    out: dict[int, int] = {}

    def ask() -> bool:
        for i in cluster.alive():
            if i not in out:
                st = asyncio.run(cluster.status(i, timeout=5.0))
                if st is not None:
                    out[i] = st["data_groups"]["leading"]
        return len(out) == len(cluster.alive())

    wait_for(ask, 60, lambda: f"a Status from every node: {out}")
    return out


def produce_v10(port: int, topic: str, partition: int):
    """One Produce v10 (KIP-951 current_leader) of one record to node at port."""
    resp = request(
        port,
        0,
        10,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [{"index": partition, "records": make_batch([b"x"])}],
                }
            ],
        },
    )
    return resp.responses[0].partition_responses[0]


@pytest.fixture
def cluster(tmp_path):
    with groups_cluster(str(tmp_path), NODES) as c:
        yield c


def test_five_nodes_rf3_kill_the_busiest_leader_every_ack_read_once(cluster):
    seed = int(os.environ.get("RAFTSINK_PG_SEED", random.randrange(2**32)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    create_topic(cluster, TOPIC, PARTITIONS, RF)

    def placed() -> bool:
        seen = metadata(kafka_port(cluster, 1), TOPIC)
        return len(seen) == PARTITIONS and all(
            lead > 0 and len(reps) == RF for lead, _, reps in seen.values()
        )

    wait_for(placed, 60, lambda: f"every partition led: {metadata(kafka_port(cluster, 1), TOPIC)}")
    # A new group's leadership goes to its preferred replica (striped over the nodes).
    wait_for(
        lambda: len(set(leaders_seen(cluster, 1).values())) >= 3,
        60,
        lambda: f"leaders on 3+ nodes: {leaders_seen(cluster, 1)}",
    )
    md = metadata(kafka_port(cluster, 1), TOPIC)
    assert all(len(set(reps)) == RF for _, _, reps in md.values()), md
    print("leaders:", {p: v[0] for p, v in sorted(md.items())})

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "socket.timeout.ms": 5_000,
            "metadata.max.age.ms": 1_000,
        }
    )
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            while True:
                try:
                    producer.produce(
                        TOPIC,
                        value=f"v{sent}".encode(),
                        partition=sent % PARTITIONS,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            producer.poll(0)

    def total_acked() -> int:
        return sum(len(v) for v in acked.values())

    send(rng.randint(1_500, 3_000))
    target = min(sent, rng.randint(300, 1_000))
    wait_for(lambda: total_acked() >= target, 60, lambda: f"{total_acked()} acks", producer.poll)

    led = data_groups_led(cluster)
    victim = max(sorted(led), key=lambda n: led[n])
    before = leaders_seen(cluster, 1 if victim != 1 else 2)
    victim_parts = sorted(p for p, lead in before.items() if lead == victim)
    print(f"data groups led per node {led}; kill -9 node {victim} (partitions {victim_parts})")
    cluster.kill(victim)
    killed_at = time.monotonic()
    send(rng.randint(1_500, 3_000))  # keep producing through the elections
    survivor = min(n for n in cluster.alive())

    def moved() -> bool:
        now = leaders_seen(cluster, survivor)
        return all(now.get(p, -1) not in (-1, victim) for p in victim_parts)

    wait_for(
        moved,
        FAILOVER_DEADLINE_S,
        lambda: f"new leaders of {victim_parts}: {leaders_seen(cluster, survivor)}",
        producer.poll,
    )
    print(f"leadership of node {victim}'s groups moved in {time.monotonic() - killed_at:.2f} s")

    # Kafka's ISR is time-based: the killed node leaves every partition's ISR, in the
    # Metadata of every live node (the hosting ones' own view; the others' learnt
    # from the leaders-table polls), and every other replica stays in it.
    def isr_without_victim() -> bool:
        for n in cluster.alive():
            seen = isrs(cluster.peers[n].kafka, TOPIC)
            want = {p: sorted(set(reps) - {victim}) for p, (_, _, reps) in md.items()}
            if seen != want:
                return False
        return True

    wait_for(
        isr_without_victim,
        FAILOVER_DEADLINE_S,
        lambda: (
            f"ISRs without node {victim}: "
            + str({n: isrs(cluster.peers[n].kafka, TOPIC) for n in cluster.alive()})
        ),
        producer.poll,
    )
    send(1_000)
    assert producer.flush(120) == 0, "records still in flight after 120 s"
    assert not failed, f"{len(failed)} deliveries failed, first: {failed[0]}"
    expected = {p: len(acked[p]) for p in range(PARTITIONS)}
    assert sum(expected.values()) == sent, "every record was acknowledged"

    live = ",".join(cluster.peers[i].kafka for i in cluster.alive())
    got = read_back(live, TOPIC, expected, 90, "pg-check")
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"
        values = [v for _, v in got[p]]
        assert len(values) == len(set(values)), f"partition {p}: duplicates, seed={seed}"
        assert sorted(values) == sorted(v for _, v in acked[p]), f"partition {p}: acks differ"
    print(f"sent={sent} acked={sum(expected.values())} per partition={expected}")

    # Restart: the killed node reopens its groups from disk before its Kafka port opens,
    # and its replicas catch up (it serves reads of its partitions again).
    placed_on_victim = sum(victim in reps for _, _, reps in md.values())
    cluster.start(victim)
    asyncio.run(cluster.wait_ready(timeout=120))
    assert f"sink.groups node={victim} reopened {placed_on_victim} data groups" in (
        cluster.log_tail(victim, 200_000)
    )
    mine = [p for p, (_, _, reps) in md.items() if victim in reps]

    def caught_up() -> bool:
        st = asyncio.run(cluster.status(victim)) or {}
        hosted = (st.get("data_groups") or {}).get("hosted")
        if hosted != placed_on_victim:
            return False
        reads = Consumer({"bootstrap.servers": cluster.peers[victim].kafka, "group.id": "x"})
        try:
            ends = [reads.get_watermark_offsets(TopicPartition(TOPIC, p), 5)[1] for p in mine]
        except KafkaException:
            return False
        finally:
            reads.close()
        return ends == [expected[p] for p in mine]

    wait_for(caught_up, 60, f"node {victim} hosting {placed_on_victim} groups, caught up")
    every = {p: sorted(reps) for p, (_, _, reps) in md.items()}
    wait_for(
        lambda: all(isrs(cluster.peers[n].kafka, TOPIC) == every for n in cluster.alive()),
        60,
        lambda: f"every replica in sync again: {isrs(cluster.peers[1].kafka, TOPIC)}",
    )

    # Leadership spreads again: the balancer drivers hand the restarted node back the
    # groups it is preferred for (transfers only), until no node leads more than
    # ceil(P/N) + 1 and the restarted one leads some.
    bound = -(-PARTITIONS // NODES) + 1

    def spread() -> bool:
        led = collections.Counter(leaders_seen(cluster, victim).values())
        return led[victim] > 0 and max(led.values()) <= bound

    wait_for(spread, 90, lambda: f"leaders per node: {leaders_seen(cluster, victim)}")
    print(
        "leaders after the balancer:", collections.Counter(leaders_seen(cluster, victim).values())
    )


def test_bad_input_rf_above_nodes_and_produce_to_a_node_without_a_replica(cluster):
    with pytest.raises(KafkaException) as err:
        create_topic(cluster, "too-many", 2, NODES + 1)
    assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICATION_FACTOR
    create_topic(cluster, TOPIC, PARTITIONS, RF)

    def placed() -> bool:
        seen = metadata(kafka_port(cluster, 1), TOPIC)
        return len(seen) == PARTITIONS and all(lead > 0 for lead, _, _ in seen.values())

    wait_for(placed, 60, "every partition led")
    replicas = {p: reps for p, (_, _, reps) in metadata(kafka_port(cluster, 1), TOPIC).items()}
    partition = 0
    outsider = min(n for n in cluster.peers if n not in replicas[partition])
    port = kafka_port(cluster, outsider)

    def leader_by_replicas() -> int:
        lead, _, _ = metadata(kafka_port(cluster, replicas[partition][0]), TOPIC)[partition]
        return lead

    # The outsider learns the leader from the replicas (its leaders table, polled about
    # once a second): its Produce answer (KIP-951 current_leader) and its Metadata name it.
    # Until it has learnt it, current_leader is -1 (Metadata names the preferred replica).
    answers = []

    def refused_naming_the_leader() -> bool:
        r = produce_v10(port, TOPIC, partition)
        answers.append(r)
        assert r.error_code == 6, r  # NOT_LEADER_OR_FOLLOWER, never written here
        return r.current_leader.leader_id == leader_by_replicas() > 0

    wait_for(refused_naming_the_leader, 30, lambda: f"node {outsider}: {answers[-1:]}")
    # The leader itself takes the same request. The leader balancer may move the partition
    # between the lookup and the request (CI: NOT_LEADER with leader -1, mid-transfer), so
    # each try asks the leader the replicas name then.
    taken = []

    def the_leader_takes_it() -> bool:
        lead = leader_by_replicas()
        r = produce_v10(kafka_port(cluster, lead), TOPIC, partition) if lead > 0 else None
        taken.append((lead, r))
        return r is not None and r.error_code == 0

    wait_for(the_leader_takes_it, 30, lambda: f"the leader's answers: {taken[-3:]}")
    lead = taken[-1][0]

    # Graceful stop (SIGTERM) of that leader: its data groups hand off to other replicas
    # (how many make it within node.shutdown_handoff_ms depends on the machine: printed),
    # and partition 0 is led elsewhere afterwards.
    led_before = asyncio.run(cluster.status(lead, timeout=5.0))["data_groups"]["leading"]
    assert cluster.terminate(lead) == 0
    line = [x for x in cluster.log_tail(lead, 200_000).splitlines() if "handed off" in x]
    assert line and "data groups" in line[-1], cluster.log_tail(lead, 3000)
    moved = int(line[-1].split("handed off ")[1].split()[0])
    assert 0 <= moved <= led_before
    print(f"SIGTERM: node {lead} handed off {moved} of the {led_before} data groups it led")
    other = replicas[partition][0] if replicas[partition][0] != lead else replicas[partition][1]
    wait_for(
        lambda: metadata(kafka_port(cluster, other), TOPIC)[partition][0] not in (-1, lead),
        30,
        "partition 0 led by another replica",
    )
    cluster.start(lead)
    asyncio.run(cluster.wait_ready(timeout=120))

    # DeleteTopics: every node removes (and deletes) its replicas of the topic's groups.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.delete_topics([TOPIC])[TOPIC].result(timeout=60)
    removed: dict[int, dict] = {}

    def all_removed() -> bool:
        for i in cluster.alive():
            st = asyncio.run(cluster.status(i, timeout=5.0))
            if st is not None:
                removed[i] = st["data_groups"]
        return len(removed) == NODES and all(
            g["hosted"] == 0 and g["removed"] == g["started"] for g in removed.values()
        )

    wait_for(all_removed, 60, lambda: f"groups removed everywhere: {removed}")
    # A node whose controller replica applied the creation and the deletion in one
    # reconcile round never starts those groups, so fewer than P*RF may be removed.
    assert sum(g["removed"] for g in removed.values()) <= PARTITIONS * RF
    for i, n in cluster.nodes.items():
        assert os.listdir(os.path.join(n.data_dir, "groups")) == ["0"], i
