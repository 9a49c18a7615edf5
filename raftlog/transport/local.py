"""In-process transport for tests: the same interface as GrpcTransport.

Messages go through the codec (encode, then decode with full validation), so a
test on LocalNetwork exercises the wire mapping too. Delivery is on the event
loop (call_soon), in order per (src, dst) pair. `partition`/`heal`,
`isolate` and `cut` (one direction) drop messages between nodes. Groups are routed as in
GrpcTransport: `start(handler)` or `register_group`; a message for a group
with no handler is dropped alone and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from raftlog.core.messages import Message
from raftlog.transport.codec import decode_batch_known, encode_batch
from raftlog.transport.routing import GroupRouter, MessageHandler, TransportStats


class LocalNetwork:
    def __init__(self) -> None:
        self._nodes: dict[int, LocalTransport] = {}
        self._blocked: set[tuple[int, int]] = set()

    def transport(self, node_id: int, groups: Iterable[int] = (0,)) -> LocalTransport:
        t = LocalTransport(self, node_id, set(groups))
        self._nodes[node_id] = t
        return t

    def partition(self, *sides: Iterable[int]) -> None:
        """Cut every link between nodes on different sides."""
        groups = [set(s) for s in sides]
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        self._blocked.add((x, y))
                        self._blocked.add((y, x))

    def cut(self, src: int, dst: int) -> None:
        """Drop messages from src to dst only (dst to src still flows)."""
        self._blocked.add((src, dst))

    def isolate(self, node: int) -> None:
        others = [n for n in self._nodes if n != node]
        self.partition([node], others)

    def heal(self) -> None:
        self._blocked.clear()

    def _deliver(self, src: int, msgs: list[Message]) -> None:
        by_dst: dict[int, list[Message]] = {}
        for m in msgs:
            by_dst.setdefault(m.dst, []).append(m)
        for dst, batch in by_dst.items():
            self._nodes[src].stats.sent_batches += 1  # one write per peer, as gRPC's sender
            target = self._nodes.get(dst)
            if target is None or (src, dst) in self._blocked or not target._started:
                self._nodes[src].stats.dropped_messages += len(batch)
                continue
            wire = encode_batch(batch)
            decoded, unknown = decode_batch_known(
                wire, dst, set(self._nodes), target._router.handlers
            )
            if unknown:
                target._router.unknown(f"node-{src}", unknown)
            if decoded:
                asyncio.get_running_loop().call_soon(target._receive, decoded)


class LocalTransport:
    def __init__(self, network: LocalNetwork, node_id: int, groups: set[int]) -> None:
        self.network = network
        self.node_id = node_id
        self.groups = groups
        self.stats = TransportStats()
        self.on_unreachable: Callable[[int], None] | None = None
        self._router = GroupRouter(self.stats)
        self._started = False

    def register_group(self, group_id: int, handler: MessageHandler) -> None:
        """Deliver messages of group_id to handler (as GrpcTransport.register_group)."""
        self.groups.add(group_id)
        self._router.handlers[group_id] = handler

    def unregister_group(self, group_id: int) -> None:
        self.groups.discard(group_id)
        self._router.handlers.pop(group_id, None)

    async def start(self, handler: MessageHandler | None = None) -> None:
        if handler is not None:
            for g in self.groups:
                self.register_group(g, handler)
        self._started = True

    def add_peer(self, peer: int, address: str) -> None:
        pass

    def send(self, msgs: Iterable[Message]) -> None:
        batch = list(msgs)
        self.stats.sent_messages += len(batch)
        self.network._deliver(self.node_id, batch)

    def _receive(self, msgs: list[Message]) -> None:
        if self._started:
            self.stats.received_messages += len(msgs)
            self._router.deliver(msgs)

    async def close(self) -> None:
        self._started = False
