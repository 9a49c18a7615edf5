"""A follower loses its disk while a membership change is in flight (issue 12's
"wipe during a membership change"), on real `raftsink serve` processes under a steady
idempotent produce load (confluent-kafka, acks=all).

`members add` of node 4 is issued while node 4 is not running yet, so the change
stays in flight (node 4 a learner the leader cannot catch up) for as long as the test
wants. Meanwhile follower F is killed (-9), its data directory deleted, and F restarts
empty. F is a replacement: it neither votes nor counts until the leader has caught it
up and admitted it (node identity), while the leader and the third voter keep
committing. Then node 4 starts, catches up and is promoted, so the add completes.
Afterwards F may vote again, the configuration is {1, 2, 3, 4}, and every acknowledged
record is read back exactly once with dense offsets.
"""

from __future__ import annotations

import asyncio
import shutil
import threading

import pytest

pytest.importorskip("confluent_kafka")

from sink.process_cluster import SinkProcessCluster
from tests.helpers.steady_load import SteadyProducer, check_exactly_once
from tests.integration.test_members_processes import (
    ELECTION_TICKS,
    PARTITIONS,
    TOPIC,
    addresses,
    leader_of,
    live_config,
    members,
    status,
    wait_caught_up,
    wait_until,
)


@pytest.fixture
def cluster(tmp_path):
    c = SinkProcessCluster(
        str(tmp_path),
        default_partitions=PARTITIONS,
        extra_args=["--raft-election-ticks", str(ELECTION_TICKS)],
    )
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=120))
        yield c
    finally:
        c.stop()


def may_vote(cluster: SinkProcessCluster, i: int) -> bool:
    st = status(cluster, i) or {}
    return bool((st.get("identity") or {}).get("may_vote"))


def test_a_follower_wiped_while_a_node_is_being_added_costs_nothing(cluster):
    load = SteadyProducer(cluster.bootstrap_servers, TOPIC, PARTITIONS, rate=400).start()
    load.wait_acked(500, 120)
    lead = leader_of(cluster)
    assert lead, "no leader"
    victim = next(i for i in (1, 2, 3) if i != lead)
    old_incarnation = status(cluster, victim)["identity"]["incarnation"]

    # The add stays in flight: node 4 is not running, so it cannot catch up.
    peer = cluster.add_node()
    added: dict = {}

    def add() -> None:
        try:
            added["result"] = members(
                cluster, {"op": "add", "node": peer.id, **addresses(cluster, peer.id)}, 300
            )
        except BaseException as exc:  # reported by the main thread
            added["error"] = exc

    adder = threading.Thread(target=add, daemon=True)
    adder.start()
    wait_until(
        lambda: peer.id in (status(cluster, lead) or {}).get("membership", {}).get("learners", []),
        60,
        f"node {peer.id} a learner (the add in flight)",
    )
    assert adder.is_alive(), f"the add finished without node {peer.id}: {added}"

    # Follower loses its disk mid-change and comes back empty.
    cluster.kill(victim)
    shutil.rmtree(cluster.nodes[victim].data_dir)
    cluster.start(victim)
    load.wait_acked(load.result.total_acked() + 300, 120)  # the other two commit
    assert adder.is_alive(), f"the add finished while node {peer.id} was down: {added}"

    # Node 4 starts: it catches up, is promoted, and the add completes.
    cluster.start(peer.id)
    adder.join(300)
    assert not adder.is_alive(), "the add did not complete within 300 s"
    assert "error" not in added, f"the add failed: {added['error']!r}"
    config = live_config(cluster)
    print(f"add done: voters {config['voters']} learners {config['learners']}")
    assert peer.id in config["voters"], config

    # The wiped follower is a new incarnation, caught up and admitted again: it may be
    # a learner for a while (re-admission demotes a replacement until it has the log).
    wait_until(
        lambda: live_config(cluster)["voters"] == [1, 2, 3, 4],
        120,
        f"voters 1-4 (node {victim} promoted again)",
    )
    wait_until(lambda: may_vote(cluster, victim), 120, f"node {victim} admitted again")
    assert status(cluster, victim)["identity"]["incarnation"] != old_incarnation
    wait_caught_up(cluster, victim)
    wait_caught_up(cluster, peer.id)

    result = load.stop()
    assert not result.failed, f"{len(result.failed)} failed records, first: {result.failed[0]}"
    bootstrap = ",".join(cluster.peers[i].kafka for i in cluster.alive())
    n = check_exactly_once(bootstrap, TOPIC, result)
    assert n == result.total_acked() == result.sent, (n, result.total_acked(), result.sent)
    print(f"sent={result.sent} read back={n} (wiped node {victim}, added node {peer.id})")
