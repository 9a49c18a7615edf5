"""3 node processes on 127.0.0.1 with real storage and gRPC: kill -9 the leader
while proposing; a new leader takes over; after restart every acknowledged
entry is on every node, in the same order."""

from __future__ import annotations

import asyncio
import os
import random

from raftlog.process_cluster import RaftProcessCluster


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=240))


async def wait_until(cond_coro, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await cond_coro():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def test_kill_leader_while_proposing(tmp_path):
    seed = int(os.environ.get("RAFTSINK_PROC_SEED", random.randrange(2**32)))
    print(f"seed={seed}")
    rng = random.Random(seed)

    async def main():
        c = RaftProcessCluster(str(tmp_path), tick_ms=20, election_ticks=10)
        c.start()
        try:
            leader = await c.wait_leader()
            acked: list[str] = []
            counter = 0

            async def proposer(stop_at: int) -> None:
                nonlocal counter, leader
                while len(acked) < stop_at:
                    vals = []
                    for _ in range(rng.randint(1, 20)):
                        counter += 1
                        vals.append(f"v{counter}".encode().hex())
                    try:
                        out = await c.call(
                            leader, "Propose", {"values": vals, "timeout": 5}, timeout=10
                        )
                    except Exception:
                        out = {"error": "rpc"}
                    if "error" in out:
                        # Unknown outcome or not the leader: find the leader again.
                        leader = await c.wait_leader()
                        continue
                    acked.extend(vals)

            # Propose, kill -9 the leader in the middle, keep proposing.
            task = asyncio.ensure_future(proposer(stop_at=1500))
            kill_after = rng.randint(100, 600)
            while len(acked) < kill_after:
                await asyncio.sleep(0.01)
            victim = leader
            c.kill(victim)
            new_leader = await c.wait_leader(exclude=victim)
            assert new_leader != victim
            await task
            c.start(victim)

            async def all_caught_up() -> bool:
                totals = []
                for i in c.nodes:
                    st = await c.status(i)
                    totals.append(st["applied_entries"] if st else -1)
                return min(totals) >= len(acked) and len(set(totals)) == 1

            await wait_until(all_caught_up, 60, "every node applied every acknowledged entry")
            logs = []
            for i in c.nodes:
                out = await c.call(i, "Applied", {"start": 0})
                logs.append([(idx, v) for idx, v in out["rows"]])
            assert logs[0] == logs[1] == logs[2], f"nodes disagree, seed={seed}"
            values = [v for _, v in logs[0]]
            assert len(values) == len(set(values)), "an entry was applied twice"
            missing = set(acked) - set(values)
            assert not missing, f"{len(missing)} acknowledged entries lost, seed={seed}"
            indexes = [idx for idx, _ in logs[0]]
            assert indexes == sorted(indexes)
            print(
                f"victim={victim} killed after {kill_after} acks; acked={len(acked)} applied={len(values)} new_leader={new_leader}"
            )
        finally:
            c.stop_all()

    run(main())
