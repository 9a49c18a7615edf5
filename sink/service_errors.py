"""The Kafka error of a failed Raft proposal: one mapping for sink.service (and its
admin part, sink.service_admin), sink.lifecycle.topics (handed it) and
sink.node.routing (the data groups' proposals). Logs on sink.service's logger.
"""

from __future__ import annotations

import logging

from raftlog.runtime import (
    BusyError,
    LeaderChangedError,
    NodeStoppedError,
    NotLeaderError,
    ProposalTimeoutError,
)
from sink.kafka.protocol.errors import ErrorCode

log = logging.getLogger("sink.service")


def _error_of(exc: BaseException | None) -> ErrorCode:
    """The Kafka error of a failed (None: cancelled) proposal. Only what really
    means "outcome unknown, retry" is REQUEST_TIMED_OUT; anything unrecognised is a
    bug and says so (UNKNOWN_SERVER_ERROR, logged), never a timeout."""
    if exc is None or isinstance(exc, ProposalTimeoutError):
        return ErrorCode.request_timed_out
    if isinstance(exc, NotLeaderError | LeaderChangedError | NodeStoppedError):
        return ErrorCode.not_leader_or_follower
    if isinstance(exc, BusyError):
        return ErrorCode.not_enough_replicas
    log.error("sink.unexpected_error %r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error
