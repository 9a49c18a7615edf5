"""Log compaction and InstallSnapshot in chunks (Raft 7)."""

from __future__ import annotations

from raftlog.core import MsgType, ProgressState
from raftlog.sim.harness import Cluster


def test_lagging_follower_gets_the_snapshot_in_chunks_then_entries():
    c = Cluster((1, 2, 3), snapshot_chunk_bytes=16)
    c.elect(1)
    c.crash(3)
    for k in range(20):
        c.propose(1, b"v%d" % k)
    c.compact(1)
    c.compact(2)
    assert c.peers[1].storage.first_index() == 22
    c.propose(1, b"after")
    c.restart(3)
    c.delivered.clear()
    c.tick_all(3)
    chunks = [m for m in c.delivered if m.type is MsgType.SNAPSHOT and m.dst == 3]
    assert len(chunks) > 3 and chunks[-1].done
    assert [m.offset for m in chunks] == sorted(m.offset for m in chunks)
    p3 = c.peers[3]
    assert p3.snapshots_installed == 1
    assert p3.applied == c.peers[1].applied == [b"v%d" % k for k in range(20)] + [b"after"]
    assert p3.storage.snapshot.meta.index == 21
    assert c.node(1).progress[3].state is ProgressState.REPLICATE


def test_lost_snapshot_chunks_are_resent():
    c = Cluster((1, 2, 3), snapshot_chunk_bytes=8)
    c.elect(1)
    c.crash(3)
    for k in range(10):
        c.propose(1, b"v%d" % k)
    c.compact(1)
    c.restart(3)
    lost = {"n": 0}

    def lose_every_third(m):
        if m.type is MsgType.SNAPSHOT:
            lost["n"] += 1
            return lost["n"] % 3 != 0
        return True

    c.filters.append(lose_every_third)
    c.tick_all(30)
    assert c.peers[3].applied == c.peers[1].applied


def test_snapshot_older_than_commit_is_ignored_and_restart_uses_snapshot():
    c = Cluster((1, 2, 3))
    c.elect(1)
    for k in range(5):
        c.propose(1, b"v%d" % k)
    c.tick_all(1)
    c.compact(2)
    c.crash(2)
    c.restart(2)
    n2 = c.node(2)
    assert n2.log.committed >= 6 and n2.log.first_index() == 7
    assert c.peers[2].applied == [b"v%d" % k for k in range(5)]
    c.tick_all(2)
    c.propose(1, b"more")
    c.tick_all(1)
    assert c.peers[2].applied[-1] == b"more"
    assert c.peers[2].snapshots_installed == 0
