"""3 host processes on 127.0.0.1, each hosting 16 Raft groups over one gRPC transport and
one data directory (RaftHost): every group elects and commits; kill -9 of the process leading
the most groups; every group re-elects among the survivors and commits; after the restart
every acknowledged entry of every group is on every node exactly once, in one order."""

from __future__ import annotations

import asyncio
import os
import random

from raftlog.process_cluster import RaftProcessCluster

GROUPS = 16


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=300))


async def _leaders(c: RaftProcessCluster, exclude: int = 0) -> dict[int, int] | None:
    """group -> its leader's node id, when every group has exactly one live leader."""
    leaders: dict[int, set[int]] = {g: set() for g in range(1, GROUPS + 1)}
    for i, st in (await c.statuses()).items():
        if i == exclude:
            continue
        for gid, g in st["by_group"].items():
            if g["role"] == "leader":
                leaders[int(gid)].add(i)
    if all(len(v) == 1 for v in leaders.values()):
        return {g: next(iter(v)) for g, v in leaders.items()}
    return None


async def _wait_leaders(c: RaftProcessCluster, timeout: float, exclude: int = 0) -> dict[int, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        got = await _leaders(c, exclude)
        if got is not None:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"not every group had one leader within {timeout} s")


def test_kill_host_leading_most_groups(tmp_path):
    seed = int(os.environ.get("RAFTSINK_PROC_SEED", random.randrange(2**32)))
    print(f"seed={seed}")
    rng = random.Random(seed)

    async def main():
        c = RaftProcessCluster(
            str(tmp_path),
            tick_ms=20,
            election_ticks=10,
            module="raftlog.host_process",
            extra_args=("--groups", str(GROUPS)),
        )
        c.start()
        acked: dict[int, list[str]] = {g: [] for g in range(1, GROUPS + 1)}
        counter = 0
        try:
            leaders = await _wait_leaders(c, 60)

            async def propose_round(leaders: dict[int, int], exclude: int = 0) -> None:
                nonlocal counter
                for gid in range(1, GROUPS + 1):
                    for _attempt in range(50):
                        vals = []
                        for _ in range(rng.randint(1, 5)):
                            counter += 1
                            vals.append(f"g{gid}-v{counter}".encode().hex())
                        try:
                            out = await c.call(
                                leaders[gid],
                                "Propose",
                                {"group": gid, "values": vals, "timeout": 5},
                                timeout=10,
                            )
                        except Exception:
                            out = {"error": "rpc"}
                        if "error" not in out:
                            acked[gid].extend(vals)
                            break
                        leaders = await _wait_leaders(c, 30, exclude)
                    else:
                        raise AssertionError(f"group {gid} did not commit, seed={seed}")

            for _ in range(3):
                await propose_round(leaders)
            counts: dict[int, int] = {}
            for node in leaders.values():
                counts[node] = counts.get(node, 0) + 1
            victim = max(counts, key=lambda n: counts[n])
            c.kill(victim)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            leaders = await _wait_leaders(c, 30, exclude=victim)
            failover_s = loop.time() - t0
            assert victim not in leaders.values()
            for _ in range(3):
                await propose_round(leaders, exclude=victim)
            c.start(victim)

            async def caught_up() -> bool:
                sts = await c.statuses()
                if len(sts) < 3:
                    return False
                return all(
                    st["by_group"][str(g)]["applied_entries"] >= len(acked[g])
                    for st in sts.values()
                    for g in acked
                )

            deadline = loop.time() + 90
            while not await caught_up():
                assert loop.time() < deadline, f"nodes did not catch up, seed={seed}"
                await asyncio.sleep(0.1)
            for gid in range(1, GROUPS + 1):
                logs = []
                for i in c.nodes:
                    out = await c.call(i, "Applied", {"group": gid, "start": 0})
                    logs.append([(idx, v) for idx, v in out["rows"]])
                # Followers may still apply the last entries: compare the common prefix,
                # which must hold every acknowledged entry.
                n = min(len(x) for x in logs)
                assert logs[0][:n] == logs[1][:n] == logs[2][:n], f"group {gid} disagrees"
                values = [v for _, v in logs[0][:n]]
                assert len(values) == len(set(values)), f"group {gid}: an entry applied twice"
                assert not set(acked[gid]) - set(values), f"group {gid} lost entries, seed={seed}"
                assert all(bytes.fromhex(v).startswith(b"g%d-" % gid) for v in values), (
                    f"group {gid} holds another group's entry"
                )
            sts = await c.statuses()
            # (unknown_group_messages is not asserted: a node that starts, or restarts,
            # serves Raft traffic before it has opened its 16 groups, and drops what
            # peers send meanwhile; CI at load 8 saw 3. Misrouting is what must never
            # happen: every group's log holds only its own entries, checked above.)
            assert all(st["beats_messages_sent"] > 0 for st in sts.values())
            print(
                f"victim={victim} led {counts[victim]} of {GROUPS} groups; failover of all "
                f"groups {failover_s:.2f} s; acked={sum(map(len, acked.values()))}"
            )
        finally:
            c.stop_all()

    run(main())
