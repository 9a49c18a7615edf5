"""A partition placed while one of its replicas is down (partition groups, real
processes): its data group elects with the live replicas, and the missing replica,
once started, joins as a full voter.

Before sealed starts (sink/state/placement_table.py, PLACE_TOPIC's incarnations) a new
group was founded only once every voter had answered, so such a partition stayed
without a leader until the down node came back (found by a groups-on CI run,
docs/partition-groups.md). Here:

- 3 nodes, node 3 killed -9, a topic created with replication factor 3 (so every
  partition has a replica on node 3): acks=all produce to every partition succeeds;
- node 3 starts: it catches up every partition's records;
- node 1 is killed: the partitions keep taking acks=all writes on nodes 2 and 3 (so
  node 3 votes and its acknowledgements count), and every acknowledged record is read
  back exactly once from the two live nodes.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("confluent_kafka")

from tests.helpers.partition_groups import (
    create_topic,
    groups_cluster,
    kafka_port,
    metadata,
    produce_acked,
    read_back,
    wait_for,
)

TOPIC = "half-placed"
PARTITIONS = 3


def test_a_partition_placed_while_a_replica_is_down_elects_and_takes_it_in_later(tmp_path):
    with groups_cluster(str(tmp_path), 3) as cluster:
        cluster.kill(3)
        # Nodes 1 and 2 agree on a live controller first: node 3 may have been it, and
        # librdkafka keeps sending an admin request to the controller its first Metadata
        # named (a dead node) until the request times out.
        asyncio.run(cluster.wait_ready(timeout=60, exclude=3))
        create_topic(cluster, TOPIC, PARTITIONS, 3)
        md = metadata(kafka_port(cluster, 1), TOPIC)
        assert all(3 in reps for _, _, reps in md.values()), md

        def led() -> bool:
            seen = metadata(kafka_port(cluster, 1), TOPIC)
            return len(seen) == PARTITIONS and all(lead in (1, 2) for lead, _, _ in seen.values())

        wait_for(led, 60, lambda: f"leaders on 1 or 2: {metadata(kafka_port(cluster, 1), TOPIC)}")
        live = ",".join(cluster.peers[i].kafka for i in (1, 2))
        first = produce_acked(live, TOPIC, PARTITIONS, 0, 300)

        st1 = asyncio.run(cluster.status(1, timeout=10.0))
        commits = {g["group"]: g["commit"] for g in st1["data_groups"]["groups"]}
        cluster.start(3)
        asyncio.run(cluster.wait_ready(timeout=120))
        rows: list[dict] = []

        def caught_up() -> bool:
            st = asyncio.run(cluster.status(3, timeout=5.0))
            rows[:] = (st or {}).get("data_groups", {}).get("groups", [])
            return len(rows) == PARTITIONS and all(
                g["may_vote"] and g["applied"] >= commits[g["group"]] for g in rows
            )

        wait_for(caught_up, 60, lambda: f"node 3 caught up to {commits}: {rows}")

        cluster.kill(1)
        live = ",".join(cluster.peers[i].kafka for i in (2, 3))
        second = produce_acked(live, TOPIC, PARTITIONS, 300, 300)
        expected = {p: len(first[p]) + len(second[p]) for p in range(PARTITIONS)}
        got = read_back(live, TOPIC, expected, 90, "half-placed-check")
        for p in range(PARTITIONS):
            offsets = [o for o, _ in got[p]]
            acked = [o for o, _ in first[p] + second[p]]
            assert offsets == sorted(set(offsets)) == sorted(acked), p
