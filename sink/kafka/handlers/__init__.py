"""Request handlers by API key, and the versions served (advertised in ApiVersions).

Advertise only what is served: librdkafka gates features on this list
(Fetch >= 4 for RecordBatch v2, Fetch >= 10 for zstd, FindCoordinator for lz4,
InitProducerId for idempotence). OffsetForLeaderEpoch (23) and telemetry (71)
are deliberately absent.
"""

from sink.kafka.handlers.cluster import (
    api_versions_error_response,
    create_topics_error_response,
    encode_api_versions,
    find_coordinator_error_response,
    handle_create_topics,
    handle_find_coordinator,
    handle_metadata,
    metadata_error_response,
)
from sink.kafka.handlers.context import Advertised, HandlerContext
from sink.kafka.handlers.fetch import (
    fetch_error_response,
    handle_fetch,
    handle_list_offsets,
    list_offsets_error_response,
)
from sink.kafka.handlers.groups import (
    handle_offset_commit,
    handle_offset_fetch,
    offset_commit_error_response,
    offset_fetch_error_response,
)
from sink.kafka.handlers.produce import (
    handle_init_producer_id,
    handle_produce,
    init_producer_id_error_response,
    produce_error_response,
)

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

# (version, correlation id, request or None, error code) -> the response of that
# version answering every part of the request with the code; None where no answer
# can be formed (acks=0, or no request to mirror and no top-level error code).
ERROR_RESPONSES = {
    0: produce_error_response,
    1: fetch_error_response,
    2: list_offsets_error_response,
    3: metadata_error_response,
    8: offset_commit_error_response,
    9: offset_fetch_error_response,
    10: find_coordinator_error_response,
    18: api_versions_error_response,
    19: create_topics_error_response,
    22: init_producer_id_error_response,
}

__all__ = [
    "API_VERSIONS_KEY",
    "ERROR_RESPONSES",
    "HANDLERS",
    "SUPPORTED",
    "Advertised",
    "HandlerContext",
    "encode_api_versions",
]
