"""Errors a caller of RaftNode can get. Each says whether the outcome is known."""

from __future__ import annotations


class RaftError(Exception):
    """Base class of runtime errors."""


class NotLeaderError(RaftError):
    """This node is not the leader; nothing was proposed (outcome: not applied).

    leader_id / leader_address name the leader this node knows of (0 / None if
    none), so a client can retry there.
    """

    def __init__(self, leader_id: int, leader_address: str | None) -> None:
        hint = f"node {leader_id} at {leader_address}" if leader_id else "unknown"
        super().__init__(f"not the leader; leader: {hint}")
        self.leader_id = leader_id
        self.leader_address = leader_address


class LeaderChangedError(RaftError):
    """Leadership was lost (or the term changed) after the proposal was made.

    The outcome is UNKNOWN: the entry may still be committed by a later leader.
    Retry with a deduplicating command (idempotent producers do).
    """


class ProposalTimeoutError(RaftError, TimeoutError):
    """No commit within the timeout. The outcome is UNKNOWN, as for LeaderChangedError."""


class BusyError(RaftError):
    """Too many proposals are pending (back-pressure); nothing was proposed. Retry later."""


class NodeStoppedError(RaftError):
    """The node stopped (shutdown or a fatal storage error) before the call completed."""
