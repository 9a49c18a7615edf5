"""RaftNode runtime on an in-process network: replicate, fail over, restart, snapshot."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.runtime import LeaderChangedError, NodeOptions, NotLeaderError
from tests.helpers.raft_inprocess import FAST, InProcessRaftCluster, wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def test_replicates_and_applies_everywhere_in_order(tmp_path):
    async def main():
        # One leader throughout (its term is asserted below): an election timeout of 1-2 s,
        # not FAST's 0.1-0.2 s, which a loaded CI machine's stall can exceed (seen with
        # two pytest-xdist workers), electing mid-batch.
        c = InProcessRaftCluster(str(tmp_path), options=NodeOptions(tick_ms=10, election_ticks=100))
        await c.start()
        leader = await c.leader()
        results = await asyncio.gather(*(leader.apply(b"v%d" % i) for i in range(200)))
        indexes = [r.index for r in results]
        assert sorted(indexes) == indexes or len(set(indexes)) == 200
        await wait_until(lambda: all(len(f.applied) == 200 for f in c.fsms.values()), what="apply")
        logs = [f.applied for f in c.fsms.values()]
        assert logs[0] == logs[1] == logs[2]
        assert sorted(d for _, d in logs[0]) == sorted(b"v%d" % i for i in range(200))
        assert c.fsms[leader.id].leader_terms == [leader.core.term]
        follower = next(n for n in c.nodes.values() if not n.is_leader())
        with pytest.raises(NotLeaderError) as err:
            await follower.apply(b"x")
        assert err.value.leader_id == leader.id and err.value.leader_address == f"local:{leader.id}"
        assert await follower.read_index() >= 200
        await c.stop()

    run(main())


async def _apply_all(c: InProcessRaftCluster, values: list[bytes], exclude: int = 0) -> None:
    """Apply each value once it is known committed: at the current leader, again at the
    next one when leadership moved (a loaded machine can elect mid-batch; an outcome
    that was unknown may then be applied twice, which the caller tolerates)."""
    for v in values:
        while True:
            leader = await c.leader(exclude=exclude) if exclude else await c.leader()
            try:
                await leader.apply(v)
                break
            except (LeaderChangedError, NotLeaderError):
                continue


def test_failover_and_restart_catch_up(tmp_path):
    async def main():
        c = InProcessRaftCluster(str(tmp_path))
        await c.start()
        await _apply_all(c, [b"a%d" % i for i in range(50)])
        old_id = (await c.leader()).id
        await c.stop_node(old_id)
        await _apply_all(c, [b"b%d" % i for i in range(50)], exclude=old_id)
        await c.start_node(old_id)
        new = await c.leader()
        want = {b"a%d" % i for i in range(50)} | {b"b%d" % i for i in range(50)}
        await wait_until(
            lambda: (
                {d for _, d in c.fsms[old_id].applied} == want
                and c.fsms[old_id].applied == c.fsms[new.id].applied
            ),
            what="restarted node catches up",
        )
        await c.stop()

    run(main())


# Proposals outlive their leader's step-down only as long as these tests choose:
# outcome_wait_ticks of 100,000 ticks (1,000 s) waits for the outcome whatever the
# machine's load; a 600 s proposal timeout leaves outcome_wait_ticks the only clock.
PATIENT = NodeOptions(
    tick_ms=FAST.tick_ms,
    election_ticks=FAST.election_ticks,
    outcome_wait_ticks=100_000,
    proposal_timeout_s=600,
)
IMPATIENT = NodeOptions(
    tick_ms=FAST.tick_ms, election_ticks=FAST.election_ticks, proposal_timeout_s=600
)


async def _isolated_leader_proposing(tmp_path, options: NodeOptions):
    """A 3-node cluster whose leader is cut off right after it was asked to apply
    b"lost?" -> (cluster, old leader, the pending apply)."""
    c = InProcessRaftCluster(str(tmp_path), options=options)
    await c.start()
    old = await c.leader()
    c.net.isolate(old.id)
    return c, old, asyncio.ensure_future(old.apply(b"lost?"))


def test_isolated_leader_steps_down_and_its_replaced_proposal_fails(tmp_path):
    async def main():
        c, old, pending = await _isolated_leader_proposing(tmp_path, PATIENT)
        led = old.core.term
        await wait_until(lambda: not old.is_leader(), what="CheckQuorum step-down")
        new = await c.leader(exclude=old.id)
        # Cut off, the old leader knows no leader: its epoch stays the term it led in,
        # whatever its own term is now; the new leader's is its term.
        assert old.leader_id == 0 and old.leader_epoch() == led
        assert new.leader_epoch() == new.core.term > led
        r = await new.apply(b"after")
        # The outcome is not known while the old leader is cut off: it keeps waiting.
        assert not pending.done()
        c.net.heal()
        # Back in touch, it learns that the new leader replaced its entry.
        with pytest.raises(LeaderChangedError, match="replaced by a later leader"):
            await pending
        await wait_until(
            lambda: any(d == b"after" for _, d in c.fsms[old.id].applied), what="old leader rejoins"
        )
        assert c.fsms[old.id].applied == c.fsms[new.id].applied[: len(c.fsms[old.id].applied)]
        assert b"lost?" not in {d for _, d in c.fsms[new.id].applied}
        assert r.index > 0
        assert old.status()["pending_proposals"] == 0
        await c.stop()

    run(main())


def test_a_cut_off_old_leader_stops_waiting_after_outcome_wait_ticks(tmp_path):
    async def main():
        c, old, pending = await _isolated_leader_proposing(tmp_path, IMPATIENT)
        # Still cut off: only outcome_wait_ticks (0.4 s here) can end the wait.
        with pytest.raises(LeaderChangedError, match="leadership lost; outcome unknown"):
            await pending
        assert not old.is_leader()
        assert old.status()["pending_proposals"] == 0
        await c.stop()

    run(main())


def test_a_proposal_that_a_later_leader_commits_succeeds_on_the_old_leader(tmp_path):
    """The followers get the entry but their acknowledgements never reach the leader:
    it steps down (CheckQuorum) not knowing, a follower takes over and commits the
    entry. The old leader's caller must hear success, not "failed": a client told
    "failed" for a committed write, without idempotence, writes it twice."""

    async def main():
        c = InProcessRaftCluster(str(tmp_path), options=PATIENT)
        await c.start()
        old = await c.leader()
        others = [i for i in c.ids if i != old.id]
        # Both followers in the replicate state first: a leader still probing a
        # follower sends it nothing more until that follower answers, and with its
        # answers cut the entry would never reach it (seen on a loaded machine).
        warm = await old.apply(b"warm")
        await wait_until(
            lambda: all(
                f["state"] == "replicate" and f["match"] >= warm.index
                for f in old.status()["followers"].values()
            ),
            what="both followers replicating",
        )
        for i in others:
            c.net.cut(i, old.id)
        pending = asyncio.ensure_future(old.apply(b"kept"))
        await wait_until(
            lambda: all(any(d == b"kept" for _, d in c.fsms[i].applied) for i in others),
            what="a later leader commits the entry",
        )
        assert not old.is_leader()
        assert not pending.done()
        c.net.heal()
        r = await pending
        assert r.index == next(i for i, d in c.fsms[others[0]].applied if d == b"kept")
        assert [d for _, d in c.fsms[others[0]].applied].count(b"kept") == 1
        assert old.status()["pending_proposals"] == 0
        await c.stop()

    run(main())


def test_snapshot_compacts_and_a_new_node_state_is_rebuilt(tmp_path):
    async def main():
        opts = NodeOptions(
            tick_ms=FAST.tick_ms,
            election_ticks=FAST.election_ticks,
            snapshot_every_entries=50,
            snapshot_keep_entries=10,
        )
        c = InProcessRaftCluster(str(tmp_path), options=opts)
        await c.start()
        leader = await c.leader()
        lagging = next(i for i in c.ids if i != leader.id)
        await c.stop_node(lagging)
        for k in range(4):
            await asyncio.gather(*(leader.apply(b"s%d-%d" % (k, i)) for i in range(50)))
        await wait_until(lambda: leader.queue.first_index() > 100, what="log compaction")
        await c.start_node(lagging)
        await wait_until(
            lambda: len(c.fsms[lagging].applied) == 200, what="lagging node installs the snapshot"
        )
        assert c.fsms[lagging].applied == c.fsms[leader.id].applied
        assert c.nodes[lagging].stats.snapshots_installed >= 1
        await c.stop()

    run(main())


def test_snapshot_now_compacts_without_waiting_for_the_entry_count(tmp_path):
    """snapshot_now (the sink's disk-full hook) snapshots and gives the log prefix back at
    once, though snapshot_every_entries is far away; a second call has nothing new."""

    async def main():
        opts = NodeOptions(
            tick_ms=FAST.tick_ms,
            election_ticks=FAST.election_ticks,
            snapshot_every_entries=1_000_000,
            snapshot_keep_entries=0,
        )
        c = InProcessRaftCluster(str(tmp_path), options=opts)
        await c.start()
        leader = await c.leader()
        await asyncio.gather(*(leader.apply(b"n%d" % i) for i in range(40)))
        assert leader.queue.first_index() <= 1  # nothing compacted by the entry count
        await wait_until(
            lambda: leader.applied <= leader.core.log.stable_last(), what="applied is durable"
        )
        assert leader.snapshot_now() is True
        await wait_until(lambda: leader.queue.first_index() > 30, what="prefix given back")
        assert leader.stats.snapshots_taken == 1
        assert leader.snapshot_now() is False  # nothing applied since
        await c.stop()

    run(main())


def test_membership_learner_promotion_and_removal(tmp_path):
    async def main():
        c = InProcessRaftCluster(str(tmp_path))
        await c.start()
        leader = await c.leader()
        await asyncio.gather(*(leader.apply(b"m%d" % i) for i in range(30)))
        joiner = await c.start_node(4, join=True)
        assert joiner.membership()["voters"] == []  # never campaigns before it has the log
        await leader.add_learner(4, "local:4")
        await wait_until(lambda: len(c.fsms[4].applied) == 30, what="learner catches up")
        assert leader.membership() == {"voters": [1, 2, 3], "learners": [4]}
        await leader.add_voter(4, "local:4")
        assert leader.membership()["voters"] == [1, 2, 3, 4]
        victim = next(i for i in (1, 2, 3) if i != leader.id)
        await leader.remove_node(victim)
        await c.stop_node(victim)
        # Three voters left (leader, the other original, 4): still a quorum.
        r = await leader.apply(b"after-change")
        await wait_until(
            lambda: any(d == b"after-change" for _, d in c.fsms[4].applied),
            what="new voter applies",
        )
        assert leader.membership()["voters"] == sorted({1, 2, 3, 4} - {victim})
        assert r.index > 30
        await c.stop()

    run(main())


def test_stale_and_foreign_messages_are_harmless(tmp_path):
    from raftlog.core.messages import AppendEntries, RequestVote
    from raftlog.entry import EntryType, LogEntry

    async def main():
        c = InProcessRaftCluster(str(tmp_path))
        await c.start()
        leader = await c.leader()
        await asyncio.gather(*(leader.apply(b"s%d" % i) for i in range(10)))
        follower = next(n for n in c.nodes.values() if not n.is_leader())
        term = leader.core.term
        # A deposed leader's append from an old term, and a vote request from a
        # stale candidate: both must be refused without touching the log.
        follower._on_messages(
            [
                AppendEntries(
                    src=leader.id,
                    dst=follower.id,
                    term=term - 1 if term > 1 else 0,
                    prev_index=2,
                    prev_term=1,
                    entries=[LogEntry(3, 1, EntryType.DATA, b"evil")],
                ),
                RequestVote(src=leader.id, dst=follower.id, term=term, last_index=0, last_term=0),
            ]
        )
        await asyncio.gather(*(leader.apply(b"t%d" % i) for i in range(10)))
        await wait_until(lambda: len(c.fsms[follower.id].applied) == 20, what="follower applies")
        assert all(d != b"evil" for _, d in c.fsms[follower.id].applied)
        assert leader.is_leader() and leader.core.term == term
        await c.stop()

    run(main())


def test_a_leader_whose_process_stalled_past_its_lease_is_not_current(tmp_path):
    # After a stall (SIGSTOP, a long pause) the loop runs I/O callbacks, such as a Kafka
    # request waiting in a socket, before its timers: until the tick loop has run again,
    # the leader may have been deposed without knowing it, so it is not current.
    import time

    async def main():
        c = InProcessRaftCluster(str(tmp_path), options=NodeOptions(tick_ms=10, election_ticks=100))
        await c.start()
        leader = await c.leader()
        o = leader.options
        lease_s = (o.election_ticks - o.heartbeat_ticks) * o.tick_ms / 1000
        await wait_until(leader.leads_current, what="a current leader")
        time.sleep(lease_s + 0.1)  # the whole process stalls: no tick, no callback
        assert leader.is_leader() and not leader.leads_current()
        await wait_until(lambda: leader.leads_current() or not leader.is_leader(), what="a tick")
        await c.stop()

    run(main())
