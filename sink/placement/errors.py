"""PlacementError: a placement request that cannot be honoured, with the Kafka error code
the front end answers (CreateTopics, CreatePartitions, AlterPartitionReassignments)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class PlacementError(ValueError):
    """Refused placement: `code` is the Kafka error to answer, the message says why.

    Codes used:
        INVALID_PARTITIONS (37)           partition count below 1
        INVALID_REPLICATION_FACTOR (38)   replication factor below 1 or above the number
                                          of distinct live hosts
        INVALID_REPLICA_ASSIGNMENT (39)   an operator's replica list names an unknown or
                                          dead node, a node twice, or two nodes of one host
    There is never a silent fallback: a request either gets a placement honouring every
    hard rule or this error."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __repr__(self) -> str:
        return f"PlacementError({self.code.name}, {str(self)!r})"
