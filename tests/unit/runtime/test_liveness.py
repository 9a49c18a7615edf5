"""Node liveness evidence and election pacing in RaftHost (docs/raft-runtime.md,
"Quiescence"): a killed process is seen by its broken stream long before the
silence limit; a silent peer whose connection holds (a starved process) is not
declared down before the silence limit; campaigns are rate-limited per tick.

Three hosts over a LocalNetwork whose transports report broken streams the way
GrpcTransport does (on_unreachable + peer_connected). Bounds are counted in host
ticks (every host shares the one event loop, so a stalled loop delays all alike).
"""

from __future__ import annotations

import asyncio
import os
import random

from raftlog.core import MemoryStorage, RaftConfig, RawNode, Role
from raftlog.runtime import HostOptions, NodeOptions, RaftGroup, RaftHost
from raftlog.transport import LocalNetwork
from raftlog.transport.local import LocalTransport
from tests.helpers.raft_inprocess import RecordingFSM, wait_until

T = 20  # election ticks
OPTS = NodeOptions(tick_ms=10, election_ticks=T, quiesce_ticks=4)
IDS = (1, 2, 3)
PEERS = {i: f"local:{i}" for i in IDS}
GROUPS = (1, 2, 3, 4, 5, 6)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


class StreamTransport(LocalTransport):
    """A LocalTransport with GrpcTransport's broken-stream evidence: a link is
    'connected' unless the network blocks it or `held` says it stays up."""

    held: set[int]

    def peer_connected(self, peer: int) -> bool:
        return peer in self.held or (self.node_id, peer) not in self.network._blocked


class Cluster:
    def __init__(self, base: str, silence_ms: int, campaigns_per_tick: int = 8) -> None:
        self.base = base
        self.net = LocalNetwork()
        self.hosts: dict[int, RaftHost] = {}
        self.silence_ms = silence_ms
        self.campaigns_per_tick = campaigns_per_tick

    async def start(self) -> None:
        for i in IDS:
            t = StreamTransport(self.net, i, set())
            t.held = set()
            self.net._nodes[i] = t
            host = RaftHost(
                i,
                t,
                data_dir=os.path.join(self.base, f"n{i}"),
                options=HostOptions(
                    tick_ms=OPTS.tick_ms,
                    liveness_silence_ms=self.silence_ms,
                    campaigns_per_tick=self.campaigns_per_tick,
                ),
            )
            await host.start()
            self.hosts[i] = host
            for g in GROUPS:
                await host.add_group(g, PEERS, RecordingFSM(), OPTS, seed=i * 100 + g)

    def leader(self, g: int, among: tuple[int, ...] = IDS) -> RaftGroup | None:
        leads = [self.hosts[i].groups[g] for i in among if self.hosts[i].groups[g].is_leader()]
        return leads[0] if len(leads) == 1 else None

    def all_quiesced(self) -> bool:
        return all(len(h._quiet) == len(GROUPS) for h in self.hosts.values())

    async def quiet(self) -> dict[int, RaftGroup]:
        await wait_until(lambda: all(self.leader(g) for g in GROUPS), what="leaders")
        leaders = {g: self.leader(g) for g in GROUPS}
        for g, lead in leaders.items():
            await lead.apply(b"x%d" % g)
        # generous: on a loaded box a stall can wake groups (a peer looks silent) more
        # than once before all settle; the assertions after it are what the tests check
        await wait_until(self.all_quiesced, 60.0, what="every group quiesced on every host")
        return leaders

    def cut(self, node: int) -> None:
        """Isolate node; the others' transports report their streams to it broken."""
        self.net.isolate(node)
        for i, h in self.hosts.items():
            if i != node and h.transport.on_unreachable is not None:
                h.transport.on_unreachable(node)

    async def stop(self) -> None:
        for h in self.hosts.values():
            await h.stop()


async def _ticks(host: RaftHost, n: int) -> None:
    end = host.stats.ticks + n
    await wait_until(lambda: host.stats.ticks >= end, what=f"{n} ticks")


def test_a_broken_stream_elects_new_leaders_long_before_the_silence_limit(tmp_path):
    """Silence limit 60 s (6,000 ticks): a peer whose stream broke and stays down
    is down after T silent ticks, and every group it led re-elects within a few
    election timeouts (detection T, campaign jitter up to T, PreVote and vote)."""

    async def main():
        c = Cluster(str(tmp_path), silence_ms=60_000)
        await c.start()
        try:
            leaders = await c.quiet()
            dead = leaders[1].id
            led = [g for g, lead in leaders.items() if lead.id == dead]
            rest = tuple(i for i in IDS if i != dead)
            watch = c.hosts[rest[0]]
            start = watch.stats.ticks
            c.cut(dead)
            await wait_until(
                lambda: all(
                    c.leader(g, rest) is not None and c.leader(g, rest).term > leaders[g].term
                    for g in led
                ),
                what="new leaders",
            )
            took = watch.stats.ticks - start
            print(f"groups {led} led by node {dead}: new leaders after {took} ticks (T={T})")
            # detection T, campaign jitter < T, a split vote's new timeout < 2T: far
            # below the 6,000 ticks of silence the limit alone would have waited
            assert took <= 5 * T
            assert watch.stats.peers_seen_broken >= 1 and dead in watch.status()["peers_down"]
            for g in set(GROUPS) - set(led):  # groups led elsewhere keep leader and term
                assert c.leader(g, rest) is leaders[g]
        finally:
            await c.stop()

    run(main())


def test_a_silent_peer_with_its_connection_up_is_not_down_before_the_silence_limit(tmp_path):
    """A starved process keeps its TCP connections: its silence alone counts only
    after liveness_silence_ms (here 100 T), so its groups stay quiesced and led."""

    async def main():
        c = Cluster(str(tmp_path), silence_ms=100 * T * OPTS.tick_ms)
        await c.start()
        try:
            leaders = await c.quiet()
            quiet = leaders[1].id
            for h in c.hosts.values():
                h.transport.held = set(IDS)  # every stream stays "connected"
            rest = tuple(i for i in IDS if i != quiet)
            c.cut(quiet)
            await _ticks(c.hosts[rest[0]], 4 * T)
            for i in rest:
                st = c.hosts[i].status()
                assert st["peers_down"] == [] and st["liveness_wakes"] == 0, st
                assert st["quiesced_groups"] == len(GROUPS)
            for g, lead in leaders.items():  # nobody campaigned: same leaders, same terms
                assert lead.role is Role.LEADER
                assert all(c.hosts[i].groups[g].term == lead.term for i in IDS)
            c.net.heal()
        finally:
            await c.stop()

    run(main())


def test_campaigns_are_rate_limited_per_tick_and_every_group_still_elects(tmp_path):
    """campaigns_per_tick=1: a host never starts more than one campaign per tick
    (held-back groups are counted), and every group still gets one leader."""

    async def main():
        c = Cluster(str(tmp_path), silence_ms=T * OPTS.tick_ms, campaigns_per_tick=1)
        await c.start()
        try:
            per_tick: dict[int, dict[int, int]] = {i: {} for i in IDS}
            for i, h in c.hosts.items():
                for g in h.groups.values():
                    core = g.core
                    orig = core.campaign

                    def counted(*a, _h=h, _i=i, _orig=orig, **k):
                        t = _h.stats.ticks
                        per_tick[_i][t] = per_tick[_i].get(t, 0) + 1
                        return _orig(*a, **k)

                    core.campaign = counted  # type: ignore[method-assign]
            await c.quiet()
            # campaign() is also called by a TimeoutNow or a wake; none here: every
            # call came from a tick, at most one per host per tick
            assert all(n <= 1 for counts in per_tick.values() for n in counts.values()), per_tick
            assert sum(len(v) for v in per_tick.values()) >= len(GROUPS)
        finally:
            await c.stop()

    run(main())


def _core(election_tick: int = 10) -> RawNode:
    cfg = RaftConfig(id=1, peers=[1, 2, 3], election_tick=election_tick, heartbeat_tick=1)
    return RawNode(cfg, MemoryStorage(), random.Random(7))


def test_campaign_due_says_exactly_which_tick_campaigns():
    for seed in range(20):
        n = _core()
        n.rng = random.Random(seed)
        n._reset_randomized_timeout()
        ticks = 0
        while n.role is Role.FOLLOWER:
            due = n.campaign_due()
            n.tick()
            ticks += 1
            assert due == (n.role is not Role.FOLLOWER), (seed, ticks)
        assert 10 <= ticks < 20


def test_postpone_election_delays_the_first_campaign_by_that_many_ticks():
    n = _core()
    timeout = n.randomized_timeout
    n.postpone_election(10)
    ticks = 0
    while n.role is Role.FOLLOWER:
        n.tick()
        ticks += 1
    assert ticks == timeout + 10
    assert n.lead == 0  # no lease: votes are not ignored meanwhile


def test_node_beats_fit_the_silence_limit_at_least_four_times():
    from raftlog.runtime.options import NODE_BEATS_PER_SILENCE

    # The defaults: 6 beat ticks of 3 (540 ms at 30 ms ticks) within 3 s of silence.
    assert HostOptions(beat_ticks=3).node_beat_every() == 18
    # A short silence limit shortens the interval in whole beat ticks, never below one.
    short = HostOptions(beat_ticks=3, liveness_silence_ms=1200)  # 40 ticks
    assert short.node_beat_every() == 9 and NODE_BEATS_PER_SILENCE <= 40 // 9
    assert HostOptions(beat_ticks=3, liveness_silence_ms=90).node_beat_every() == 3
    assert HostOptions(beat_ticks=1, node_beat_ticks=2).node_beat_every() == 2
