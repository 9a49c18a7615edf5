"""The interface an application implements to be driven by a RaftNode (braft's FSM)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, NamedTuple

from raftlog.entry import LogEntry


class ApplyResult(NamedTuple):
    """What RaftNode.apply returns: where the entry landed and the FSM's answer."""

    index: int
    term: int
    result: Any


class StateMachine:
    """Callbacks are made serially, in log order, on the node's event loop.

    on_apply gets committed DATA entries in batches and returns one result per
    entry (or an awaitable of that list); the result completes the proposer's
    future on the node that proposed it. Everything else has a default.
    """

    def on_apply(self, entries: Sequence[LogEntry]) -> Sequence[Any] | Awaitable[Sequence[Any]]:
        raise NotImplementedError

    def on_leader_start(self, term: int) -> None:
        """This node leads `term` and an entry of the term is applied: every
        entry committed before it is applied too, so reads are current."""

    def on_leader_stop(self) -> None:
        """This node no longer leads."""

    def on_snapshot_save(self) -> bytes:
        """Serialize the state as of the last applied entry (snapshots off if unsupported)."""
        raise NotImplementedError

    def on_snapshot_load(self, data: bytes) -> None:
        """Replace the state with a snapshot's (at start-up or from the leader)."""
        raise NotImplementedError

    def on_error(self, error: BaseException) -> None:
        """The node stopped because of error (e.g. a failed disk write)."""
