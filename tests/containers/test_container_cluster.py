"""raftsink as a 3-container cluster (the project's image, testcontainers): Kafka clients
on the host and in other containers, SIGKILL of the leader container, a network partition
of the leader, and the Spark source reading from the containers.

Run: .venv/bin/python -m pytest tests/containers -v   (docker/setup.sh brings an engine up)
"""

from __future__ import annotations

import os
import random
import time

from confluent_kafka import Producer

from tests.containers.container_cluster import KAFKA_PORT, wait_for
from tests.containers.kafka_util import (
    AckingProducer,
    check_exactly_once,
    consume_all,
)

PARTITIONS = 3


def _seed(name: str) -> random.Random:
    seed = int(os.environ.get("RAFTSINK_CONTAINER_SEED", random.randrange(2**32)))
    print(f"{name}: seed={seed} (RAFTSINK_CONTAINER_SEED={seed} repeats the random choices)")
    return random.Random(seed)


def test_produce_and_consume_from_host_and_from_a_container(container_cluster, client_image):
    cluster = container_cluster
    # Metadata on the external listener advertises the host-side addresses.
    md = Producer({"bootstrap.servers": cluster.kafka_addr(2)}).list_topics(timeout=20)
    advertised = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    assert advertised == {i: cluster.kafka_addr(i) for i in cluster.nodes}, advertised

    prod = AckingProducer(cluster.bootstrap_servers, "host-topic", PARTITIONS)
    prod.send(3_000)
    prod.flush(60)
    assert not prod.failed, prod.failed[:3]
    assert prod.total_acked() == prod.sent
    expected = {p: len(v) for p, v in prod.acked.items()}
    got = consume_all(cluster.bootstrap_servers, "host-topic", expected)
    check_exactly_once(prod.acked, got)

    # A client inside the network uses the internal listener, which advertises node{i}:9092.
    script = (
        "from confluent_kafka import Producer\n"
        "p = Producer({'bootstrap.servers': 'node3:9092', 'enable.idempotence': True,"
        " 'acks': 'all'})\n"
        "md = p.list_topics(timeout=20)\n"
        "print(sorted(f'{b.host}:{b.port}' for b in md.brokers.values()))\n"
        "acked = []\n"
        "for i in range(100):\n"
        "    p.produce('host-topic', f'c{i}'.encode(), partition=0,"
        " on_delivery=lambda e, m: acked.append(e is None))\n"
        "assert p.flush(60) == 0 and all(acked) and len(acked) == 100, acked\n"
        "print('acked', len(acked))\n"
    )
    client = cluster.nodes[1].get_docker_client().client
    out = client.containers.run(
        client_image,  # the node image has no Kafka client: the base install only
        entrypoint=["python3", "-c", script],
        network=cluster.network.name,
        remove=True,
        labels={"org.testcontainers": "true"},
    ).decode()
    print(out)
    assert f"['node1:{KAFKA_PORT}', 'node2:{KAFKA_PORT}', 'node3:{KAFKA_PORT}']" in out, out
    assert "acked 100" in out, out
    sts = cluster.wait_converged()
    assert sts[1]["partitions"]["host-topic/0"] == expected[0] + 100


def test_sigkill_leader_container_while_producing(container_cluster):
    cluster = container_cluster
    rng = _seed("sigkill")
    leader = cluster.wait_leader()
    prod = AckingProducer(cluster.bootstrap_servers, "kill", PARTITIONS)
    prod.send(rng.randint(1_000, 3_000))
    prod.wait_acked(rng.randint(200, 800), 60)
    print(f"docker kill -s KILL node {leader} after {prod.total_acked()} acks")
    t0 = time.monotonic()
    cluster.kill(leader)
    victim = leader
    prod.send(rng.randint(1_000, 3_000))  # keep producing through the election
    survivors = [i for i in cluster.nodes if i != victim]
    leader = cluster.wait_leader(nodes=survivors, exclude=victim)
    print(f"node {leader} leads {time.monotonic() - t0:.2f} s after the kill")
    before = prod.total_acked()
    prod.send(1_000)
    prod.wait_acked(before + 1, 60)  # the new leader acknowledges
    print(f"first ack from the new leader {time.monotonic() - t0:.2f} s after the kill")

    cluster.restart(victim)
    prod.send(1_000)
    prod.flush(120)
    assert not prod.failed, f"{len(prod.failed)} deliveries failed: {prod.failed[:3]}"
    assert prod.total_acked() == prod.sent

    # The restarted node catches up: same commit/applied/log end and partition state.
    sts = cluster.wait_converged(timeout=60)
    print({i: (st["role"], st["commit"], st["applied"]) for i, st in sts.items()})
    expected = {p: len(v) for p, v in prod.acked.items()}
    for p in range(PARTITIONS):
        assert sts[victim]["partitions"][f"kill/{p}"] == expected[p]
    got = consume_all(cluster.bootstrap_servers, "kill", expected)
    check_exactly_once(prod.acked, got)
    # ... and serves: a client whose only bootstrap is the restarted node works.
    again = AckingProducer(cluster.kafka_addr(victim), "kill-after", 1)
    again.send(50)
    again.flush(60)
    assert again.total_acked() == 50 and not again.failed
    got = consume_all(cluster.kafka_addr(victim), "kill", expected)
    check_exactly_once(prod.acked, got)


def _view(st: dict | None, topic: str, partition: int) -> dict | None:
    """The Raft group that owns topic/partition as a node's Status shows it (role, leader,
    commit, last_index): with one group the node's own; with partition groups
    (RAFTSINK_CLUSTER_PARTITION_GROUPS) the partition's data group row; None: no answer
    or no replica there."""
    if st is None:
        return None
    if "data_groups" not in st:
        return st
    for row in st["data_groups"]["groups"]:
        if row["topic"] == topic and row["partition"] == partition:
            return row
    return None


def _led_partitions(st: dict, topic: str) -> list[int]:
    """The partitions of topic whose group the node leads (with one group: all of them)."""
    if "data_groups" not in st:
        return list(range(PARTITIONS)) if st["role"] == "leader" else []
    return sorted(
        r["partition"]
        for r in st["data_groups"]["groups"]
        if r["topic"] == topic and r["role"] == "leader"
    )


def _wait_group_leader(cluster, nodes, exclude: int, timeout: float = 30.0) -> int:
    """The nodes agree on one leader of part/0's group, other than exclude, that leads."""

    def agreed() -> int:
        views = {i: _view(cluster.status(i), "part", 0) for i in nodes}
        if any(v is None for v in views.values()):
            return 0
        leaders = {v["leader"] for v in views.values()}
        lead = leaders.pop() if len(leaders) == 1 else 0
        if lead in (0, exclude) or lead not in views:
            return 0
        return lead if views[lead]["role"] == "leader" else 0

    return wait_for(agreed, timeout, f"one leader of part/0's group among nodes {nodes}")


def test_partitioned_leader_steps_down_and_its_suffix_is_replaced(container_cluster):
    """The leader of part/0's group is cut off: with one group the cluster's leader, with
    partition groups that partition's data group's leader (clients route each partition
    to its own leader; the lone records go to the partitions it leads)."""
    cluster = container_cluster
    _seed("partition")  # no random choice here; printed for uniformity
    cluster.wait_leader()
    # Non-sparse connections: the client keeps a connection to every node. With librdkafka's
    # default (sparse) it may hold only the isolated node, which answers Metadata with
    # "leader -1" for as long as it is cut off, and it keeps asking only that node.
    prod = AckingProducer(
        cluster.bootstrap_servers, "part", PARTITIONS, **{"enable.sparse.connections": False}
    )
    prod.send(1_000)
    prod.flush(60)
    old = _wait_group_leader(cluster, list(cluster.nodes), exclude=0)
    sts = cluster.wait_converged()
    base = _view(sts[old], "part", 0)
    led = _led_partitions(sts[old], "part")
    assert base is not None and 0 in led, (base, led)
    print(f"part/0 leader node {old} at commit {base['commit']}; it leads partitions {led}")

    cluster.partition(old)
    t0 = time.monotonic()
    # Records sent straight to the isolated leader: appended to its log, never committed by
    # it. retries=0, not idempotent: a record that fails is never re-sent anywhere.
    lone = Producer(
        {
            "bootstrap.servers": cluster.kafka_addr(old),
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 4_000,
        }
    )
    lone_result: dict[bytes, tuple[str | None, int]] = {}

    def on_lone(err, msg) -> None:
        lone_result[msg.value()] = (None if err is None else str(err), msg.offset())

    for k in range(30):
        part = led[k % len(led)]
        lone.produce("part", f"lone{k}.{part}".encode(), partition=part, on_delivery=on_lone)
    lone.poll(0)

    # The isolated leader has an uncommitted suffix, then steps down (CheckQuorum).
    st = wait_for(
        lambda: (
            (v := _view(cluster.status(old), "part", 0)) and v["last_index"] > v["commit"] and v
        ),
        10,
        "the isolated leader to append records it cannot commit",
    )
    print(f"isolated node {old}: last_index {st['last_index']} > commit {st['commit']}")
    wait_for(
        lambda: (v := _view(cluster.status(old), "part", 0)) and v["role"] != "leader",
        15,
        "the isolated leader to step down",
    )
    print(f"node {old} stepped down {time.monotonic() - t0:.2f} s after the partition")
    majority = [i for i in cluster.nodes if i != old]
    new = _wait_group_leader(cluster, majority, exclude=old)
    print(f"node {new} leads the majority {time.monotonic() - t0:.2f} s after the partition")
    assert lone.flush(30) == 0

    # The majority goes on; the isolated node acknowledges nothing: its commit index is frozen.
    prod.send(1_000)
    prod.flush(60)
    assert not prod.failed, prod.failed[:3]
    stuck = _view(cluster.status(old), "part", 0)
    lead = _view(cluster.status(new), "part", 0)
    assert stuck is not None and lead is not None
    assert stuck["commit"] == base["commit"] < lead["commit"], (stuck, lead)

    cluster.heal(old)
    t1 = time.monotonic()
    sts = cluster.wait_converged(timeout=60)
    print(f"healed; converged {time.monotonic() - t1:.2f} s later")
    views = {i: _view(st, "part", 0) for i, st in sts.items()}
    assert views[old]["role"] == "follower", views[old]
    assert all(v["leader"] == new for v in views.values()), views
    # Lone records acknowledged at all were acknowledged by the new leader (the client
    # followed a leader change): they count as acknowledged; failed ones must be absent.
    for value, (err, offset) in lone_result.items():
        if err is None:
            prod.acked[int(value.split(b".")[1])].append((offset, value))
    failed = {v for v, (err, _) in lone_result.items() if err is not None}
    print(f"lone records: {len(lone_result) - len(failed)} acknowledged, {len(failed)} failed")
    expected = {p: len(v) for p, v in prod.acked.items()}
    for i in cluster.nodes:
        for p in range(PARTITIONS):
            assert sts[i]["partitions"][f"part/{p}"] == expected[p], (i, sts[i])
    got = consume_all(cluster.bootstrap_servers, "part", expected)
    check_exactly_once(prod.acked, got)
    values = {v for records in got.values() for _, v in records}
    assert not values & failed, "a record of the isolated leader's uncommitted suffix survived"
