"""A controller RaftGroup for unit tests: entries are "committed" by applying them to a
real SinkStateMachine at once (one term, consecutive indexes), always the leader."""

from __future__ import annotations

from types import SimpleNamespace

from raftlog.entry import EntryType, LogEntry
from sink.state import SinkStateMachine


class FakeController:
    def __init__(self, voters: list[int] | None = None) -> None:
        self.fsm = SinkStateMachine()
        self.leader_id = 1
        self.index = 0
        self.voters = list(voters) if voters is not None else [1, 2, 3, 4]

    def is_leader(self) -> bool:
        return True

    async def apply(self, data: bytes, timeout: float | None = None) -> SimpleNamespace:
        self.index += 1
        res = self.fsm.on_apply([LogEntry(self.index, 1, EntryType.DATA, data)])[0]
        return SimpleNamespace(result=res)
