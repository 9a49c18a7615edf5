"""Hand-written kio-style schemas of the old request versions Kafka 3.7 serves.

kio's schemas are generated from Kafka 4.x, which removed these versions (KIP-896):
Produce v0-2, Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0. Old
clients still send them by default (Sarama's default version V0_8_2_0, librdkafka
with api.version.request=false, kafka-python with api_version pinned), and Kafka 3.7
still serves them, so raftsink does too.

The dataclasses below follow Kafka 3.7's JSON message definitions
(clients/src/main/resources/common/message/{Produce,Fetch,ListOffsets,OffsetCommit,
OffsetFetch}{Request,Response}.json), in kio's own conventions (frozen slotted
dataclasses, `kafka_type` metadata, the same field names kio uses for the first
version it has), so kio's native reader and writer, sink.kafka.protocol.framecheck
and sink.kafka.protocol.build handle them like generated ones. None of these
versions is flexible: no tagged fields, request header v1, response header v0.

The annotations MUST stay real objects (no `from __future__ import annotations`):
kio's reader and writer inspect `dataclasses.Field.type` directly.

Each builder function makes one version's classes (the versions differ by a few
fields); LEGACY maps (api_key, version) -> (request class, response class).
"""

import datetime
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import (
    Records,
    TZAware,
    i16,
    i32,
    i32Timedelta,
    i64,
)

__all__ = ["LEGACY", "legacy_request", "legacy_response"]

_NESTED = EntityType.nested
_REQUEST = EntityType.request
_RESPONSE = EntityType.response
_ZERO_MS = i32Timedelta.parse(datetime.timedelta(milliseconds=0))

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 8, 9


def _produce(v: int) -> tuple[type, type]:
    """Produce v0-2. Request v0-2 identical (no transactional_id: v3+). Response v1
    adds throttle_time_ms (after the topics), v2 log_append_time_ms per partition."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceData:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceData:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_data: tuple[PartitionProduceData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ProduceRequest:
        __type__: ClassVar = _REQUEST
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        acks: i16 = field(metadata={"kafka_type": "int16"})
        timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        topic_data: tuple[TopicProduceData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceResponse:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        base_offset: i64 = field(metadata={"kafka_type": "int64"})
        if v >= 2:
            log_append_time: TZAware | None = field(
                metadata={"kafka_type": "datetime_i64"}, default=None
            )

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceResponse:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_responses: tuple[PartitionProduceResponse, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ProduceResponse:
        __type__: ClassVar = _RESPONSE
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        responses: tuple[TopicProduceResponse, ...]
        if v >= 1:
            throttle_time: i32Timedelta = field(
                metadata={"kafka_type": "timedelta_i32"}, default=_ZERO_MS
            )

    return ProduceRequest, ProduceResponse


def _fetch(v: int) -> tuple[type, type]:
    """Fetch v0-3. Request v3 adds max_bytes (KIP-74); response v1+ starts with
    throttle_time_ms. No last stable offset, log start or aborted transactions (v4+)."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchPartition:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        partition: i32 = field(metadata={"kafka_type": "int32"})
        fetch_offset: i64 = field(metadata={"kafka_type": "int64"})
        partition_max_bytes: i32 = field(metadata={"kafka_type": "int32"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[FetchPartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchRequest:
        __type__: ClassVar = _REQUEST
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
        max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        min_bytes: i32 = field(metadata={"kafka_type": "int32"})
        if v >= 3:
            max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0x7FFFFFFF))
        topics: tuple[FetchTopic, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionData:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        high_watermark: i64 = field(metadata={"kafka_type": "int64"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchableTopicResponse:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[PartitionData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchResponse:
        __type__: ClassVar = _RESPONSE
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        if v >= 1:
            throttle_time: i32Timedelta = field(
                metadata={"kafka_type": "timedelta_i32"}, default=_ZERO_MS
            )
        responses: tuple[FetchableTopicResponse, ...]

    return FetchRequest, FetchResponse


def _list_offsets_v0() -> tuple[type, type]:
    """ListOffsets v0: max_num_offsets per partition, answered by old_style_offsets
    (an array of offsets, newest first) instead of one (timestamp, offset)."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsPartition:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        timestamp: i64 = field(metadata={"kafka_type": "int64"})
        max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsRequest:
        __type__: ClassVar = _REQUEST
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        replica_id: BrokerId = field(metadata={"kafka_type": "int32"})
        topics: tuple[ListOffsetsTopic, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsPartitionResponse:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsTopicResponse:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartitionResponse, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsResponse:
        __type__: ClassVar = _RESPONSE
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topics: tuple[ListOffsetsTopicResponse, ...]

    return ListOffsetsRequest, ListOffsetsResponse


def _offset_commit(v: int) -> tuple[type, type]:
    """OffsetCommit v0-1. v1 adds generation_id and member_id, and a per-partition
    commit_timestamp (v1 only; -1 = the broker's time). No retention_time (v2-4)."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitRequestPartition:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        committed_offset: i64 = field(metadata={"kafka_type": "int64"})
        if v >= 1:
            commit_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
        committed_metadata: str | None = field(metadata={"kafka_type": "string"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitRequestTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[OffsetCommitRequestPartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitRequest:
        __type__: ClassVar = _REQUEST
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        group_id: GroupId = field(metadata={"kafka_type": "string"})
        if v >= 1:
            generation_id_or_member_epoch: i32 = field(
                metadata={"kafka_type": "int32"}, default=i32(-1)
            )
            member_id: str = field(metadata={"kafka_type": "string"})
        topics: tuple[OffsetCommitRequestTopic, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitResponsePartition:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitResponseTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[OffsetCommitResponsePartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetCommitResponse:
        __type__: ClassVar = _RESPONSE
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_COMMIT)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topics: tuple[OffsetCommitResponseTopic, ...]

    return OffsetCommitRequest, OffsetCommitResponse


def _offset_fetch_v0() -> tuple[type, type]:
    """OffsetFetch v0: the same shape as v1 (v0 read ZooKeeper-stored offsets in old
    brokers; Kafka 3.7 serves both from the same store). Errors per partition only."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetFetchRequestTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_indexes: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetFetchRequest:
        __type__: ClassVar = _REQUEST
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        group_id: GroupId = field(metadata={"kafka_type": "string"})
        topics: tuple[OffsetFetchRequestTopic, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetFetchResponsePartition:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        committed_offset: i64 = field(metadata={"kafka_type": "int64"})
        metadata: str | None = field(metadata={"kafka_type": "string"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetFetchResponseTopic:
        __type__: ClassVar = _NESTED
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[OffsetFetchResponsePartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class OffsetFetchResponse:
        __type__: ClassVar = _RESPONSE
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(OFFSET_FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topics: tuple[OffsetFetchResponseTopic, ...]

    return OffsetFetchRequest, OffsetFetchResponse


LEGACY: dict[tuple[int, int], tuple[type, type]] = {
    **{(PRODUCE, v): _produce(v) for v in (0, 1, 2)},
    **{(FETCH, v): _fetch(v) for v in (0, 1, 2, 3)},
    (LIST_OFFSETS, 0): _list_offsets_v0(),
    **{(OFFSET_COMMIT, v): _offset_commit(v) for v in (0, 1)},
    (OFFSET_FETCH, 0): _offset_fetch_v0(),
}
"""(api_key, version) -> (request class, response class) of every hand-written version."""


def legacy_request(api_key: int, version: int) -> type | None:
    entry = LEGACY.get((api_key, version))
    return entry[0] if entry else None


def legacy_response(api_key: int, version: int) -> type | None:
    entry = LEGACY.get((api_key, version))
    return entry[1] if entry else None
