"""Kafka error codes: one typed set, kio's ErrorCode (an IntEnum of the protocol's
whole table, generated from Kafka's own). Use its members everywhere
(ErrorCode.not_leader_or_follower), never bare ints: they pack as int16 as they are,
and kio's writer needs them as ErrorCode anyway."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "OffsetOutOfRange"]


class OffsetOutOfRange(Exception):
    """A read below log_start_offset or above the high watermark (Kafka's
    OFFSET_OUT_OF_RANGE); raised by the state machine, caught by Fetch."""
