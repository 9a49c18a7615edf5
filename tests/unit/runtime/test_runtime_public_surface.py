"""RaftNode's public read surface (term, commit_index, applied_index, leadership,
membership, first_index, read_committed) on a real 3-node in-process cluster."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.runtime import LogRangeError, RaftNode
from tests.helpers.cluster import LocalCluster, RecordingFSM, wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def test_public_reads_agree_with_the_cluster(tmp_path):
    async def main():
        c = LocalCluster(str(tmp_path))
        await c.start()
        try:
            leader = await c.leader()
            results = [await leader.apply(b"v%d" % i) for i in range(20)]
            last = results[-1].index
            await wait_until(
                lambda: all(n.applied_index >= last for n in c.nodes.values()), what="apply"
            )
            for n in c.nodes.values():
                assert n.term == leader.term >= 1
                assert n.applied_index <= n.commit_index
                assert n.leader_id == leader.id and n.is_leader() == (n is leader)
                assert n.membership() == {"voters": [1, 2, 3], "learners": []}
                assert n.first_index() == 1
                got = n.read_committed(results[0].index, 100, 1 << 20)
                # Only committed entries: never past max(commit_index, applied).
                assert got[-1].index <= max(n.commit_index, n.applied)
                assert [e.data for e in got if e.data.startswith(b"v")][:20] == [
                    b"v%d" % i for i in range(20)
                ]
                assert len(n.read_committed(results[0].index, 3, 1 << 20)) == 3
                with pytest.raises(LogRangeError):
                    n.read_committed(max(n.commit_index, n.applied) + 1, 10, 1 << 20)
        finally:
            await c.stop()

    run(main())


def test_term_and_commit_index_before_start(tmp_path):
    c = LocalCluster(str(tmp_path))
    node = RaftNode(1, str(tmp_path / "n1"), {1: "local:1"}, RecordingFSM(), c.net.transport(1))
    assert node.term == 0 and node.commit_index == 0 and node.applied_index == 0
