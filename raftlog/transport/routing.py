"""Per-group delivery of received Raft messages, and the transports' counters.

Both transports (gRPC and in-process) route through a GroupRouter, so a process
can host many Raft groups on one transport: each group registers its handler
by group id, and a message for a group with no handler is dropped alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.core.messages import Message

log = logging.getLogger("raftlog.transport")

MessageHandler = Callable[[list[Message]], None]

UNKNOWN_GROUP_LOG_INTERVAL_S = 10.0
"""At most one log line per this many seconds about messages for unknown groups."""


@dataclass(slots=True)
class TransportStats:
    sent_messages: int = 0
    sent_batches: int = 0
    dropped_messages: int = 0
    received_messages: int = 0
    rejected_batches: int = 0
    reconnects: int = 0
    unknown_group_messages: int = 0
    """Received messages dropped because their group is not registered here."""
    tls_failures: int = 0
    """Sends to a peer that failed in the TLS handshake (another CA, expired certificate)."""
    handler_errors: int = 0
    """Deliveries whose group handler raised (that group's messages of the batch are lost;
    the stream and the other groups' messages are not)."""


class GroupRouter:
    """Delivers decoded messages to the handler registered for their group.

    Shared by both transports. Invariants: messages of one batch that go to the
    same handler arrive in one call and in wire order (one group today, so a
    node sees exactly the batches it saw before groups were routed); nothing a
    handler raises leaves deliver (it runs inside the peer stream's receive
    loop, which every group on the link shares): it is counted and logged at
    most once per interval, and the other handlers of the batch still run.
    """

    def __init__(
        self, stats: TransportStats, log_interval_s: float = UNKNOWN_GROUP_LOG_INTERVAL_S
    ) -> None:
        self.handlers: dict[int, MessageHandler] = {}
        self._stats = stats
        self._interval = log_interval_s
        self._last_log = float("-inf")
        self._suppressed = 0
        self._last_error_log = float("-inf")
        self._errors_suppressed = 0

    def _call(self, handler: MessageHandler, msgs: list[Message]) -> None:
        try:
            handler(msgs)
        except Exception as exc:
            self._stats.handler_errors += 1
            now = time.monotonic()
            if now - self._last_error_log < self._interval:
                self._errors_suppressed += 1
                return
            log.warning(
                "transport.handler_failed group=%d messages=%d error=%r suppressed_since_last=%d",
                msgs[0].group_id,
                len(msgs),
                exc,
                self._errors_suppressed,
                exc_info=True,
            )
            self._last_error_log = now
            self._errors_suppressed = 0

    def deliver(self, msgs: list[Message]) -> None:
        handlers = self.handlers
        first = handlers.get(msgs[0].group_id)
        if all(handlers.get(m.group_id) is first for m in msgs):
            if first is not None:
                self._call(first, msgs)
            return
        runs: dict[int, tuple[MessageHandler, list[Message]]] = {}
        for m in msgs:
            h = handlers.get(m.group_id)
            if h is None:  # unregistered between decode and delivery
                self._stats.unknown_group_messages += 1
                continue
            runs.setdefault(id(h), (h, []))[1].append(m)
        for h, run in runs.values():
            self._call(h, run)

    def unknown(self, peer: str, group_ids: list[int]) -> None:
        """Count dropped messages for unknown groups; log at most once per interval."""
        self._stats.unknown_group_messages += len(group_ids)
        now = time.monotonic()
        if now - self._last_log < self._interval:
            self._suppressed += len(group_ids)
            return
        log.warning(
            "transport.unknown_group peer=%s groups=%s dropped=%d suppressed_since_last=%d",
            peer,
            sorted(set(group_ids))[:8],
            len(group_ids),
            self._suppressed,
        )
        self._last_log = now
        self._suppressed = 0
