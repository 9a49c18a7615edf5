"""A follower rebuilt by InstallSnapshot holds the leader's whole log, not only the entries
after the leader's newest snapshot; and a restart after a snapshot taken ahead of the
commit checkpoint starts.

Why: the sink serves Kafka records out of Raft log entries, and its retention (the
compaction limit) keeps entries below the newest snapshot. The leader used to cut its
log at the limit and send its newest snapshot: a wiped or lagging node then held no
entry between the limit and that snapshot, and its read API could never serve those
records (chaos, seed 20240607: "final-node-2 final read incomplete" after wiping node 2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil

import pytest

from raftlog.core.log_reader import Snapshot
from raftlog.entry import SnapshotMeta
from raftlog.runtime import NodeOptions, SnapshotStore
from raftlog.runtime.compaction import KEEP_CUT_POINTS, cut_points
from tests.helpers.raft_inprocess import FAST, InProcessRaftCluster, wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def _entries(node, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
    """(index, term, data) of node's committed entries lo..hi (hi <= its applied index)."""
    out = []
    while lo <= hi:
        batch = node.read_committed(lo, 1000, 1 << 20)
        out.extend((e.index, e.term, e.data) for e in batch if e.index <= hi)
        lo = batch[-1].index + 1
    return out


@pytest.mark.parametrize("wipe", [False, True], ids=["lagging", "wiped"])
@pytest.mark.parametrize(
    "keep, limit",
    [(10, None), (0, 120)],
    ids=["keep-entries", "compaction-limit"],
)
def test_a_follower_rebuilt_by_a_snapshot_holds_the_leaders_whole_log(tmp_path, keep, limit, wipe):
    async def main():
        opts = dataclasses.replace(FAST, snapshot_every_entries=50, snapshot_keep_entries=keep)
        c = InProcessRaftCluster(
            str(tmp_path), options=opts, compaction_limit=(lambda: limit) if limit else None
        )
        await c.start()
        leader = await c.leader()
        other = next(i for i in c.ids if i != leader.id)
        if wipe:  # a node whose disk was replaced: admitted again under a new incarnation
            await wait_until(
                lambda: all(n.status()["identity"]["may_vote"] for n in c.nodes.values()),
                what="every node admitted",
            )
        await c.stop_node(other)
        if wipe:
            shutil.rmtree(os.path.join(str(tmp_path), f"n{other}"))
        for k in range(4):
            await asyncio.gather(*(leader.apply(b"s%d-%d" % (k, i)) for i in range(50)))
        # the leader's newest snapshot is ahead of where its log starts (the periodic one
        # is deferred while the applied entries are not durable here: ask for it then)
        await wait_until(
            lambda: leader.applied <= leader.core.log.stable_last(), what="applied durable"
        )
        leader.snapshot_now()
        await wait_until(
            lambda: (
                leader.snapshots.latest_meta().index == leader.applied
                and not leader._compaction.storing
                and leader.queue.first_index() > 50
            ),
            what="snapshots and a cut on the leader",
        )
        assert leader.queue.first_index() - 1 < leader.snapshots.latest_meta().index
        node = await c.start_node(other)
        await wait_until(
            lambda: node.applied >= leader.applied and len(c.fsms[other].applied) >= 200,
            what="the follower catches up",
        )
        assert node.stats.snapshots_installed >= 1  # rebuilt from a snapshot, not replayed
        assert c.fsms[other].applied == c.fsms[leader.id].applied
        # its log reaches as far back as the leader's: whatever the leader can still read
        # out of its log (sink: Kafka records), the rebuilt follower can too
        first = leader.queue.first_index()  # nothing applied since: no new snapshot or cut
        assert node.queue.first_index() <= first
        # up to what both have applied: the leader may append more meanwhile (a wiped node's
        # re-admission is a membership entry the leader proposes once it caught up)
        upto = min(node.applied, leader.applied)
        assert upto >= 200
        assert _entries(node, first, upto) == _entries(leader, first, upto)
        # what the application is offered starts where it released entries, not at the cut
        assert leader.first_index() - 1 == min(
            leader.snapshots.latest_meta().index - keep, limit or leader.applied
        )
        await c.stop()

    run(main())


def test_the_log_is_cut_only_at_a_kept_snapshot(tmp_path):
    """The invariant the follower's catch-up relies on: first_index - 1 is a snapshot the
    leader holds (and offers), however far the limit and the snapshots have moved."""

    async def main():
        limit = [0]
        opts = dataclasses.replace(
            FAST, snapshot_every_entries=1_000_000, snapshot_keep_entries=0
        )  # snapshots only when asked (snapshot_now): one per round
        c = InProcessRaftCluster(str(tmp_path), options=opts, compaction_limit=lambda: limit[0])
        await c.start()
        leader = await c.leader()
        for k in range(12):
            limit[0] = k * 17
            await asyncio.gather(*(leader.apply(b"c%d-%d" % (k, i)) for i in range(20)))
            await wait_until(
                lambda: leader.applied <= leader.core.log.stable_last(), what="applied durable"
            )
            assert leader.snapshot_now() is True
            await wait_until(
                lambda: (
                    leader.snapshots.latest_meta().index == leader.applied
                    and not leader._compaction.storing
                ),
                what="the snapshot stored and the log cut",
            )
            base = leader.queue.first_index() - 1
            assert base <= limit[0]
            assert base <= leader.first_index() - 1 <= limit[0]  # offered: what was released
            kept = leader.snapshots.indexes()
            assert base == 0 or base in kept, (base, kept)
            # base, newest and the cut points between
            assert len(kept) <= 2 + KEEP_CUT_POINTS, kept
            assert leader.core.log.reader.snapshot_meta().index == (base or kept[-1])
        assert leader.queue.first_index() > 100
        await c.stop()

    run(main())


def test_a_restart_after_a_snapshot_ahead_of_the_commit_checkpoint(tmp_path):
    """The commit checkpoint is written every commit_checkpoint_s; a node stopped (kill -9)
    after a snapshot and before the next checkpoint has applied > checkpoint. It used to
    refuse to start (RaftSafetyError "applied 10007 > committed 9929" in a chaos run)."""

    async def main():
        opts = NodeOptions(
            tick_ms=FAST.tick_ms,
            election_ticks=FAST.election_ticks,
            snapshot_every_entries=1_000_000,
            commit_checkpoint_s=3600.0,  # no checkpoint after the first election
        )
        c = InProcessRaftCluster(str(tmp_path), options=opts)
        await c.start()
        leader = await c.leader()
        await asyncio.gather(*(leader.apply(b"n%d" % i) for i in range(40)))
        await wait_until(
            lambda: leader.applied <= leader.core.log.stable_last(), what="applied is durable"
        )
        assert leader.snapshot_now() is True
        await wait_until(lambda: leader.snapshots.latest_meta().index >= 40, what="snapshot")
        victim = leader.id
        applied = leader.applied
        await c.stop_node(victim)
        node = await c.start_node(victim)
        assert node.applied == applied and node.commit_index >= applied
        await c.stop()

    run(main())


def test_cut_points_keep_base_newest_and_an_even_spread():
    assert cut_points([], 0, 4) == set()
    assert cut_points([50], 0, 4) == {50}
    idx = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    # below the base goes; the four between stay spread out (gaps 20, 20, 10, 10, 10)
    assert cut_points(idx, 30, 4) == {30, 50, 70, 80, 90, 100}
    # no snapshot at the base (a log cut before snapshots were kept): nothing below it
    assert cut_points(idx, 35, 2) == {50, 70, 100}
    assert cut_points(idx, 0, 20) == set(idx)


def test_snapshot_store_keeps_several_and_forgets_on_request(tmp_path):
    store = SnapshotStore(str(tmp_path))
    for i in (10, 20, 30):
        store.save(Snapshot(SnapshotMeta(i, 1, b"m%d" % i), b"state-%d" % i))
    again = SnapshotStore(str(tmp_path))
    assert again.indexes() == [10, 20, 30]
    assert again.load().data == b"state-30"  # a restart loads the newest
    assert again.chunk(0, 100, 20) == (b"state-20", True)
    assert again.meta_at(10) == SnapshotMeta(10, 1, b"m10")
    doomed = again.forget({20})
    assert again.indexes() == [20, 30]  # the newest is never forgotten
    again.delete_files(doomed)
    assert sorted(os.listdir(tmp_path)) == [
        "snapshot-00000000000000000020-1.snap",
        "snapshot-00000000000000000030-1.snap",
    ]
