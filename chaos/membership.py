"""The `membership` nemesis: Raft configuration changes under the workload, through the
same read API calls as `raftsink members` (sink.cli_members.call).

    remove-readd  remove the target (the leader hands over first), re-add it when the
                  window ends (as a learner, promoted to voter once caught up)
    replace       kill -9 the target, remove it, delete its data directory (a lost
                  disk), start it empty with --node-join; when the window ends add it
                  back, so it catches up from the leader and becomes a voter again

Nodes keep their ids: the campaign's proxy routes Raft links by node id, and the
re-added nodes are in every node's `peers` setting, so no addresses are sent (each
node keeps its own, proxied, view). The removal is done before the fault window and the
re-add after it: the checkers see a cluster of two voters during the window.

With partition groups the removal first drains the node's data groups onto the others
(sink/members/drain.py: the remove call is repeated while it answers "draining", up
to CHANGE_TIMEOUT_S); a drain that is refused (nowhere to go) or not done in time
leaves the node a member: nothing is wiped, and the re-add clears the drain mark so
the node takes new replicas again. A re-added node hosts no data group until a new
placement or a move gives it one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from chaos.fault_cluster import ChaosCluster
from sink.cli_members import call

MODES = ("remove-readd", "replace")
CHANGE_TIMEOUT_S = 60.0


RETRY_S = 20.0
"""How long a change is retried while there is no leader (a killed leader's successor is
elected after an election timeout) or another change is still in flight."""


async def change(c: ChaosCluster, req: dict[str, Any]) -> tuple[dict, str, str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RETRY_S
    while True:
        nodes = [c.peers[i].read_api for i in c.alive() if i not in c.paused]
        out = await call(nodes, {"timeout_s": CHANGE_TIMEOUT_S, **req}, CHANGE_TIMEOUT_S)
        retry = ("not_leader", "unreachable", "busy", "outcome_unknown")
        if out[1] not in retry or loop.time() > deadline:
            return out
        await asyncio.sleep(0.2)


async def is_member(c: ChaosCluster, node: int) -> bool | None:
    """node's place in the live configuration: True a voter, False not a member or a
    learner, None unknown (no answer). A change whose outcome was unknown (the leader
    changed mid-way) is judged by this, not by its reply."""
    result = await leader_view(c)
    if result is None:
        return None
    return node in result.get("voters", [])


async def leader_view(c: ChaosCluster) -> dict | None:
    """The live configuration as the leader answers it (a removed node's own view is
    stale: it never hears of its removal)."""
    result, code, _ = await change(c, {"op": "list"})
    if code or not result.get("leader") or result.get("node") != result.get("leader"):
        return None
    return result


async def inject(c: ChaosCluster, node: int, mode: str, desc: dict[str, Any]) -> Callable[[], None]:
    """Start the fault; returns its (blocking) undo. desc gets what was done."""
    if mode not in MODES:
        raise ValueError(f"unknown membership mode {mode!r}")
    if mode == "replace":
        await asyncio.to_thread(c.kill, node)
    t0 = asyncio.get_running_loop().time()
    _, code, error = await change(c, {"op": "remove", "node": node})
    desc["remove_s"] = round(asyncio.get_running_loop().time() - t0, 2)  # with a drain
    if code:
        desc["remove_error"] = f"{code}: {error}"
    view = await leader_view(c)
    members = set(view.get("voters", [])) | set(view.get("learners", [])) if view else {node}
    desc["removed"] = node not in members
    if mode == "replace":
        if desc["removed"]:  # only a removed node may lose its data (never a voter's disk)
            await asyncio.to_thread(c.wipe_data, node)
            desc["wiped"] = True
        await asyncio.to_thread(c.start, node)

    def undo() -> None:
        desc["readded"] = asyncio.run(_readd(c, node, desc))

    return undo


async def _readd(c: ChaosCluster, node: int, desc: dict[str, Any]) -> bool:
    """Add node back until it is a voter (a removal whose reply was lost counts too)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CHANGE_TIMEOUT_S
    while loop.time() < deadline:
        if await is_member(c, node):
            await _undrain(c, node, desc)
            return True
        _, code, error = await change(c, {"op": "add", "node": node})
        if code:
            desc["readd_error"] = f"{code}: {error}"
            await asyncio.sleep(0.5)
    back = bool(await is_member(c, node))
    if back:
        await _undrain(c, node, desc)
    return back


async def _undrain(c: ChaosCluster, node: int, desc: dict[str, Any]) -> None:
    """Partition groups: a drain that did not end in a removal left node marked
    draining (no new replicas); clear it. Refused when nothing is marked, or with one
    group ("partition groups are off"): both fine."""
    if not desc.get("removed") and desc.get("remove_error"):
        _, code, error = await change(c, {"op": "undrain", "node": node})
        desc["undrain"] = "ok" if not code else f"{code}: {error}"
