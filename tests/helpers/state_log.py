"""A SinkStateMachine fed entries one by one, as its Raft group would apply them (unit
tests of controller commands: placement, moves, topic admin, retention)."""

from __future__ import annotations

from typing import Any

from raftlog.entry import EntryType, LogEntry
from sink.state import SinkStateMachine


class StateLog:
    """`apply(data)` -> the entry's applied result; `log` keeps every entry (replays)."""

    def __init__(self) -> None:
        self.fsm = SinkStateMachine()
        self.log: list[bytes] = []

    @property
    def index(self) -> int:
        return len(self.log)

    def apply(self, data: bytes) -> Any:
        self.log.append(data)
        return self.fsm.on_apply([LogEntry(len(self.log), 1, EntryType.DATA, data)])[0]
