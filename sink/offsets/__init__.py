"""Committed consumer-group offsets as a service over the Raft log.

    service     GroupOffsetService (the Kafka handlers' GroupOffsets), OffsetsOptions
                (the `offsets` configuration section)

The replicated table itself is sink.state.group_offsets; the entries
sink.state.offset_command. Kept apart from sink.groups, whose placement and membership
modules are leaves the Kafka handlers import (this package imports sink.kafka and
sink.state, so living there would close a package cycle).
"""

from sink.offsets.service import GroupOffsetService, OffsetsOptions

__all__ = ["GroupOffsetService", "OffsetsOptions"]
