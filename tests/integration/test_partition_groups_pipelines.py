"""Pipeline commits with partition groups on real processes: 3 `raftsink serve` nodes
(cluster.partition_groups on), a topic of 3 partitions at replication factor 3 whose
leaders are spread (each node leads about one).

- one read-API Commit naming every partition, sent to one node, lands in each
  partition's data group: proposed where that node leads, forwarded to the leader of
  the others, answered once all committed (no error rows; sent again, as the Spark
  source does, while a row answers a retriable error: a leader moving);
- a Commit naming an unknown partition answers a per-partition error for it only;
- each data group's retention then holds at what the pipeline committed in it: with a
  cap of 5 entries per log (retention.max_entries), every partition's log start stops
  exactly at the committed offset, on every replica.
Waits are on conditions with deadlines."""

from __future__ import annotations

import asyncio
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402

from sink.readapi import (  # noqa: E402
    ERR_NOT_LEADER,
    ERR_REQUEST_TIMED_OUT,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    ReadApiClient,
)
from tests.helpers.partition_groups import (  # noqa: E402
    create_topic,
    groups_cluster,
    kafka_port,
    metadata,
    wait_for,
)

TOPIC = "pipes"
PARTITIONS = 3
HELD_AT = 12  # the offset the pipeline commits in every partition
RECORDS = 30  # per partition, each its own Raft entry


def produce(bootstrap: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(TOPIC, value=b"r%d" % i, partition=partition)
        assert p.flush(30) == 0


RETRIABLE = {ERR_NOT_LEADER, ERR_REQUEST_TIMED_OUT}


async def _commit(address: str, offsets: dict[tuple[str, int], int], timeout: float = 30.0):
    """Commit as the Spark source does: again while some partition answered a retriable
    error (a leader moving) -> the last answer."""
    client = ReadApiClient(address)
    deadline = time.monotonic() + timeout
    try:
        while True:
            reply = await client.commit("spark-pipes", offsets)
            retriable = [e for e in reply.errors if e.error_code in RETRIABLE]
            if not retriable or time.monotonic() > deadline:
                return reply
            print(f"commit: retrying after {[(e.partition, e.error) for e in retriable]}")
            await asyncio.sleep(0.2)  # a client's back-off, not a synchronisation
    finally:
        await client.close()


async def _log_starts(address: str) -> dict[int, int]:
    client = ReadApiClient(address)
    try:
        reply = await client.partitions([TOPIC], linearizable=True)
    finally:
        await client.close()
    return {p.partition: p.log_start_offset for p in reply.partitions}


def test_a_commit_lands_in_every_partitions_data_group_and_holds_its_retention(tmp_path):
    args = ["--snapshot-every-entries", "10", "--retention-max-entries", "5"]
    with groups_cluster(str(tmp_path), 3, args) as cluster:
        create_topic(cluster, TOPIC, PARTITIONS, 3)

        def spread() -> bool:
            """Every partition led by its preferred replica (the creation hand-offs done),
            on at least two nodes."""
            md = metadata(kafka_port(cluster, 1), TOPIC)
            lead = [v[0] for v in md.values()]
            home = all(v[0] == v[2][0] for v in md.values() if v[2])
            return len(md) == PARTITIONS and min(lead) > 0 and home and len(set(lead)) >= 2

        wait_for(spread, 60, lambda: f"leaders spread: {metadata(kafka_port(cluster, 1), TOPIC)}")
        leaders = {p: v[0] for p, v in metadata(kafka_port(cluster, 1), TOPIC).items()}
        print(f"partition leaders {leaders}")
        for p in range(PARTITIONS):
            produce(cluster.bootstrap_servers, p, 1)
        # The node leading partition 0 commits for all three: 1 local proposal, the rest
        # forwarded (leaders are spread, so at least one partition is led elsewhere).
        via = cluster.peers[leaders[0]].read_api
        offsets = {(TOPIC, p): HELD_AT for p in range(PARTITIONS)}
        reply = asyncio.run(_commit(via, offsets))
        assert reply.error_code == 0 and list(reply.errors) == [], reply.error
        assert reply.partitions == PARTITIONS  # one per data group, each covering its own
        bad = asyncio.run(_commit(via, {(TOPIC, 0): HELD_AT, (TOPIC, 9): 1}))
        assert [(e.topic, e.partition, e.error_code) for e in bad.errors] == [
            (TOPIC, 9, ERR_UNKNOWN_TOPIC_OR_PARTITION)
        ]
        assert bad.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION and bad.partitions == 1
        for p in range(PARTITIONS):
            produce(cluster.bootstrap_servers, p, RECORDS)
        # Without the hold, 5 entries per log would leave the log start near offset 26.
        for node in cluster.peers:
            address = cluster.peers[node].read_api
            last: dict[int, int] = {}

            def held(address: str = address, last: dict[int, int] = last) -> bool:
                last.update(asyncio.run(_log_starts(address)))
                return all(last.get(p, -1) >= HELD_AT for p in range(PARTITIONS))

            wait_for(held, 60, lambda n=node, s=last: f"node {n}: log starts {s}")
            assert last == {p: HELD_AT for p in range(PARTITIONS)}, (node, last)
