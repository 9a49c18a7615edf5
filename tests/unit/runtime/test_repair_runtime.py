"""The runtime's side of "damaged storage is repaired, not fatal" (issue 12), in process:
a node whose log recovery repaired runs under a new incarnation, never votes until the
leader has caught it up and re-admitted it, and keeps its intact prefix; a single-node
cluster stops instead (nobody can vouch for the cut entries) and cuts nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import pytest

from raftlog.runtime import RaftNode
from raftlog.runtime.errors import LeaderChangedError, NotLeaderError
from raftlog.storage import CorruptLogError, LogStore, StorageOptions
from raftlog.storage.repair import MARKER
from raftlog.transport import LocalNetwork
from tests.helpers.raft_inprocess import FAST, InProcessRaftCluster, RecordingFSM, wait_until

# 500 ms election timeout (as test_host.py): a loaded machine stalls event loops for 100 ms
# and more, and a leader change under the applies would only make the test retry
SMALL_SEGMENTS = dataclasses.replace(
    FAST, election_ticks=50, storage=StorageOptions(segment_bytes=4096)
)


def _segments(node_dir: str) -> list[str]:
    seg_dir = os.path.join(node_dir, "log", "segments")
    return [os.path.join(seg_dir, n) for n in sorted(os.listdir(seg_dir))]


async def _apply_somewhere(c: InProcessRaftCluster, data: bytes, exclude: int) -> RaftNode:
    """Apply through whichever node leads (a loaded machine may change leaders); returns it."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        leader = await c.leader(exclude=exclude)
        try:
            await leader.apply(data)
            return leader
        except (NotLeaderError, LeaderChangedError):
            assert asyncio.get_running_loop().time() < deadline, "no stable leader for 30 s"


def test_a_repaired_follower_is_a_replacement_until_readmitted(tmp_path):
    async def main():
        c = InProcessRaftCluster(str(tmp_path), options=SMALL_SEGMENTS)
        await c.start()
        for i in range(0, 150, 30):
            leader = await c.leader()
            batch = [b"v%04d" % k + b"x" * 200 for k in range(i, i + 30)]
            try:
                await asyncio.gather(*(leader.apply(d) for d in batch))
            except (NotLeaderError, LeaderChangedError):
                for d in batch:  # the outcome is unknown: apply again (the test reads no values)
                    await _apply_somewhere(c, d, exclude=0)
        leader = await c.leader()
        await wait_until(
            lambda: all(
                n.status()["identity"]["may_vote"]
                and n.status()["identity"]["recorded"] == n.status()["identity"]["incarnation"]
                for n in c.nodes.values()
            ),
            what="every node admitted",
        )
        victim = next(i for i in c.nodes if i != leader.id)
        old_inc = c.nodes[victim].status()["identity"]["incarnation"]
        await c.stop_node(victim)
        node_dir = os.path.join(str(tmp_path), f"n{victim}")
        segs = _segments(node_dir)
        assert len(segs) >= 4, segs
        gone_first = int(os.path.basename(segs[2])[:20])
        os.unlink(segs[2])  # a sealed segment in the middle
        node = await c.start_node(victim)
        st = node.status()["identity"]
        assert st["incarnation"] != old_inc and not st["may_vote"] and st["replacement"]
        # it kept the intact prefix: the entries before the lost segment are still there
        assert node.queue.store.repair is not None
        assert node.queue.store.repair.kept_last == gone_first - 1
        assert not os.path.exists(os.path.join(node_dir, "log", MARKER))  # incarnation durable
        leader = await _apply_somewhere(c, b"after", exclude=victim)
        await wait_until(
            lambda: (
                node.status()["identity"]["may_vote"]
                and node.status()["identity"]["recorded"]
                == node.status()["identity"]["incarnation"]
                and any(d == b"after" for _, d in c.fsms[victim].applied)
                # the re-admission's own configuration entry reaches it a round later
                and node.queue.last_index() == leader.queue.last_index()
            ),
            what="the repaired node caught up and re-admitted",
        )
        assert leader.membership()["voters"] == [1, 2, 3]
        await c.stop()

    asyncio.run(main())


def test_a_single_node_cluster_stops_and_cuts_nothing(tmp_path):
    async def main():
        d = str(tmp_path / "solo")

        def make() -> RaftNode:
            return RaftNode(
                1, d, {1: "local:1"}, RecordingFSM(), LocalNetwork().transport(1), SMALL_SEGMENTS
            )

        node = make()
        await node.start()
        await wait_until(node.is_leader, what="the single node leads")
        await asyncio.gather(*(node.apply(b"v%04d" % i + b"x" * 200) for i in range(100)))
        await node.stop()
        segs = _segments(d)
        os.unlink(segs[1])
        remaining = sorted(os.listdir(os.path.dirname(segs[0])))
        node = make()
        with pytest.raises(CorruptLogError, match="sealed segment file is missing"):
            await node.start()
        assert node.repair_refused and "single-node" in node.repair_refused
        assert sorted(os.listdir(os.path.dirname(segs[0]))) == remaining  # nothing cut

    asyncio.run(main())


def test_a_damaged_snapshot_the_log_can_do_without_is_set_aside(tmp_path):
    """The newest snapshot damaged, the log still holding every entry above the base
    snapshot: the node sets the file aside (kept as .damaged), rebuilds the same state
    from the base snapshot and the log, and runs; no entry is lost, even on a single
    node. A damaged base snapshot (what the log was compacted to) still stops it."""

    async def main():
        d = str(tmp_path / "solo")
        opts = dataclasses.replace(
            SMALL_SEGMENTS, snapshot_every_entries=40, snapshot_keep_entries=60
        )
        fsm = RecordingFSM()

        def make(fsm: RecordingFSM) -> RaftNode:
            return RaftNode(1, d, {1: "local:1"}, fsm, LocalNetwork().transport(1), opts)

        node = make(fsm)
        await node.start()
        await wait_until(node.is_leader, what="the single node leads")
        for i in range(0, 200, 20):
            await asyncio.gather(*(node.apply(b"v%04d" % k) for k in range(i, i + 20)))
        await wait_until(
            lambda: (
                len(node.snapshots.indexes()) >= 2
                and node.queue.first_index() > 1
                and node.snapshots.indexes()[-1] > node.queue.first_index() - 1
            ),
            what="a compacted log with a snapshot above its base",
        )
        first = node.queue.first_index()
        applied = [v for _, v in fsm.applied]
        await node.stop()
        snap_dir = os.path.join(d, "snapshots")
        snaps = sorted(n for n in os.listdir(snap_dir) if n.endswith(".snap"))
        newest = os.path.join(snap_dir, snaps[-1])
        assert int(snaps[-1].split("-")[1]) > first - 1  # not the base: the log covers it
        with open(newest, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"XYZ")
        fsm2 = RecordingFSM()
        node = make(fsm2)
        await node.start()
        await wait_until(lambda: node.applied >= len(applied), what="the state rebuilt")
        assert [v for _, v in fsm2.applied][-len(applied) :] == applied[-len(fsm2.applied) :]
        assert os.path.exists(newest + ".damaged") and not os.path.exists(newest)
        assert node.status()["identity"]["incarnation"]  # same storage: no replacement needed
        await node.apply(b"after")
        await node.stop()
        # the base as the stopped storage has it (the log may be compacted up to the stop)
        store = LogStore.open(os.path.join(d, "log"))
        base_index = store.first_index() - 1
        store.close()
        assert base_index > 0
        base = os.path.join(snap_dir, f"snapshot-{base_index:020d}")
        base_file = next(
            os.path.join(snap_dir, n)
            for n in os.listdir(snap_dir)
            if n.startswith(os.path.basename(base)) and n.endswith(".snap")
        )
        with open(base_file, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"XYZ")
        node = make(RecordingFSM())
        with pytest.raises(CorruptLogError, match="compacted to entry"):
            await node.start()

    asyncio.run(main())
