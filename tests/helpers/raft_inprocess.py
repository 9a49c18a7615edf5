"""In-process clusters of RaftNodes for runtime tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from raftlog.runtime import NodeOptions, RaftNode, StateMachine
from raftlog.transport import LocalNetwork


class RecordingFSM(StateMachine):
    """Keeps every applied entry; snapshots are the list itself."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.leader_terms: list[int] = []

    def on_apply(self, entries):
        self.applied.extend((e.index, e.data) for e in entries)
        return [len(self.applied)] * len(entries)

    def on_leader_start(self, term: int) -> None:
        self.leader_terms.append(term)

    def on_snapshot_save(self) -> bytes:
        return b"\n".join(b"%d %s" % (i, d.hex().encode()) for i, d in self.applied)

    def on_snapshot_load(self, data: bytes) -> None:
        self.applied = []
        for line in data.split(b"\n") if data else []:
            i, h = line.split(b" ")
            self.applied.append((int(i), bytes.fromhex(h.decode())))


FAST = NodeOptions(tick_ms=10, election_ticks=10)


async def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class InProcessRaftCluster:
    def __init__(
        self,
        base: str,
        n: int = 3,
        options: NodeOptions = FAST,
        compaction_limit: Callable[[], int | None] | None = None,
    ) -> None:
        """compaction_limit: every node's (RaftNode's), e.g. an application's retention."""
        self.base = base
        self.compaction_limit = compaction_limit
        self.ids = list(range(1, n + 1))
        self.options = options
        self.net = LocalNetwork()
        self.nodes: dict[int, RaftNode] = {}
        self.fsms: dict[int, RecordingFSM] = {}

    async def start_node(self, i: int, join: bool = False) -> RaftNode:
        fsm = RecordingFSM()
        node = RaftNode(
            i,
            os.path.join(self.base, f"n{i}"),
            {j: f"local:{j}" for j in self.ids},
            fsm,
            self.net.transport(i),
            self.options,
            seed=i,
            join=join,
            compaction_limit=self.compaction_limit,
        )
        await node.start()
        self.nodes[i], self.fsms[i] = node, fsm
        return node

    async def start(self) -> None:
        for i in self.ids:
            await self.start_node(i)

    async def stop_node(self, i: int) -> None:
        await self.nodes.pop(i).stop()

    async def leader(self, timeout: float = 20.0, exclude: int = 0) -> RaftNode:
        def find():
            leads = [n for i, n in self.nodes.items() if n.is_leader() and i != exclude]
            return leads[0] if len(leads) == 1 else None

        await wait_until(lambda: find() is not None, timeout, "a leader")
        return find()

    async def stop(self) -> None:
        for i in list(self.nodes):
            await self.stop_node(i)
