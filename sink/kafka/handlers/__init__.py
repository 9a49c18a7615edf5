"""Request handlers by API key, and the versions served (advertised in ApiVersions).

Advertise only what is served: librdkafka gates features on this list
(Fetch >= 4 for RecordBatch v2, Fetch >= 10 for zstd, FindCoordinator for lz4,
InitProducerId for idempotence). OffsetForLeaderEpoch (23) and telemetry (71)
are deliberately absent.
"""

from sink.kafka.handlers.cluster import (
    encode_api_versions,
    handle_create_topics,
    handle_find_coordinator,
    handle_metadata,
)
from sink.kafka.handlers.context import Advertised, HandlerContext
from sink.kafka.handlers.fetch import handle_fetch, handle_list_offsets
from sink.kafka.handlers.groups import handle_offset_commit, handle_offset_fetch
from sink.kafka.handlers.produce import handle_init_producer_id, handle_produce

API_VERSIONS_KEY = 18

SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 10),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 8),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    22: (0, 4),  # InitProducerId
}

HANDLERS = {
    0: handle_produce,
    1: handle_fetch,
    2: handle_list_offsets,
    3: handle_metadata,
    8: handle_offset_commit,
    9: handle_offset_fetch,
    10: handle_find_coordinator,
    19: handle_create_topics,
    22: handle_init_producer_id,
}

__all__ = [
    "API_VERSIONS_KEY",
    "HANDLERS",
    "SUPPORTED",
    "Advertised",
    "HandlerContext",
    "encode_api_versions",
]
