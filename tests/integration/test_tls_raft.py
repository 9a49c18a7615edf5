"""Mutual TLS on the Raft transport: a node whose certificate comes from another CA
cannot send Raft messages to the cluster (refused in the handshake, logged on both
sides), cannot vote or be elected, and does not crash; the nodes of the cluster CA
form a quorum and serve without it.

Real processes: three `raftsink serve` nodes with tls.raft on; node 3 restarts with a
certificate (and trust) of a rogue CA. Kafka and the read API stay plaintext here so
the test can watch every node's status.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sink.process_cluster import SinkProcessCluster

ck = pytest.importorskip("confluent_kafka")


async def _leader_of(cluster: SinkProcessCluster, nodes: list[int], timeout: float) -> int:
    """Wait until `nodes` agree on one leader among themselves; returns it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: dict = {}
    while loop.time() < deadline:
        last = {i: await cluster.status(i) for i in nodes}
        leaders = {st["leader"] for st in last.values() if st}
        if all(last.values()) and len(leaders) == 1 and leaders <= set(nodes):
            return leaders.pop()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no leader among {nodes} in {timeout} s: {last}")


async def _answering(cluster: SinkProcessCluster, i: int, timeout: float) -> dict:
    """Node i's status once it answers (a restarted node needs its start-up time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        st = await cluster.status(i)
        if st is not None:
            return st
        assert cluster.exited() == {}, cluster.log_tail(i)
        await asyncio.sleep(0.1)
    raise TimeoutError(f"node {i} did not answer in {timeout} s")


def test_node_of_another_ca_cannot_send_raft_messages(tmp_path, certs):
    # One Raft group: the checks below read that group's commit and last index (the
    # transport and its TLS are the same in both layouts). A partition placed while a
    # replica is down, as here with groups, elects since sealed starts
    # (tests/integration/test_groups_replica_down.py).
    cluster = SinkProcessCluster(
        str(tmp_path / "c"), extra_args=["--tls-raft"], log_level="INFO", partition_groups=False
    )
    for i in (1, 2, 3):
        cluster.nodes[i].extra_args += certs.node_flags(f"node{i}")
    cluster.start()
    try:
        # A new cluster is founded by all its voters (raftlog's incarnations): start it
        # whole, then bring node 3 back with a certificate (and trust) of another CA.
        asyncio.run(cluster.wait_ready(120))
        assert cluster.terminate(3) == 0
        rogue_cert, rogue_key = certs.rogue
        cluster.nodes[3].extra_args = [
            "--tls-cert-file",
            rogue_cert,
            "--tls-key-file",
            rogue_key,
            # It even trusts the cluster CA: its own certificate alone gets it refused.
            "--tls-ca-file",
            certs.ca,
        ]
        cluster.start(3)
        leader = asyncio.run(_leader_of(cluster, [1, 2], 120))
        before = asyncio.run(cluster.status(leader))
        assert before is not None
        # The two nodes of the cluster CA commit without node 3.
        p = ck.Producer({"bootstrap.servers": cluster.peers[leader].kafka, "acks": "all"})
        errors: list = []
        for i in range(20):
            p.produce("raft-tls", value=b"v%d" % i, on_delivery=lambda e, m: errors.append(e))
        assert p.flush(60) == 0
        assert errors == [None] * 20

        # Node 3 got none of it: it knows no leader and has no entry written since.
        st3 = asyncio.run(_answering(cluster, 3, 120))
        after = asyncio.run(cluster.status(leader))
        assert st3 is not None and after is not None
        assert after["commit"] > before["commit"]
        assert st3["leader"] == 0, st3
        assert st3["last_index"] <= before["last_index"] < after["last_index"], (st3, after)

        # Refused and logged: node 3's sends fail in the handshake (the receiver does
        # not accept its certificate) and the leader's sends to node 3 too (it does not
        # trust node 3's); each sender names the peer in a warning, and gRPC logs the
        # refused certificate on the receiving nodes.
        deadline = time.monotonic() + 60
        logs: dict[int, str] = {}
        while time.monotonic() < deadline:
            logs = {i: cluster.log_tail(i, 400_000) for i in (1, 2, 3)}
            if all("transport.tls_refused" in logs[i] for i in (leader, 3)) and all(
                "CERTIFICATE_VERIFY_FAILED" in logs[i] for i in (1, 2)
            ):
                break
            time.sleep(0.1)  # polling a condition with a deadline
        for i in (leader, 3):
            assert "transport.tls_refused" in logs[i], f"node {i} did not log the refusal"
        assert "peer=3" in logs[leader]
        for i in (1, 2):
            assert "CERTIFICATE_VERIFY_FAILED" in logs[i], f"node {i}: no refused handshake"
        refused_by_peer = [ln for ln in logs[3].splitlines() if "transport.tls_refused" in ln]
        print("node 3:", refused_by_peer[:2])
        # Nobody crashed: node 3 keeps running (an operator fixes its certificate).
        assert cluster.exited() == {}
    finally:
        cluster.stop()
