"""The APIs served: one module per API, registered by its kio request schema's
__api_key__ (see handlers/api.py for the shape of a module).

Advertise only what is served: librdkafka gates features on this list
(Fetch >= 4 for RecordBatch v2, Fetch >= 10 for zstd, FindCoordinator for lz4,
InitProducerId for idempotence; OffsetForLeaderEpoch turns on librdkafka's and the
Java client's position validation after leader changes). Telemetry (71) is
deliberately absent. To add an API: write handlers/<api>.py with
`API = Api(...)` and list it in _MODULES; ApiVersions, the dispatcher, the docs
table and the conformance harness pick it up from REGISTRY.
"""

from __future__ import annotations

from types import MappingProxyType

from sink.kafka.handlers import (
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_quorum,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    envelope,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
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
    describe_client_quotas,
    alter_client_quotas,
    offset_delete,
    offset_for_leader_epoch,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    delete_groups,
    delete_topics,
    create_partitions,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    describe_producers,
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_acls,
    create_acls,
    delete_acls,
    alter_partition_reassignments,
    list_partition_reassignments,
    describe_quorum,
    elect_leaders,
    describe_transactions,
    list_transactions,
    envelope,
    list_config_resources,
)

REGISTRY: MappingProxyType[int, Api] = MappingProxyType(
    {m.API.key: m.API for m in sorted(_MODULES, key=lambda m: m.API.key)}
)
"""API key -> its Api (handler, error response, versions, pricing)."""

SUPPORTED: MappingProxyType[int, tuple[int, int]] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items()}
)
"""API key -> (min, max) versions served (the listener parses these)."""

ADVERTISED: MappingProxyType[int, tuple[int, int]] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items() if not api.internal}
)
"""What ApiVersions advertises: SUPPORTED less the internal APIs (Envelope)."""

__all__ = [
    "ADVERTISED",
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
