"""The group coordinator's outputs: the effects of the call being handled and the
proposals whose outcome it awaits (the plumbing of every request and tick).

Invariant: every effect goes into the list the latest begin() returned, which the
coordinator's entry point hands back to its driver; a callback run by committed()
adds its effects to that call's list. A proposal's callback runs at most once.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from sink.groups.messages import Effect, Propose, Reply
from sink.groups.options import GroupOptions

OnCommit = Callable[[float, ErrorCode], None]
"""A proposal's callback: (now, error), error none once committed and applied."""

log = logging.getLogger("sink.groups")


class Outbox:
    def __init__(self, options: GroupOptions) -> None:
        self.options = options
        self._out: list[Effect] = []
        self._proposals: dict[int, OnCommit] = {}
        self._next_proposal = itertools.count(1)

    def begin(self) -> list[Effect]:
        """A new call: its effects collect in the list returned."""
        self._out = []
        return self._out

    def reply(self, token: int, response: object) -> None:
        self._out.append(Reply(token, response))

    def propose(self, now: float, data: bytes, on_commit: OnCommit) -> int:
        """A command for the log. One larger than max_group_record_bytes is never
        proposed (a Raft entry has a hard size limit): it fails at once, INVALID_REQUEST."""
        proposal = next(self._next_proposal)
        if len(data) > self.options.max_group_record_bytes:
            log.warning("groups.record_too_large bytes=%d", len(data))
            on_commit(now, ErrorCode.invalid_request)
            return proposal
        self._proposals[proposal] = on_commit
        self._out.append(Propose(proposal, data))
        return proposal

    def committed(self, now: float, proposal: int, error: ErrorCode) -> None:
        """The outcome of a proposal: its callback runs (unknown or forgotten: nothing)."""
        on_commit = self._proposals.pop(proposal, None)
        if on_commit is not None:
            on_commit(now, error)

    def forget_proposals(self) -> None:
        """Outstanding proposals' outcomes are ignored from now on (leadership lost)."""
        self._proposals = {}
