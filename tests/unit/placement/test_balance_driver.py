"""LeaderBalanceDriver with a fake BalanceSource: it moves only the groups its node leads,
keeps at most max_in_flight transfers outstanding, mutes a group whose transfer failed,
does nothing switched off, restarts a replica's return delay after a break, and exports
its counters. The real thing (RaftHosts in processes over gRPC, a kill and a restart) is
tests/integration/test_balance_processes.py."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.registry import CollectorRegistry

from sink.node.balance_driver import (
    BalancerCollector,
    GroupState,
    LeaderBalanceDriver,
    RaftHostSource,
)
from sink.placement import BalancerOptions, GroupView, LeaderBalancer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeSource:
    """Groups with replicas (1, 2, 3) rotated so group g prefers node (g % 3) + 1.
    transfer_leader's outcome per call: "ok" (target leads at term + 1), "fail"
    (raises), "hang" (waits until release())."""

    def __init__(self, node_id: int, leaders: dict[int, int], outcome: str = "ok") -> None:
        self.node_id = node_id
        self.leaders = dict(leaders)
        self.terms = dict.fromkeys(leaders, 1)
        self.down: set[int] = set()
        self.outcome = outcome
        self.calls: list[tuple[int, int]] = []
        self._release = asyncio.Event()

    @staticmethod
    def replicas(g: int) -> tuple[int, ...]:
        p = g % 3
        return tuple((p + k) % 3 + 1 for k in range(3))

    def groups(self):
        for g, leader in sorted(self.leaders.items()):
            ready = frozenset(set(self.replicas(g)) - self.down)
            yield GroupState(g, self.replicas(g), leader, self.terms[g], ready)

    def live_nodes(self):
        return sorted({1, 2, 3} - self.down)

    def release(self) -> None:
        self._release.set()

    async def transfer_leader(self, group: int, target: int, timeout: float) -> None:
        self.calls.append((group, target))
        assert self.leaders[group] == self.node_id, "asked to move a group it does not lead"
        if self.outcome == "fail":
            raise RuntimeError("not leader")
        if self.outcome == "hang":
            await self._release.wait()
        self.leaders[group] = target
        self.terms[group] += 1


async def _settle() -> None:
    # Let the transfer tasks the round started run to their first await or end.
    for _ in range(5):
        await asyncio.sleep(0)


def _all_on(node: int, n: int) -> dict[int, int]:
    return dict.fromkeys(range(n), node)


def test_moves_only_groups_this_node_leads_and_brings_them_home():
    async def main():
        # Node 3 leads all 9 groups; 6 of them prefer nodes 1 and 2.
        src = FakeSource(3, _all_on(3, 9))
        clock = Clock()
        d = LeaderBalanceDriver(src, BalancerOptions(return_delay_s=0, max_in_flight=9), clock)
        plan = d.run_once()
        await _settle()
        assert sorted((t.group, t.target) for t in plan) == sorted(
            (g, src.replicas(g)[0]) for g in range(9) if src.replicas(g)[0] != 3
        )
        assert all(src.leaders[g] == src.replicas(g)[0] for g in range(9))
        st = d.stats()
        assert st["transfers_started"] == st["transfers_succeeded"] == 6
        assert st["transfers_failed"] == 0 and st["led_off_preferred"] == 6
        clock.now += 1
        assert d.run_once() == []  # balanced and home: nothing more
        assert d.stats()["groups_led"] == 3 and d.stats()["led_off_preferred"] == 0

        # A driver on node 1 sees node 3 overloaded but never moves node 3's groups.
        other = FakeSource(1, _all_on(3, 9))
        d1 = LeaderBalanceDriver(other, BalancerOptions(return_delay_s=0), Clock())
        assert d1.run_once() == [] and other.calls == []

    asyncio.run(main())


def test_at_most_max_in_flight_and_new_ones_only_when_some_finish():
    async def main():
        src = FakeSource(3, _all_on(3, 9), outcome="hang")
        clock = Clock()
        d = LeaderBalanceDriver(src, BalancerOptions(return_delay_s=0, max_in_flight=2), clock)
        assert len(d.run_once()) == 2
        await _settle()
        clock.now += 1
        assert d.run_once() == []  # both still outstanding
        assert d.stats()["in_flight"] == 2 and len(src.calls) == 2
        src.release()
        await _settle()
        clock.now += 1
        assert len(d.run_once()) == 2  # the two finished: two more
        await _settle()
        assert d.stats()["transfers_succeeded"] == 4

    asyncio.run(main())


def test_a_failed_transfer_mutes_its_group_until_the_mute_ends():
    async def main():
        src = FakeSource(3, {1: 3}, outcome="fail")  # group 1 prefers node 2
        clock = Clock()
        opts = BalancerOptions(return_delay_s=0, mute_s=60.0)
        d = LeaderBalanceDriver(src, opts, clock)
        (t,) = d.run_once()
        assert (t.group, t.target) == (1, 2)
        await _settle()
        assert d.stats()["transfers_failed"] == 1 and d.stats()["transfers_succeeded"] == 0
        assert 1 in d.planner.muted
        for step in (1.0, 30.0, 28.9):
            clock.now += step
            assert d.run_once() == [], f"retried while muted at +{clock.now - 100}"
        clock.now += 0.2  # 60.1 s after the failure
        src.outcome = "ok"
        assert [(t.group, t.target) for t in d.run_once()] == [(1, 2)]
        await _settle()
        assert src.leaders[1] == 2 and d.stats()["transfers_succeeded"] == 1

    asyncio.run(main())


def test_switched_off_it_starts_no_loop_and_no_transfer():
    async def main():
        src = FakeSource(3, _all_on(3, 9))
        d = LeaderBalanceDriver(src, BalancerOptions(enabled=False, return_delay_s=0), Clock())
        d.start()
        assert d._task is None
        assert d.run_once() == []
        await _settle()
        assert src.calls == [] and d.stats()["transfers_started"] == 0
        await d.stop()

    asyncio.run(main())


def test_return_delay_counts_from_the_last_break_in_readiness():
    async def main():
        src = FakeSource(3, {1: 3})  # group 1 prefers node 2
        clock = Clock()
        d = LeaderBalanceDriver(src, BalancerOptions(return_delay_s=10.0), clock)
        assert d.run_once() == []  # node 2 ready since 100
        clock.now = 105.0
        src.down = {2}  # node 2 restarts: a break
        assert d.run_once() == []
        clock.now = 106.0
        src.down = set()  # back: ready since 106
        assert d.run_once() == []
        clock.now = 115.9
        assert d.run_once() == [], "moved before 10 s of readiness since the break"
        clock.now = 116.0
        assert [(t.group, t.target) for t in d.run_once()] == [(1, 2)]
        await _settle()

    asyncio.run(main())


def test_the_loop_runs_rounds_until_stopped():
    async def main():
        src = FakeSource(3, _all_on(3, 6))
        d = LeaderBalanceDriver(src, BalancerOptions(interval_s=0.01, return_delay_s=0))
        d.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while any(src.leaders[g] != src.replicas(g)[0] for g in range(6)):
            assert loop.time() < deadline, f"not home within 30 s: {src.leaders}"
            await asyncio.sleep(0.01)
        await d.stop()
        rounds = d.stats()["rounds"]
        await asyncio.sleep(0.05)
        assert d.stats()["rounds"] == rounds, "a round ran after stop()"

    asyncio.run(main())


def test_a_round_that_raises_does_not_end_the_loop():
    async def main():
        src = FakeSource(3, _all_on(3, 3))
        broken = {"left": 2}
        real = src.groups

        def groups():
            if broken["left"]:
                broken["left"] -= 1
                raise RuntimeError("status failed")
            return real()

        src.groups = groups  # type: ignore[method-assign]
        d = LeaderBalanceDriver(src, BalancerOptions(interval_s=0.01, return_delay_s=0))
        d.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while d.stats()["transfers_succeeded"] < 2:
            assert loop.time() < deadline, "no transfer after failed rounds"
            await asyncio.sleep(0.01)
        await d.stop()
        assert broken["left"] == 0

    asyncio.run(main())


def test_collector_exports_the_counters_and_gauges():
    stats = {
        "rounds": 5,
        "transfers_started": 3,
        "transfers_succeeded": 2,
        "transfers_failed": 1,
        "groups_led": 4,
        "led_off_preferred": 1,
        "in_flight": 0,
        "muted": 1,
    }
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BalancerCollector(7, lambda: stats))
    get = reg.get_sample_value
    assert get("raftsink_leader_balance_transfers_started_total", {"node": "7"}) == 3
    assert get("raftsink_leader_balance_transfers_failed_total", {"node": "7"}) == 1
    assert get("raftsink_leader_balance_led_off_preferred", {"node": "7"}) == 1
    assert get("raftsink_leader_balance_groups_led", {"node": "7"}) == 4


def test_planner_sources_limit_moves_to_those_leaders():
    b = LeaderBalancer(BalancerOptions(return_delay_s=0, max_in_flight=10))
    ready = {1: 0.0, 2: 0.0, 3: 0.0}
    views = [GroupView(g, (1, 2, 3), 2 if g < 3 else 3, 1, ready) for g in range(6)]
    plan = b.plan(views, (1, 2, 3), now=1.0, sources=(3,))
    assert plan and all(t.source == 3 for t in plan)
    assert b.plan(views, (1, 2, 3), now=1.0, sources=()) == []


class _Group:
    def __init__(self, voters, leader, term, status=None, fatal=None):
        self._voters = voters
        self.leader_id = leader
        self.term = term
        self._status = status
        self.fatal_error = fatal
        self.moved: list[tuple[int, float]] = []

    def membership(self):
        return {"voters": list(self._voters), "learners": []}

    def is_leader(self):
        return self._status is not None

    def status(self):
        return self._status

    async def transfer_leader(self, target, timeout=None):
        self.moved.append((target, timeout))


class _Host:
    node_id = 1

    def __init__(self, groups, down=()):
        self.groups = groups
        self._down = list(down)

    def status(self):
        return {"peers_down": self._down}


def test_raft_host_source_reads_order_readiness_and_liveness():
    lead = {"commit": 10, "followers": {2: {"match": 10}, 3: {"match": 9}}}
    host = _Host(
        {
            1: _Group([1, 2, 3], 1, 4, lead),
            2: _Group([1, 2, 3], 2, 3),
            3: _Group([1, 2, 3], 0, 5),
            4: _Group([1, 2, 3], 1, 1, fatal=RuntimeError("x")),
        },
        down=[3],
    )
    src = RaftHostSource(host, replicas=lambda g: {1: (2, 1, 3), 2: (3, 9, 2)}.get(g))  # type: ignore[arg-type]
    by = {s.group: s for s in src.groups()}
    assert sorted(by) == [1, 2, 3]  # the failed group is left out
    assert by[1].replicas == (2, 1, 3) and by[1].ready == frozenset({1, 2})
    assert by[2].replicas == (3, 2, 1) and by[2].ready == frozenset()  # 9: no voter
    assert by[3].leader is None and by[3].replicas == (1, 2, 3)
    assert list(src.live_nodes()) == [1, 2]

    async def move():
        await src.transfer_leader(1, 2, 5.0)
        with pytest.raises(KeyError):
            await src.transfer_leader(99, 2, 5.0)

    asyncio.run(move())
    assert host.groups[1].moved == [(2, 5.0)]
