"""RaftHost: many groups per process on one transport, one disk writer, coalesced beats."""

from __future__ import annotations

import asyncio
import os

import pytest

from raftlog.core import Role
from raftlog.runtime import HostOptions, NodeOptions, RaftGroup, RaftHost
from raftlog.transport import HOST_GROUP_ID, Beats, LocalNetwork
from tests.helpers.raft_inprocess import RecordingFSM, wait_until

# 500 ms election timeout: a loaded machine stalls event loops for 100 ms and more, and a
# leader change under apply_batch (LeaderChangedError) is not what these tests are about.
OPTS = NodeOptions(tick_ms=10, election_ticks=50)
IDS = (1, 2, 3)
PEERS = {i: f"local:{i}" for i in IDS}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


class Cluster:
    def __init__(
        self, base: str, groups: int, beat_ticks: int = 1, opts: NodeOptions = OPTS
    ) -> None:
        self.base = base
        self.beat_ticks = beat_ticks
        self.opts = opts
        self.net = LocalNetwork()
        self.group_ids = list(range(1, groups + 1))
        self.hosts: dict[int, RaftHost] = {}
        self.fsms: dict[tuple[int, int], RecordingFSM] = {}

    async def start(self) -> None:
        for i in IDS:
            await self.start_host(i)

    async def start_host(self, i: int) -> None:
        """Start (or, after stop_host, restart: a new process nonce) node i's host."""
        host = RaftHost(
            i,
            self.net.transport(i, groups=()),
            data_dir=os.path.join(self.base, f"n{i}"),
            options=HostOptions(tick_ms=self.opts.tick_ms, beat_ticks=self.beat_ticks),
        )
        await host.start()
        self.hosts[i] = host
        for g in self.group_ids:
            await self.add(i, g)

    async def stop_host(self, i: int) -> None:
        await self.hosts.pop(i).stop()

    async def add(self, node: int, g: int) -> RaftGroup:
        fsm = self.fsms[node, g] = RecordingFSM()
        return await self.hosts[node].add_group(g, PEERS, fsm, self.opts, seed=node * 100 + g)

    def leader(self, g: int) -> RaftGroup | None:
        leads = [
            h.groups[g] for h in self.hosts.values() if g in h.groups and h.groups[g].is_leader()
        ]
        return leads[0] if len(leads) == 1 else None

    async def leaders(self) -> dict[int, RaftGroup]:
        await wait_until(lambda: all(self.leader(g) for g in self.group_ids), what="leaders")
        return {g: self.leader(g) for g in self.group_ids}

    async def stop(self) -> None:
        for h in self.hosts.values():
            await h.stop()


def test_groups_elect_commit_and_beat_coalesced(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), groups=8)
        await c.start()
        leaders = await c.leaders()
        # all groups at once, so the shared writer sees several groups per round
        results = await asyncio.gather(
            *(
                lead.apply_batch([b"g%d-%d" % (g, k) for k in range(5)])
                for g, lead in leaders.items()
            )
        )
        assert [len(r) for r in results] == [5] * len(leaders)
        await wait_until(
            lambda: all(len(c.fsms[i, g].applied) == 5 for i in IDS for g in c.group_ids),
            what="every replica applies",
        )
        for g in c.group_ids:
            for i in IDS:
                assert [d for _, d in c.fsms[i, g].applied] == [
                    b"g%d-%d" % (g, k) for k in range(5)
                ]
        # Heartbeats travel coalesced: more group beats than messages carrying them.
        before = {
            i: (h.stats.beats_messages_sent, h.stats.beat_rows_sent) for i, h in c.hosts.items()
        }
        ticks0 = {i: h.stats.ticks for i, h in c.hosts.items()}
        await wait_until(
            lambda: all(h.stats.ticks >= ticks0[i] + 20 for i, h in c.hosts.items()),
            what="20 more ticks on every host",
        )
        msgs = sum(h.stats.beats_messages_sent - before[i][0] for i, h in c.hosts.items())
        rows = sum(h.stats.beat_rows_sent - before[i][1] for i, h in c.hosts.items())
        assert msgs > 0 and rows > msgs
        # One shared writer serves every group's log.
        for h in c.hosts.values():
            assert h.writer.stats.max_round_groups > 1
            assert sorted(h.env.open_groups()) == c.group_ids
        await c.stop()

    run(main())


def test_stale_term_beat_changes_nothing_and_unknown_group_rows_are_counted(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), groups=2)
        await c.start()
        leaders = await c.leaders()
        lead = leaders[1]
        fid = next(i for i in IDS if i != lead.id)
        other = next(i for i in IDS if i not in (lead.id, fid))
        f = c.hosts[fid].groups[1]
        core = f.core
        term = core.term
        assert term >= 1 and core.lead == lead.id
        # Everything below runs without awaiting: no tick or message in between.
        core.election_elapsed = 5
        stale = Beats(
            src=other, dst=fid, term=0, group_id=HOST_GROUP_ID, rows=[(1, term - 1, 0, 0)]
        )
        if term > 1:
            c.hosts[fid]._on_coalesced([stale])
            assert (core.term, core.lead, core.election_elapsed) == (term, lead.id, 5)
        # Control: a beat at the group's current term from its leader does count.
        fresh = Beats(src=lead.id, dst=fid, term=0, group_id=HOST_GROUP_ID, rows=[(1, term, 0, 0)])
        c.hosts[fid]._on_coalesced([fresh])
        assert core.election_elapsed == 0 and f.role is Role.FOLLOWER
        # A row for a group not hosted here is dropped alone and counted.
        core.election_elapsed = 5
        unknown_before = c.hosts[fid].stats.unknown_group_beats
        mixed = Beats(
            src=lead.id,
            dst=fid,
            term=0,
            group_id=HOST_GROUP_ID,
            rows=[(999, 1, 0, 0), (1, term, 0, 0)],
        )
        c.hosts[fid]._on_coalesced([mixed])
        assert c.hosts[fid].stats.unknown_group_beats == unknown_before + 1
        assert core.election_elapsed == 0
        await c.stop()

    run(main())


def test_stale_beat_term_rule_at_a_later_term(tmp_path):
    """The stale-term half of the rule, made certain: move group 1 to a later term first."""

    async def main():
        c = Cluster(str(tmp_path), groups=1)
        await c.start()
        lead = (await c.leaders())[1]
        target = next(i for i in IDS if i != lead.id)
        await lead.transfer_leader(target)
        new = (await c.leaders())[1]
        assert new.id == target and new.term >= 2
        fid = next(i for i in IDS if i != new.id)
        f = c.hosts[fid].groups[1]
        await wait_until(lambda: f.core.lead == new.id and f.core.term == new.term, what="follow")
        f.core.election_elapsed = 5
        old_term = new.term - 1
        stale = Beats(
            src=lead.id, dst=fid, term=0, group_id=HOST_GROUP_ID, rows=[(1, old_term, 0, 0)]
        )
        if lead.id == fid:  # the deposed leader itself: send the stale beat from the third node
            stale.src = next(i for i in IDS if i not in (fid, new.id))
        c.hosts[fid]._on_coalesced([stale])
        assert (f.core.term, f.core.lead, f.core.election_elapsed) == (new.term, new.id, 5)
        await c.stop()

    run(main())


def test_transfer_to_a_restarted_node_in_an_idle_quiesced_group(tmp_path):
    """The controller's case with partition groups: an idle group (no entry moves the
    transferee's match, so no append answer re-sends TimeoutNow) whose target restarts.
    The TimeoutNow sent while it was down is lost; its first heartbeat answer after the
    restart brings another. The leader's transfer window (one election timeout, 1.5 s
    here) is far longer than a restart of one group (a loaded loop must not lose it)."""
    opts = NodeOptions(tick_ms=10, election_ticks=100, quiesce_ticks=20)

    async def main():
        c = Cluster(str(tmp_path), groups=1, opts=opts)
        await c.start()
        lead = (await c.leaders())[1]
        await lead.apply_batch([b"x"])
        target = next(i for i in IDS if i != lead.id)
        await wait_until(
            lambda: lead.status()["followers"][target]["match"] == lead.core.log.last_index(),
            what="target caught up",
        )
        await c.stop_host(target)
        moving = asyncio.ensure_future(lead.transfer_leader(target, timeout=10.0))
        # TimeoutNow sent (match == last) into the void: the target is down.
        await wait_until(
            lambda: lead.core.lead_transferee == target and not lead.core.has_ready(),
            what="TimeoutNow sent",
        )
        assert lead.is_leader()
        await c.start_host(target)
        await moving
        new = c.hosts[target].groups[1]
        assert new.is_leader() and new.term == lead.term and lead.leader_id == target
        await c.stop()

    run(main())


def test_remove_a_group_then_reopen_it_or_delete_it(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), groups=3)
        await c.start()
        leaders = await c.leaders()
        victim = next(i for i in IDS if i != leaders[3].id)
        await leaders[3].apply_batch([b"a", b"b"])
        await wait_until(lambda: len(c.fsms[victim, 3].applied) == 2, what="replicated")
        host = c.hosts[victim]
        await host.remove_group(3)  # stopped, storage kept
        assert 3 not in host.groups
        # Peers still send group 3's traffic here: dropped and counted, nothing else stalls.
        await wait_until(
            lambda: (
                host.transport.stats.unknown_group_messages + host.stats.unknown_group_beats > 0
            ),
            what="group 3 traffic counted as unknown",
        )
        for g in (1, 2):
            assert (await leaders[g].apply(b"still")).index > 0
        await leaders[3].apply(b"c")  # two replicas of three still commit
        await c.add(victim, 3)  # reopened from groups/3/: recovers, then catches up
        await wait_until(
            lambda: [d for _, d in c.fsms[victim, 3].applied] == [b"a", b"b", b"c"],
            what="the reopened replica catches up",
        )
        # delete=True forgets the group's files and index keys: the id opens empty.
        # (Rejoining a group with a wiped replica is a membership change, not this.)
        await host.remove_group(3, delete=True)
        assert not os.path.exists(host.env.group_directory(3))
        log = host.env.open_log(3)
        assert (log.last_index(), log.hard_state().term) == (0, 0)
        log.close()
        await c.stop()

    run(main())


def test_add_group_refuses_bad_ids_and_ticks(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), groups=1)
        await c.start()
        host = c.hosts[1]
        with pytest.raises(ValueError, match="already hosted"):
            await host.add_group(1, PEERS, RecordingFSM(), OPTS)
        with pytest.raises(ValueError, match="group id"):
            await host.add_group(HOST_GROUP_ID, PEERS, RecordingFSM(), OPTS)
        with pytest.raises(ValueError, match="ticks every"):
            await host.add_group(2, PEERS, RecordingFSM(), NodeOptions(tick_ms=20))
        assert sorted(host.groups) == [1]
        await c.stop()

    run(main())


@pytest.mark.parametrize("beat_ticks", [1, 3])
def test_idle_groups_beat_one_message_per_peer_per_round_handled_inline(tmp_path, beat_ticks):
    """Idle groups: heartbeat answers wait for the host's next beat tick and leave with
    its own heartbeats (HostOptions.defer_beat_answers), so each host sends about one
    message per peer per beat round, not two; with beat_ticks 3 the groups' beats,
    made at their own phases (heartbeat_ticks 3), are held to the host's beat tick:
    one message per peer per 3 ticks, not one per tick; and the Readies of
    heartbeats and answers (no disk write, no role change) are handled inline,
    without the raft loop."""

    async def main():
        c = Cluster(str(tmp_path), groups=8, beat_ticks=beat_ticks)
        await c.start()
        await c.leaders()
        # every group committed its leader's no-op everywhere: nothing left to write
        await wait_until(
            lambda: all(
                h.groups[g].status()["durable_index"] >= 1 and not h.groups[g]._pipeline
                for h in c.hosts.values()
                for g in c.group_ids
            ),
            what="groups settled",
        )
        before = {i: (h.transport.stats.sent_batches, h.stats.ticks) for i, h in c.hosts.items()}
        ready0 = {i: h.status()["readies"] for i, h in c.hosts.items()}
        inline0 = {i: h.status()["inline_readies"] for i, h in c.hosts.items()}
        await wait_until(
            lambda: all(h.stats.ticks >= before[i][1] + 40 for i, h in c.hosts.items()),
            what="40 more ticks on every host",
        )
        for i, h in c.hosts.items():
            writes = h.transport.stats.sent_batches - before[i][0]
            ticks = h.stats.ticks - before[i][1]
            # 2 peers: 2 writes a round with answers deferred, 4 without (a round is
            # OPTS.heartbeat_ticks ticks; with beat_ticks 1 the 8 groups' beats leave
            # at their own phases: up to one write per peer per tick)
            rounds = ticks / beat_ticks
            assert writes <= 2 * rounds * 1.25, (i, writes, ticks)
            st = h.status()
            readies = st["readies"] - ready0[i]
            inline = st["inline_readies"] - inline0[i]
            assert readies > 0 and inline >= 0.9 * readies, (i, inline, readies)
        # and the groups still commit (the inline path never swallows real work)
        leaders = await c.leaders()
        await asyncio.gather(*(lead.apply_batch([b"after-%d" % g]) for g, lead in leaders.items()))
        await wait_until(
            lambda: all(
                c.fsms[i, g].applied and c.fsms[i, g].applied[-1][1] == b"after-%d" % g
                for i in IDS
                for g in c.group_ids
            ),
            what="every replica applies after the idle period",
        )
        await c.stop()

    run(main())


def test_a_group_still_opening_has_an_empty_configuration(tmp_path):
    # A host lists a group before its storage and core exist (start_group opens it);
    # readers such as the leader balancer ask its membership then.
    async def main():
        net = LocalNetwork()
        host = RaftHost(1, net.transport(1, groups=()), data_dir=str(tmp_path))
        group = RaftGroup(host, 7, PEERS, RecordingFSM(), OPTS)
        assert group.membership() == {"voters": [], "learners": []}

    asyncio.run(main())
