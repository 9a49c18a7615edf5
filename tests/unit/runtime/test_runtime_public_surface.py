"""RaftNode's public read surface (term, commit_index, applied_index, leadership,
membership, first_index, read_committed) on a real 3-node in-process cluster."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.runtime import LogRangeError, NodeOptions, RaftNode, StateMachine
from raftlog.transport import LocalNetwork

# Self-contained on purpose (no shared in-process cluster helper): the helper's
# module name is being changed on another branch.
FAST = NodeOptions(tick_ms=10, election_ticks=10)


class _CountingFSM(StateMachine):
    def __init__(self) -> None:
        self.count = 0

    def on_apply(self, entries):
        self.count += len(entries)
        return [None] * len(entries)

    def on_snapshot_save(self) -> bytes:
        return b""

    def on_snapshot_load(self, data: bytes) -> None:
        pass


async def _wait_until(cond, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def _node(base, net: LocalNetwork, i: int, ids=(1, 2, 3)) -> RaftNode:
    peers = {j: f"local:{j}" for j in ids}
    return RaftNode(i, str(base / f"n{i}"), peers, _CountingFSM(), net.transport(i), FAST, seed=i)


def test_public_reads_agree_with_the_cluster(tmp_path):
    async def main():
        net = LocalNetwork()
        nodes = [_node(tmp_path, net, i) for i in (1, 2, 3)]
        for n in nodes:
            await n.start()
        try:
            await _wait_until(lambda: sum(n.is_leader() for n in nodes) == 1, "a leader")
            leader = next(n for n in nodes if n.is_leader())
            results = [await leader.apply(b"v%d" % i) for i in range(20)]
            last = results[-1].index
            await _wait_until(lambda: all(n.applied_index >= last for n in nodes), "apply")
            for n in nodes:
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
            for n in nodes:
                await n.stop()

    run(main())


def test_term_and_commit_index_before_start(tmp_path):
    node = _node(tmp_path, LocalNetwork(), 1, ids=(1,))
    assert node.term == 0 and node.commit_index == 0 and node.applied_index == 0
