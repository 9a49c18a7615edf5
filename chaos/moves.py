"""The `move` nemesis (partition groups only): a partition's data group moves under the
workload, through the same read API call as `raftsink partitions move`.

The fault's partition is chosen from the node permutation of the schedule; its target
node is taken out of the group's replica list (or swapped for a node that holds no
replica, when the cluster has one) at the start of the window, and the original list
is moved back when it ends, so the node rejoins empty and catches up from the leader.
The target may be the group's leader: it hands leadership over before it is removed.
Each move waits until it is done (bounded); what happened is in the fault's record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from chaos.fault_cluster import ChaosCluster
from chaos.membership import change

DONE_TIMEOUT_S = 60.0


async def placements(c: ChaosCluster) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> replica list, from the nodes' status rows (a row with no
    move pending; a partition whose rows disagree keeps the first answer)."""
    out: dict[tuple[str, int], list[int]] = {}
    for i in c.alive():
        if i in c.paused:
            continue
        st = await c.status(i, timeout=1.0)
        for row in ((st or {}).get("data_groups") or {}).get("groups") or []:
            if row.get("topic") is not None and not row.get("target"):
                out.setdefault((row["topic"], row["partition"]), list(row["replicas"]))
    return out


async def wait_done(c: ChaosCluster, topic: str, partition: int) -> float | None:
    """Seconds until no move of the partition is pending; None on timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < DONE_TIMEOUT_S:
        result, code, _ = await change(c, {"op": "moves"})
        if not code and not any(
            m["topic"] == topic and m["partition"] == partition for m in result.get("moves", [])
        ):
            return round(time.monotonic() - t0, 2)
        await asyncio.sleep(0.3)
    return None


async def inject(
    c: ChaosCluster, node: int, order: list[int], desc: dict[str, Any]
) -> Callable[[], None]:
    """Start the fault; returns its (blocking) undo. desc gets what was done."""
    placed = await placements(c)
    if not placed:
        desc["skipped"] = "no partition placement known"
        return lambda: None
    keys = sorted(placed)
    topic, partition = keys[order[0] % len(keys)]
    before = placed[(topic, partition)]
    victim = node if node in before else before[order[0] % len(before)]
    spare = [n for n in order if n not in before]
    after = (
        [spare[0] if n == victim else n for n in before]
        if spare
        else [n for n in before if n != victim]
    )
    desc.update(topic=topic, partition=partition, replicas=before, moved_to=after)
    result, code, error = await change(
        c, {"op": "move", "topic": topic, "partition": partition, "replicas": after}
    )
    if code:
        desc["move_error"] = f"{code}: {error}"
    else:
        desc["steps"] = result.get("steps")
        desc["moved_s"] = await wait_done(c, topic, partition)

    def undo() -> None:
        desc["back_s"] = asyncio.run(_back(c, topic, partition, before, desc))

    return undo


async def _back(
    c: ChaosCluster, topic: str, partition: int, before: list[int], desc: dict[str, Any]
) -> float | None:
    """Move the partition back to its original list and wait until that is done."""
    _, code, error = await change(
        c, {"op": "move", "topic": topic, "partition": partition, "replicas": before}
    )
    if code:
        desc["back_error"] = f"{code}: {error}"
        return None
    return await wait_done(c, topic, partition)
