"""The runtime's side of "damaged storage is repaired, not fatal" (issue 12), in process:
a node whose log recovery repaired runs under a new incarnation, never votes until the
leader has caught it up and re-admitted it, and keeps its intact prefix; a single-node
cluster stops instead (nobody can vouch for the cut entries) and cuts nothing. A damaged
BASE snapshot (nothing on the node can rebuild that state) discards the group's whole
storage: set aside, blank storage, a new incarnation, a snapshot from the leader."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import pytest

from raftlog.runtime import HostOptions, RaftGroup, RaftHost, RaftNode
from raftlog.runtime import group_storage as group_storage_module
from raftlog.runtime.errors import LeaderChangedError, NotLeaderError
from raftlog.runtime.group_storage import discard_marker_path
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
        with open(newest, "rb") as f:
            damaged = f.read()
        fsm2 = RecordingFSM()
        node = make(fsm2)
        await node.start()
        await wait_until(lambda: node.applied >= len(applied), what="the state rebuilt")
        assert [v for _, v in fsm2.applied][-len(applied) :] == applied[-len(fsm2.applied) :]
        assert os.path.exists(newest + ".damaged")
        if os.path.exists(newest):  # the rebuilt node took its snapshot at that index again
            with open(newest, "rb") as f:
                assert f.read() != damaged
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
        with pytest.raises(CorruptLogError, match=r"compacted to entry.*single-node"):
            await node.start()
        # nothing discarded: no marker, the log and the snapshots where they were
        assert not os.path.exists(discard_marker_path(d, 0))
        assert not [n for n in os.listdir(d) if ".damaged-" in n]
        assert os.path.exists(base_file)

    asyncio.run(main())


# snapshots every 40 entries, the log cut 60 entries behind the newest: a few hundred
# entries give every node a compacted log with a base snapshot
COMPACTING = dataclasses.replace(
    SMALL_SEGMENTS, snapshot_every_entries=40, snapshot_keep_entries=60
)


def _base_snapshot(node_dir: str) -> tuple[int, str]:
    """(index, file) of the base snapshot of a stopped node's storage (its log's first - 1)."""
    store = LogStore.open(os.path.join(node_dir, "log"))
    base = store.first_index() - 1
    store.close()
    assert base > 0, "the log was never compacted"
    snap_dir = os.path.join(node_dir, "snapshots")
    prefix = f"snapshot-{base:020d}-"
    (name,) = [n for n in os.listdir(snap_dir) if n.startswith(prefix) and n.endswith(".snap")]
    return base, os.path.join(snap_dir, name)


def _damage_file(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"XYZ")


async def _compacted_cluster(base: str, options=COMPACTING) -> tuple[InProcessRaftCluster, int]:
    """A 3-node cluster whose nodes all vote, with a follower (returned) holding a
    compacted log and its base snapshot; the follower is stopped."""
    c = InProcessRaftCluster(base, options=options)
    await c.start()
    for i in range(0, 240, 30):
        await asyncio.gather(*(_apply_somewhere(c, b"v%04d" % k, 0) for k in range(i, i + 30)))
    if options.identity:
        await wait_until(
            lambda: all(
                n.status()["identity"]["may_vote"]
                and n.status()["identity"]["recorded"] == n.status()["identity"]["incarnation"]
                for n in c.nodes.values()
            ),
            what="every node admitted",
        )
    leader = await c.leader()
    victim = next(i for i in c.nodes if i != leader.id)
    # Every node's log compacted, not only the victim's: whichever node leads when the
    # victim returns empty holds no entry 1 and must send its base snapshot (a leader
    # that had not compacted yet, on a loaded machine, sent entries instead: a failure).
    await wait_until(
        lambda: all(
            n.queue.first_index() > 1 and n.snapshots.meta_at(n.queue.first_index() - 1) is not None
            for n in c.nodes.values()
        ),
        what="every node's log compacted to a base snapshot",
    )
    await c.stop_node(victim)
    return c, victim


async def _readmitted_with_the_same_state(c: InProcessRaftCluster, victim: int) -> None:
    """A record applied after the restart reaches the victim, which is a voter again under
    its recorded incarnation and holds the same state as the leader."""
    node = c.nodes[victim]
    leader = await _apply_somewhere(c, b"after", exclude=victim)
    await wait_until(
        lambda: (
            node.status()["identity"]["may_vote"]
            and node.status()["identity"]["recorded"] == node.status()["identity"]["incarnation"]
            and any(d == b"after" for _, d in c.fsms[victim].applied)
            and node.queue.last_index() == leader.queue.last_index()
            and node.applied == leader.applied
        ),
        what="the discarded node caught up and re-admitted",
    )
    assert node.stats.snapshots_installed >= 1  # it held nothing: the leader sent its base
    assert leader.membership()["voters"] == [1, 2, 3]
    assert c.fsms[victim].applied == c.fsms[leader.id].applied


def test_a_damaged_base_snapshot_discards_the_storage_and_the_node_is_readmitted(tmp_path):
    async def main():
        c, victim = await _compacted_cluster(str(tmp_path))
        node_dir = os.path.join(str(tmp_path), f"n{victim}")
        old_inc = LogStore.open(os.path.join(node_dir, "log"))
        old_stamp = old_inc.identity_stamp()
        old_inc.close()
        _base, base_file = _base_snapshot(node_dir)
        _damage_file(base_file)
        node = await c.start_node(victim)
        st = node.status()["identity"]
        # blank storage under a new incarnation, which may not vote (it has heard no leader)
        assert st["incarnation"] != old_stamp and not st["may_vote"]
        assert node.queue.last_index() == 0 and node.applied == 0
        # set aside, not deleted: the damaged file keeps its .damaged name inside
        names = os.listdir(node_dir)
        (log_aside,) = [n for n in names if n.startswith("log.damaged-")]
        (snaps_aside,) = [n for n in names if n.startswith("snapshots.damaged-")]
        aside = os.listdir(os.path.join(node_dir, snaps_aside))
        assert os.path.basename(base_file) + ".damaged" in aside
        assert os.listdir(os.path.join(node_dir, log_aside, "segments"))
        assert not os.path.exists(discard_marker_path(node_dir, 0))  # incarnation durable
        await _readmitted_with_the_same_state(c, victim)
        # a restart of the re-admitted node keeps its (new, recorded) storage
        inc = node.status()["identity"]["incarnation"]
        await c.stop_node(victim)
        node = await c.start_node(victim)
        assert node.status()["identity"]["incarnation"] == inc
        await c.stop()

    asyncio.run(main())


class _Crash(Exception):
    """Stands for the process dying at that point (the test closes what a dead process
    would no longer hold)."""


@pytest.mark.parametrize("where", ["before_rename", "before_identity"])
def test_a_crash_in_the_middle_of_a_discard_is_finished_by_the_next_start(
    tmp_path, monkeypatch, where
):
    """The node stops after the discard marker (before anything is renamed) or after the
    renames and the blank storage's opening (before the new incarnation is made): the
    next start finishes the discard, never runs on half-discarded storage nor under
    the old incarnation, and the node is caught up and re-admitted."""

    async def main():
        c, victim = await _compacted_cluster(str(tmp_path))
        node_dir = os.path.join(str(tmp_path), f"n{victim}")
        store = LogStore.open(os.path.join(node_dir, "log"))
        old_stamp = store.identity_stamp()
        store.close()
        _base, base_file = _base_snapshot(node_dir)
        _damage_file(base_file)

        if where == "before_rename":

            def crash(path: str) -> str | None:
                raise _Crash(path)

            monkeypatch.setattr(group_storage_module, "set_aside_directory", crash)
        else:

            def crash(ident, group_id, store, damage=""):
                store.close()
                raise _Crash(damage)

            monkeypatch.setattr(group_storage_module, "resolve", crash)
        crashed = RaftNode(
            victim,
            node_dir,
            {j: f"local:{j}" for j in c.ids},
            RecordingFSM(),
            c.net.transport(victim),
            COMPACTING,
            seed=victim,
        )
        with pytest.raises(_Crash):
            await crashed.start()
        await crashed.stop()
        monkeypatch.undo()
        assert os.path.exists(discard_marker_path(node_dir, 0))
        renamed = [n for n in os.listdir(node_dir) if ".damaged-" in n]
        assert (where == "before_rename") == (not renamed), renamed

        node = await c.start_node(victim)
        st = node.status()["identity"]
        assert st["incarnation"] != old_stamp and not st["may_vote"]
        assert node.queue.last_index() == 0 and node.applied == 0
        assert not os.path.exists(discard_marker_path(node_dir, 0))
        assert any(n.startswith("snapshots.damaged-") for n in os.listdir(node_dir))
        await _readmitted_with_the_same_state(c, victim)
        await c.stop()

    asyncio.run(main())


def test_a_damaged_base_snapshot_still_stops_a_node_without_identity(tmp_path):
    """Identity off: a blank node could vote with less than it acknowledged, so the
    damaged base snapshot stops it loudly, and nothing is moved or discarded."""

    async def main():
        opts = dataclasses.replace(COMPACTING, identity=False)
        c, victim = await _compacted_cluster(str(tmp_path), options=opts)
        node_dir = os.path.join(str(tmp_path), f"n{victim}")
        _base, base_file = _base_snapshot(node_dir)
        _damage_file(base_file)
        before = sorted(os.listdir(node_dir))
        with pytest.raises(CorruptLogError, match="node identity is off"):
            await c.start_node(victim)
        assert sorted(os.listdir(node_dir)) == before
        assert os.path.exists(base_file)
        await c.stop()

    asyncio.run(main())


def test_a_host_group_with_a_damaged_base_snapshot_discards_only_its_own_storage(tmp_path):
    """A RaftHost group (groups/<id>/ in a shared data directory, its keys in the shared
    index): the damaged base snapshot sets aside that group's directory and forgets its
    index keys; the host's other group keeps its storage and incarnation."""

    async def main():
        net = LocalNetwork()
        peers = {i: f"local:{i}" for i in (1, 2, 3)}
        hosts: dict[int, RaftHost] = {}
        fsms: dict[tuple[int, int], RecordingFSM] = {}

        async def add(i: int, g: int) -> RaftGroup:
            fsms[i, g] = RecordingFSM()
            return await hosts[i].add_group(g, peers, fsms[i, g], COMPACTING, seed=i * 10 + g)

        for i in peers:
            hosts[i] = RaftHost(
                i,
                net.transport(i, groups=()),
                data_dir=os.path.join(str(tmp_path), f"n{i}"),
                options=HostOptions(tick_ms=COMPACTING.tick_ms, storage=COMPACTING.storage),
            )
            await hosts[i].start()
            for g in (1, 2):
                await add(i, g)

        def leader(g: int) -> RaftGroup | None:
            leads = [
                h.groups[g] for h in hosts.values() if g in h.groups and h.groups[g].is_leader()
            ]
            return leads[0] if len(leads) == 1 else None

        async def apply(g: int, data: bytes) -> RaftGroup:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                await wait_until(lambda: leader(g) is not None, what=f"a leader of group {g}")
                lead = leader(g)
                try:
                    await lead.apply(data)
                    return lead
                except (NotLeaderError, LeaderChangedError):
                    assert asyncio.get_running_loop().time() < deadline, "no stable leader"

        for i in range(0, 240, 30):
            await asyncio.gather(*(apply(1, b"v%04d" % k) for k in range(i, i + 30)))
        await apply(2, b"other")

        def admitted(grp: RaftGroup) -> bool:
            st = grp.status()["identity"]
            return st["may_vote"] and st["recorded"] == st["incarnation"]

        await wait_until(
            lambda: all(admitted(h.groups[g]) for h in hosts.values() for g in (1, 2)),
            what="every replica admitted",
        )
        victim = next(i for i in peers if i != leader(1).id)
        grp = hosts[victim].groups[1]
        await wait_until(
            lambda: (
                grp.queue.first_index() > 1
                and grp.snapshots.meta_at(grp.queue.first_index() - 1) is not None
            ),
            what="the follower's log compacted to a base snapshot",
        )
        old = {g: hosts[victim].groups[g].status()["identity"]["incarnation"] for g in (1, 2)}
        host = hosts[victim]
        await host.remove_group(1)  # stopped, storage kept
        log = host.env.open_log(1)
        base = log.first_index() - 1
        log.close()
        group_dir = host.env.group_directory(1)
        snap_dir = os.path.join(group_dir, "snapshots")
        (name,) = [n for n in os.listdir(snap_dir) if n.startswith(f"snapshot-{base:020d}-")]
        _damage_file(os.path.join(snap_dir, name))

        grp = await add(victim, 1)
        st = grp.status()["identity"]
        assert st["incarnation"] != old[1] and not st["may_vote"]
        assert grp.queue.last_index() == 0 and grp.applied == 0
        groups_root = os.path.dirname(group_dir)
        (aside,) = [n for n in os.listdir(groups_root) if n.startswith("1.damaged-")]
        assert name + ".damaged" in os.listdir(os.path.join(groups_root, aside, "snapshots"))
        assert host.group_ids_on_disk() == [1, 2]  # the set-aside copy is never reopened
        assert host.groups[2].status()["identity"]["incarnation"] == old[2]
        assert not os.path.exists(discard_marker_path(host.data_dir, 1))

        lead = await apply(1, b"after")
        await wait_until(
            lambda: (
                admitted(grp)
                and grp.applied == lead.applied
                and any(d == b"after" for _, d in fsms[victim, 1].applied)
            ),
            what="the discarded replica caught up and re-admitted",
        )
        assert grp.stats.snapshots_installed >= 1
        assert fsms[victim, 1].applied == fsms[lead.id, 1].applied
        for h in hosts.values():
            await h.stop()

    asyncio.run(asyncio.wait_for(main(), timeout=120))
