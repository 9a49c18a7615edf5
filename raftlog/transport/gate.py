"""GatedTransport: a transport whose inbound messages pass the application's gates.

For a node short of disk space (the application decides when: sink's DiskWatch). What
such a node must refuse is exactly what a lossy network may drop anyway, so the core
needs no new rule:
  - AppendEntries carrying entries, while refuse_appends(): dropped. The follower does
    not acknowledge; the leader commits with the other voters and re-sends later (each
    heartbeat response re-opens its window), so the follower catches up by itself once
    the gate opens. Empty appends (probes, commit updates) still pass.
  - TimeoutNow, while refuse_leadership(): dropped. A node that may not take new data
    must not take leadership by transfer (the transfer times out; the leader may try
    another). Ordinary elections still run, so a leaderless cluster still gets a leader.
Everything else (votes, heartbeats, responses, snapshots, read-index) passes: none of
it grows the log beyond what a free-space reserve keeps room for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftlog.core.messages import AppendEntries, Message, MsgType
from raftlog.transport.routing import MessageHandler


def _never() -> bool:
    return False


class GatedTransport:
    """Wraps a GrpcTransport or LocalTransport; every other attribute is the inner one's."""

    def __init__(
        self,
        inner: Any,
        *,
        refuse_appends: Callable[[], bool] = _never,
        refuse_leadership: Callable[[], bool] = _never,
    ) -> None:
        self._inner = inner
        self.refuse_appends = refuse_appends
        self.refuse_leadership = refuse_leadership
        self.refused_appends = 0
        """AppendEntries with entries dropped by the gate."""
        self.refused_transfers = 0
        """TimeoutNow messages dropped by the gate."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    # The callbacks the inner transport calls are set through the wrapper: an attribute
    # set here would stay on the wrapper (only reads fall through __getattr__), and the
    # inner transport would never call it. RaftHost sets on_unreachable: without this
    # forwarding a sink node never reported a broken send stream, so a killed peer was
    # declared down only by the silence limit (3 s) instead of the broken-stream
    # evidence, and its quiesced groups failed over in 3.1-3.6 s instead of about 1 s.
    @property
    def on_unreachable(self) -> Callable[[int], None] | None:
        return getattr(self._inner, "on_unreachable", None)

    @on_unreachable.setter
    def on_unreachable(self, callback: Callable[[int], None] | None) -> None:
        self._inner.on_unreachable = callback

    async def start(self, handler: MessageHandler | None = None) -> None:
        await self._inner.start(self._wrap(handler) if handler is not None else None)

    def register_group(self, group_id: int, handler: MessageHandler) -> None:
        self._inner.register_group(group_id, self._wrap(handler))

    def _wrap(self, handler: MessageHandler) -> MessageHandler:
        def gated(msgs: list[Message]) -> None:
            if not self.refuse_leadership() and not self.refuse_appends():
                handler(msgs)  # the common case: nothing to filter
                return
            kept = [m for m in msgs if self._keep(m)]
            if kept:
                handler(kept)

        return gated

    def _keep(self, m: Message) -> bool:
        if m.type is MsgType.TIMEOUT_NOW and self.refuse_leadership():
            self.refused_transfers += 1
            return False
        if isinstance(m, AppendEntries) and m.entries and self.refuse_appends():
            self.refused_appends += 1
            return False
        return True
