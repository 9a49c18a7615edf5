"""In-process transport for tests: the same interface as GrpcTransport.

Messages go through the codec (encode, then decode with full validation), so a
test on LocalNetwork exercises the wire mapping too. Delivery is on the event
loop (call_soon), in order per (src, dst) pair. `partition`/`heal` and
`isolate` drop messages between groups of nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from raftlog.core.messages import Message
from raftlog.transport.codec import decode_batch, encode_batch
from raftlog.transport.grpc_transport import MessageHandler, TransportStats


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
            target = self._nodes.get(dst)
            if target is None or (src, dst) in self._blocked or target._handler is None:
                self._nodes[src].stats.dropped_messages += len(batch)
                continue
            wire = encode_batch(batch)
            decoded = decode_batch(wire, dst, set(self._nodes), target.groups)
            asyncio.get_running_loop().call_soon(target._receive, decoded)


class LocalTransport:
    def __init__(self, network: LocalNetwork, node_id: int, groups: set[int]) -> None:
        self.network = network
        self.node_id = node_id
        self.groups = groups
        self.stats = TransportStats()
        self.on_unreachable: Callable[[int], None] | None = None
        self._handler: MessageHandler | None = None

    async def start(self, handler: MessageHandler) -> None:
        self._handler = handler

    def add_peer(self, peer: int, address: str) -> None:
        pass

    def send(self, msgs: Iterable[Message]) -> None:
        batch = list(msgs)
        self.stats.sent_messages += len(batch)
        self.network._deliver(self.node_id, batch)

    def _receive(self, msgs: list[Message]) -> None:
        if self._handler is not None:
            self.stats.received_messages += len(msgs)
            self._handler(msgs)

    async def close(self) -> None:
        self._handler = None
