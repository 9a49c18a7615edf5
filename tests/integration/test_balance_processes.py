"""The leader balancer for real: 3 host processes (tests/helpers/balance_host.py: a
RaftHost with 12 groups over real gRPC, and a LeaderBalanceDriver in each), kill -9 of the
node leading most groups, restart; the drivers bring leadership back to <= ceil(G/N) + 1
per node, and the restarted node leads its share again (less at most one), by transfers only: from the restart on,
the groups' terms rise by no more than the transfers the drivers started (an election
would raise a term without one)."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

from raftlog.process_cluster import RaftProcessCluster

GROUPS = 12
NODES = 3
GOAL = math.ceil(GROUPS / NODES)
BOUND = GOAL + 1


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=400))


async def _snapshot(c: RaftProcessCluster) -> tuple[dict[int, int], dict[int, int], dict] | None:
    """(group -> leader, group -> highest term seen, node -> status) when every group
    has exactly one leader among the live nodes that answer."""
    sts = await c.statuses()
    leaders: dict[int, set[int]] = {g: set() for g in range(1, GROUPS + 1)}
    terms: dict[int, int] = dict.fromkeys(range(1, GROUPS + 1), 0)
    for i, st in sts.items():
        for gid, g in st["by_group"].items():
            terms[int(gid)] = max(terms[int(gid)], g["term"])
            if g["role"] == "leader":
                leaders[int(gid)].add(i)
    if not all(len(v) == 1 for v in leaders.values()):
        return None
    return {g: next(iter(v)) for g, v in leaders.items()}, terms, sts


async def _wait(c: RaftProcessCluster, ok, timeout: float, what: str):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        snap = await _snapshot(c)
        if snap is not None:
            last = snap
            if ok(*snap):
                return snap
        await asyncio.sleep(0.1)
    counts = Counter(last[0].values()) if last else None
    raise AssertionError(f"{what} not reached within {timeout} s; leaders per node {counts}")


def test_leadership_returns_after_a_restart_by_transfers_only(tmp_path):
    async def main():
        c = RaftProcessCluster(
            str(tmp_path),
            n=NODES,
            # 1 s election timeout: a loaded 2-core machine must not see spurious
            # elections (they would count against "transfers only").
            tick_ms=50,
            election_ticks=20,
            module="tests.helpers.balance_host",
            extra_args=(
                "--groups",
                str(GROUPS),
                "--balance-interval",
                "0.5",
                "--return-delay",
                "1.0",
                "--transfer-timeout",
                "5",
            ),
        )
        c.start()
        try:

            def balanced(leaders, _terms, sts) -> bool:
                counts = Counter(leaders.values())
                return len(sts) == NODES and max(counts.values()) <= BOUND

            leaders, _, _ = await _wait(c, balanced, 120, "first balance")
            victim = Counter(leaders.values()).most_common(1)[0][0]
            c.kill(victim)
            leaders, _, _ = await _wait(
                c, lambda ld, _t, _s: victim not in ld.values(), 60, "failover"
            )
            # Every group elected among the survivors: from here on, terms rise only by
            # transfers (the survivors keep a quorum; the restarted node pre-votes).
            snap = await _wait(c, lambda *_: True, 30, "a stable view")
            _, base_terms, base_sts = snap
            base_started = sum(st["balancer"]["transfers_started"] for st in base_sts.values())
            c.start(victim)

            def back(leaders, _terms, sts) -> bool:
                counts = Counter(leaders.values())
                return (
                    len(sts) == NODES
                    and max(counts.values()) <= BOUND
                    # Spread, not just under the bound: the restarted node leads its
                    # share again, less at most one.
                    and counts.get(victim, 0) >= GOAL - 1
                    and all(st["balancer"]["in_flight"] == 0 for st in sts.values())
                )

            leaders, terms, sts = await _wait(c, back, 120, "balance after the restart")
            counts = Counter(leaders.values())
            started = sum(st["balancer"]["transfers_started"] for st in sts.values())
            succeeded = sum(st["balancer"]["transfers_succeeded"] for st in sts.values())
            failed = sum(st["balancer"]["transfers_failed"] for st in sts.values())
            # The survivors' counters carry on; the victim's restarted at 0.
            transfers = started - base_started
            rises = sum(terms[g] - base_terms[g] for g in terms)
            print(
                f"victim={victim} leaders per node {dict(sorted(counts.items()))} "
                f"(bound {BOUND}); after the restart: {transfers} transfers started, "
                f"term rises {rises}; all drivers: {succeeded} succeeded, {failed} failed"
            )
            home = sum(leaders[g] == (g - 1) % NODES + 1 for g in leaders)
            print(f"groups led by their preferred replica: {home} of {GROUPS}")
            assert counts[victim] >= GOAL - 1
            assert transfers >= 1, "nothing moved back to the restarted node"
            assert rises <= transfers, (
                f"terms rose {rises} times for {transfers} transfers: an election happened"
            )
        finally:
            c.stop_all()

    run(main())
