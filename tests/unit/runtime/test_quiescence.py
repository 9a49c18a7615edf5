"""Quiescence and node liveness in RaftHost (docs/raft-runtime.md, "Quiescence").

Three hosts in one process over a LocalNetwork (messages go through the real
codec). Bounds are counted in host ticks, not wall time: every host shares the
one event loop, so a stalled loop delays all of them alike.
"""

from __future__ import annotations

import asyncio
import os

from raftlog.core import Role
from raftlog.runtime import HostOptions, NodeOptions, RaftGroup, RaftHost
from raftlog.transport import HOST_GROUP_ID, Beats, LocalNetwork
from tests.helpers.raft_inprocess import RecordingFSM, wait_until

T = 20  # election ticks
OPTS = NodeOptions(tick_ms=10, election_ticks=T, quiesce_ticks=4)
SLOW = NodeOptions(tick_ms=50, election_ticks=T, quiesce_ticks=4)
"""For the first-election stagger: the voters other than the preferred one campaign 3
election timeouts later, 3-6 s here rather than 0.6-1.2 s, so a loaded machine's event
loop stalls (seen: one over 0.6 s while CI ran beside) cannot let another voter win."""
IDS = (1, 2, 3)
PEERS = {i: f"local:{i}" for i in IDS}
GROUPS = (1, 2, 3, 4)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


class Cluster:
    def __init__(self, base: str, quiesce: bool = True, beat_ticks: int = 1) -> None:
        self.base = base
        self.net = LocalNetwork()
        self.hosts: dict[int, RaftHost] = {}
        self.quiesce = quiesce
        self.beat_ticks = beat_ticks

    async def start(self) -> None:
        for i in IDS:
            host = RaftHost(
                i,
                self.net.transport(i, groups=()),
                data_dir=os.path.join(self.base, f"n{i}"),
                options=HostOptions(
                    tick_ms=OPTS.tick_ms,
                    quiesce=self.quiesce,
                    # the silence limit at its floor, T (a cut-off host, below, is seen by
                    # silence only: LocalNetwork reports no broken stream)
                    liveness_silence_ms=OPTS.tick_ms * T,
                    node_beat_ticks=2,  # 10 node beats per silence limit
                    beat_ticks=self.beat_ticks,
                ),
            )
            await host.start()
            self.hosts[i] = host
            for g in GROUPS:
                await host.add_group(g, PEERS, RecordingFSM(), OPTS, seed=i * 100 + g)

    def leader(self, g: int, among: tuple[int, ...] = IDS) -> RaftGroup | None:
        leads = [self.hosts[i].groups[g] for i in among if self.hosts[i].groups[g].is_leader()]
        return leads[0] if len(leads) == 1 else None

    async def leaders(self) -> dict[int, RaftGroup]:
        await wait_until(lambda: all(self.leader(g) for g in GROUPS), what="leaders")
        return {g: self.leader(g) for g in GROUPS}

    def all_quiesced(self, among: tuple[int, ...] = IDS) -> bool:
        return all(len(self.hosts[i]._quiet) == len(GROUPS) for i in among)

    async def quiet(self) -> dict[int, RaftGroup]:
        leaders = await self.leaders()
        for g, lead in leaders.items():
            await lead.apply(b"x%d" % g)
        # generous: on a loaded box a stall can wake groups (a peer looks silent) more
        # than once before all settle; the assertions after it are what the tests check
        await wait_until(self.all_quiesced, 60.0, what="every group quiesced on every host")
        return leaders

    async def stop(self) -> None:
        for h in self.hosts.values():
            await h.stop()


async def _ticks(host: RaftHost, n: int) -> None:
    end = host.stats.ticks + n
    await wait_until(lambda: host.stats.ticks >= end, what=f"{n} ticks")


def test_idle_groups_quiesce_then_only_node_beats_flow(tmp_path):
    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            await c.quiet()
            h = c.hosts[1]
            node_beats = h.stats.node_beats_sent
            rows = {i: c.hosts[i].stats.beat_rows_sent for i in IDS}
            ticked_before = {i: c.hosts[i].stats.ticks for i in IDS}
            # (a host opening its groups slowly on a loaded box may have looked down to
            # the others at start-up: count only the idle window)
            down_before = {i: c.hosts[i].stats.peers_declared_down for i in IDS}
            await _ticks(h, 3 * T)
            # no group beat for three election timeouts, no election
            assert {i: c.hosts[i].stats.beat_rows_sent for i in IDS} == rows
            # one per peer every node_beat_ticks (2) ticks
            assert h.stats.node_beats_sent >= node_beats + 2 * (3 * T // 2 - 2)
            assert c.all_quiesced()
            assert {i: c.hosts[i].stats.peers_declared_down for i in IDS} == down_before
            assert all(c.hosts[i].stats.ticks > ticked_before[i] for i in IDS)
            terms = {g: c.leader(g).term for g in GROUPS}
            assert all(t >= 1 for t in terms.values())
            st = h.status()
            assert st["quiesced_groups"] == len(GROUPS) and st["quiescence"] is True
        finally:
            await c.stop()

    run(main())


def test_an_idle_host_wakes_on_beat_ticks_only_and_still_serves(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), beat_ticks=3)
        await c.start()
        try:
            await c.quiet()
            h = c.hosts[1]
            down_before = {i: c.hosts[i].stats.peers_declared_down for i in IDS}
            ticks, wakes = h.stats.ticks, h.stats.tick_wakes
            await _ticks(h, 3 * T)
            # every group quiesced: one wake-up per beat tick (3 ticks), the ticks
            # in between run there (node liveness counts them: nobody looks silent).
            # At most half (not a third): on a loaded box a group may wake and
            # quiesce again within the window, ticking every tick meanwhile.
            assert c.all_quiesced()
            assert h.stats.tick_wakes - wakes <= (h.stats.ticks - ticks) // 2
            assert {i: c.hosts[i].stats.peers_declared_down for i in IDS} == down_before
            # a proposal wakes its group, which ticks every tick again, commits, and
            # quiesces again
            lead = c.leader(1)
            assert lead is not None
            await lead.apply(b"after the idle")
            await wait_until(c.all_quiesced, 60.0, what="quiesced again")
            ticks, wakes = h.stats.ticks, h.stats.tick_wakes
            await _ticks(h, 3 * T)
            assert h.stats.tick_wakes - wakes <= (h.stats.ticks - ticks) // 2
        finally:
            await c.stop()

    run(main())


def test_a_busy_host_wakes_on_every_tick(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), quiesce=False, beat_ticks=3)
        await c.start()
        try:
            await c.leaders()
            h = c.hosts[1]
            ticks, wakes = h.stats.ticks, h.stats.tick_wakes
            await _ticks(h, 2 * T)
            # groups tick (quiescence off): no tick is run ahead of its time
            assert h.stats.tick_wakes - wakes >= h.stats.ticks - ticks - 1
        finally:
            await c.stop()

    run(main())


def test_a_proposal_wakes_the_group_which_quiesces_again(tmp_path):
    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            leaders = await c.quiet()
            lead = leaders[1]
            term = lead.term
            res = await lead.apply(b"wake")
            assert res.index > 0 and lead.term == term
            assert 1 in lead.host._ticking or 1 in lead.host._quiet
            await wait_until(
                lambda: all(len(c.hosts[i].groups[1].fsm.applied) == 2 for i in IDS),
                what="the write applied everywhere",
            )
            await wait_until(c.all_quiesced, what="quiesced again")
            assert c.leader(1) is lead and lead.term == term  # no election on the way
        finally:
            await c.stop()

    run(main())


def test_read_index_on_quiesced_groups_is_linearizable(tmp_path):
    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            leaders = await c.quiet()
            lead = leaders[2]
            follower = next(c.hosts[i].groups[2] for i in IDS if i != lead.id)
            rows = lead.host.stats.beat_rows_sent
            idx = await lead.read_index()
            assert idx == lead.commit_index  # every write committed before the call
            assert lead.host.stats.beat_rows_sent > rows  # a real heartbeat round ran
            # and from a quiesced follower (forwarded to the leader)
            await wait_until(c.all_quiesced, what="quiesced again")
            assert await follower.read_index() == idx
        finally:
            await c.stop()

    run(main())


def test_leader_node_silence_elects_new_leaders_within_bounded_ticks(tmp_path):
    """Every group quiesced; then the process leading group 1 is cut off. The
    others declare it down after a randomized election timeout [T, 2T) and the
    followers of every group it led campaign within 1..T more ticks; the cut-off
    leaders wake (no quorum of live voters) and step down within T ticks."""

    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            leaders = await c.quiet()
            dead = leaders[1].id
            led = [g for g, lead in leaders.items() if lead.id == dead]
            rest = tuple(i for i in IDS if i != dead)
            watch = c.hosts[rest[0]]
            start = watch.stats.ticks
            c.net.isolate(dead)
            await wait_until(
                lambda: all(
                    c.leader(g, rest) is not None and c.leader(g, rest).term > leaders[g].term
                    for g in led
                ),
                what="new leaders",
            )
            took = watch.stats.ticks - start
            print(f"groups {led} led by node {dead}: new leaders after {took} ticks (T={T})")
            # detection < 2T, then campaign within T, then a pre-vote and a vote round
            assert took <= 3 * T + 10
            assert watch.stats.peers_declared_down >= 1
            # groups led elsewhere keep their leader and term
            for g in set(GROUPS) - set(led):
                assert c.leader(g, rest) is leaders[g] and leaders[g].term == c.leader(g).term
            old = c.hosts[dead]
            await wait_until(
                lambda: all(old.groups[g].role is not Role.LEADER for g in led),
                what="the cut-off leaders step down",
            )
            assert old.stats.peers_declared_down == 2
            # heal: the old node follows the new leaders and everything quiesces again
            c.net.heal()
            for g in led:
                await c.leader(g, rest).apply(b"after")
            await wait_until(c.all_quiesced, what="quiesced after the heal")
        finally:
            await c.stop()

    run(main())


def test_a_peer_restart_seen_by_its_nonce_wakes_the_groups_it_leads(tmp_path):
    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            leaders = await c.quiet()
            lead_node = leaders[1].id
            other = next(i for i in IDS if i != lead_node)
            h = c.hosts[other]
            led = {g for g, lead in leaders.items() if lead.id == lead_node}
            wakes = h.stats.liveness_wakes
            h._on_coalesced(
                [
                    Beats(
                        src=lead_node,
                        dst=other,
                        term=0,
                        group_id=HOST_GROUP_ID,
                        rows=[],
                        node_nonce=c.hosts[lead_node].nonce ^ 1,
                    )
                ]
            )
            assert h.stats.peer_restarts_seen == 1
            # its followers here campaign, and the leaders here of which it is a member
            # heartbeat again (the restarted replica may have lost its storage)
            woken = led | {g for g, lead in leaders.items() if lead.id == other}
            assert h.stats.liveness_wakes == wakes + len(woken)
            assert {g for g in GROUPS if not h.groups[g].quiesced} == woken
            # the real leader is alive: the group settles and quiesces again
            await wait_until(c.all_quiesced, what="quiesced again")
        finally:
            await c.stop()

    run(main())


def test_quiescence_off_keeps_every_group_ticking(tmp_path):
    async def main():
        c = Cluster(str(tmp_path), quiesce=False)
        await c.start()
        try:
            await c.leaders()
            h = c.hosts[1]
            rows = h.stats.beat_rows_sent
            await _ticks(h, 2 * T)
            assert h.stats.beat_rows_sent > rows and not h._quiet
            assert h.stats.node_beats_sent == 0
        finally:
            await c.stop()

    run(main())


def test_in_sync_voters_drop_a_silent_node_and_take_it_back(tmp_path):
    """RaftGroup.in_sync_voters (Kafka's ISR) is node liveness: every voter while all
    hosts beat, even with every group quiesced (no heartbeats); a cut-off node drops out
    of every group's ISR on the hosts that declare it down, never out of its own view of
    itself, and returns once it is heard again."""

    async def main():
        c = Cluster(str(tmp_path))
        await c.start()
        try:
            await c.quiet()
            for i in IDS:
                assert c.hosts[i].peers_down() == frozenset()
                for g in GROUPS:
                    assert c.hosts[i].groups[g].in_sync_voters() == IDS
            dead = 3
            rest = (1, 2)
            c.net.isolate(dead)
            await wait_until(
                lambda: all(c.hosts[i].peers_down() == {dead} for i in rest),
                what="node 3 declared down",
            )
            for i in rest:
                for g in GROUPS:
                    assert c.hosts[i].groups[g].in_sync_voters() == rest
            # the cut-off node keeps itself in (and declares the others down)
            await wait_until(
                lambda: c.hosts[dead].peers_down() == set(rest), what="node 3 sees 1, 2 down"
            )
            assert all(c.hosts[dead].groups[g].in_sync_voters() == (dead,) for g in GROUPS)
            c.net.heal()
            await wait_until(
                lambda: all(
                    c.hosts[i].groups[g].in_sync_voters() == IDS for i in IDS for g in GROUPS
                ),
                what="every voter in sync again",
            )
        finally:
            await c.stop()

    run(main())


def test_a_new_group_s_first_leader_is_its_preferred_leader(tmp_path):
    """RaftGroup.preferred_leader steers the host's first-election stagger: each new
    group (sealed start, as partition groups place them) elects the voter named, in
    term 1, instead of voters[group id mod n] (sink names the placement's first
    replica: a leadership transfer after creation would move the leader under
    clients already writing)."""

    async def main():
        c = Cluster(str(tmp_path))
        net = c.net
        for i in IDS:
            host = RaftHost(
                i,
                net.transport(i, groups=()),
                data_dir=os.path.join(c.base, f"n{i}"),
                options=HostOptions(tick_ms=SLOW.tick_ms, quiesce=True),
            )
            await host.start()
            c.hosts[i] = host
        incs = {i: c.hosts[i].identity_file(c.hosts[i].data_dir, "").incarnation for i in IDS}
        # every group's preferred leader differs from the default rule's choice
        preferred = {gid: IDS[(gid + 1) % len(IDS)] for gid in range(10, 16)}
        try:
            for gid, pref in preferred.items():
                assert pref != sorted(IDS)[gid % len(IDS)]
                for i in IDS:
                    await c.hosts[i].add_group(
                        gid,
                        PEERS,
                        RecordingFSM(),
                        SLOW,
                        seed=i * 100 + gid,
                        incarnations=incs,
                        preferred_leader=pref,
                    )

            def leaders() -> dict[int, tuple[int, int]]:
                out = {}
                for gid in preferred:
                    lead = [i for i in IDS if c.hosts[i].groups[gid].is_leader()]
                    if len(lead) == 1:
                        out[gid] = (lead[0], c.hosts[lead[0]].groups[gid].term)
                return out

            await wait_until(lambda: len(leaders()) == len(preferred), what="leaders")
            assert leaders() == {gid: (pref, 1) for gid, pref in preferred.items()}
        finally:
            await c.stop()

    run(main())
