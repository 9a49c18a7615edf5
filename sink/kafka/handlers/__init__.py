"""The APIs served: one module per API, registered by its kio request schema's
__api_key__ (see handlers/api.py for the shape of a module).

Advertise only what is served: librdkafka gates features on this list
(Fetch >= 4 for RecordBatch v2, Fetch >= 10 for zstd, FindCoordinator for lz4,
InitProducerId for idempotence). OffsetForLeaderEpoch (23) and telemetry (71)
are deliberately absent. To add an API: write handlers/<api>.py with
`API = Api(...)` and list it in _MODULES; ApiVersions, the dispatcher, the docs
table and the conformance harness pick it up from REGISTRY.
"""

from __future__ import annotations

from types import MappingProxyType

from sink.kafka.handlers import (
    api_versions,
    create_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
)
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.api_versions import API_VERSIONS_KEY, encode_api_versions
from sink.kafka.handlers.services import Advertised, HandlerContext

_MODULES = (
    produce,
    fetch,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    find_coordinator,
    api_versions,
    create_topics,
    init_producer_id,
)

REGISTRY: MappingProxyType[int, Api] = MappingProxyType(
    {m.API.key: m.API for m in sorted(_MODULES, key=lambda m: m.API.key)}
)
"""API key -> its Api (handler, error response, versions, pricing)."""

SUPPORTED: MappingProxyType[int, tuple[int, int]] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items()}
)
"""API key -> (min, max) versions served and advertised in ApiVersions."""

__all__ = [
    "API_VERSIONS_KEY",
    "REGISTRY",
    "SUPPORTED",
    "Advertised",
    "Api",
    "Call",
    "HandlerContext",
    "Response",
    "answered",
    "encode_api_versions",
    "later",
]
