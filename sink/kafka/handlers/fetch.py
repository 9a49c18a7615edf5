"""Fetch (v0-v16, hand-rolled response; topics by id from v13, KIP-516).

Only applied (committed) data is served. A leader serves only after
on_leader_start of its current term (an own-term entry applied), so its high
watermark is at least every earlier leader's; followers serve their applied
data, and above their high watermark send the client to the leader (see
_beyond_high_watermark: OFFSET_OUT_OF_RANGE only where the offset surely does not
exist). Fetch honours max_wait/min_bytes with a wake-up on newly applied records,
declines fetch sessions (session_id 0), returns whole batches from the one
containing fetch_offset, and at least one batch even above partition_max_bytes
(KIP-74). v16 answers that send the client away name the leader (KIP-951).
Every leadership question is the partition's own (PartitionRoles.role: the group
that owns it): a node hosting no replica answers NOT_LEADER_OR_FOLLOWER, a client
epoch older than the group's term FENCED_LEADER_EPOCH.
A topic the principal may not READ is TOPIC_AUTHORIZATION_FAILED per partition.

v0-3 answer with message sets down-converted from the stored batches, as Kafka 3.x
does: magic 0 for v0-1, magic 1 for v2-3 (sink.kafka.protocol.messageset.down_convert
states the size rules: v3 follows KIP-74, v0-2's partition_max_bytes is a hard limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.fetch.v16.request import FetchRequest

from sink.kafka.authorize import topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.quota_throttle import fetch_bytes_cap, fetch_throttle
from sink.kafka.handlers.services import HandlerContext, PartitionRole
from sink.kafka.protocol.encoders import FetchPartition, encode_fetch
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
from sink.kafka.protocol.messageset import down_convert
from sink.kafka.protocol.records import ZSTD, ZSTD_MIN_FETCH, compression_of
from sink.security.acl import Operation

RECORD_BATCH_MIN_FETCH = 4  # below: message sets, down-converted from the stored batches
_NO_MAX_BYTES = 0x7FFFFFFF  # Fetch v0-2 have no response max_bytes (KIP-74 added it in v3)

# kio reads the all-zero topic id as None; the answer names the id as sent.
_ZERO_TOPIC_ID = uuid.UUID(int=0)


def _topic_key(ft: Any) -> uuid.UUID:
    """A v13+ request topic's id as the answer names it (never None)."""
    return ft.topic_id if ft.topic_id is not None else _ZERO_TOPIC_ID


def _serving_error(role: PartitionRole, client_epoch: int) -> ErrorCode:
    """Whether this node may serve the partition at all (none: it may).

    A node that hosts no replica of the partition's group has none of its data; a new
    leader whose own-term entry is not applied yet may lack commits of earlier terms:
    both send the client away (NOT_LEADER_OR_FOLLOWER). A client whose epoch (Fetch v9+
    current_leader_epoch, from Metadata) is older than the group's term is
    FENCED_LEADER_EPOCH, as Kafka answers: it refreshes Metadata and retries. A newer
    epoch is checked only above the high watermark (_beyond_high_watermark)."""
    if not role.hosted or (role.leads and not role.ready):
        return ErrorCode.not_leader_or_follower
    if 0 <= client_epoch < role.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.none


def _beyond_high_watermark(role: PartitionRole, client_epoch: int) -> ErrorCode:
    """The answer to a Fetch above this node's high watermark (none: an empty, waiting answer).

    OFFSET_OUT_OF_RANGE makes a consumer reset its position (to earliest or latest: re-reading
    or skipping records), so only a node that knows the offset does not exist may say it: a
    ready leader that has applied everything committed. A follower (or a node cut off from the
    leader) may simply lag the cluster: the offset can exist, committed by the leader and even
    read by this consumer elsewhere. It answers NOT_LEADER_OR_FOLLOWER, as Kafka's followers do,
    and the client refreshes Metadata and fetches from the leader. A ready leader whose apply
    lags its commit index answers empty; the long poll wakes when the records are applied.

    A leader may be deposed without knowing it yet (cut off, until CheckQuorum steps it down).
    A client that has seen a later leader epoch (Fetch v9+ current_leader_epoch, from Metadata)
    may have read past this node's high watermark there, so that leader answers
    UNKNOWN_LEADER_EPOCH ("not caught up on the latest metadata"); librdkafka refreshes
    Metadata and retries. A newer epoch is checked only here: serving committed data below
    the high watermark is correct on any replica in any term. All of it per partition:
    `role` is the state of the group that owns it.
    """
    if not role.ready:
        return ErrorCode.not_leader_or_follower
    if client_epoch > role.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    if not role.caught_up:
        return ErrorCode.none
    return ErrorCode.offset_out_of_range


def _sent_away(
    ctx: HandlerContext, role: PartitionRole, idx: int, err: ErrorCode
) -> FetchPartition:
    """A partition answered with err and no data; NOT_LEADER_OR_FOLLOWER and
    FENCED_LEADER_EPOCH name the partition's leader and epoch (written from v16,
    KIP-951), when this listener advertises the leader."""
    lead = ctx.broker(role.leader)
    if lead < 0 or err not in _HINTED:
        return FetchPartition(idx, err, -1, -1, (), 0)
    return FetchPartition(idx, err, -1, -1, (), 0, lead, role.leader_epoch)


_HINTED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def _collect(
    ctx: HandlerContext,
    req: Any,
    version: int,
    cap: int | None = None,
    readable: Callable[[str], bool] = lambda _name: True,
) -> tuple[list, int, bool]:
    """readable(topic): the principal may READ it (else TOPIC_AUTHORIZATION_FAILED)."""
    fsm = ctx.partitions
    max_bytes = getattr(req, "max_bytes", _NO_MAX_BYTES)
    budget = max_bytes if max_bytes > 0 else 1 << 30
    if cap is not None:  # client quotas: no more than the quota windows absorb
        budget = min(budget, cap)
    total = 0
    any_error = False
    topics: list = []
    for ft in req.topics:
        parts: list[FetchPartition] = []
        if version >= 13:  # by topic id (KIP-516)
            # The zero id (None as kio reads it) names no topic: UNKNOWN_TOPIC_ID.
            info = None if ft.topic_id is None else fsm.topic_by_id(ft.topic_id)
            topics.append((_topic_key(ft), parts))
            if info is None:
                for fp in ft.partitions:
                    parts.append(
                        FetchPartition(fp.partition, ErrorCode.unknown_topic_id, -1, -1, (), 0)
                    )
                any_error = any_error or bool(ft.partitions)
                continue
            name = info.name
        else:
            name = ft.topic
            topics.append((name, parts))
        if not readable(name):
            for fp in ft.partitions:
                parts.append(
                    FetchPartition(
                        fp.partition, ErrorCode.topic_authorization_failed, -1, -1, (), 0
                    )
                )
            any_error = any_error or bool(ft.partitions)
            continue
        for fp in ft.partitions:
            idx = fp.partition
            if not fsm.has_partition(name, idx):
                parts.append(
                    FetchPartition(idx, ErrorCode.unknown_topic_or_partition, -1, -1, (), 0)
                )
                any_error = True
                continue
            role = ctx.role(name, idx)
            client_epoch = getattr(fp, "current_leader_epoch", -1)
            serving = _serving_error(role, client_epoch)
            if serving != ErrorCode.none:
                parts.append(_sent_away(ctx, role, idx, serving))
                any_error = True
                continue
            hw = fsm.high_watermark(name, idx)
            start = fsm.log_start_offset(name, idx)
            if fp.fetch_offset > hw:
                err = _beyond_high_watermark(role, client_epoch)
                # Only answers about this partition's log carry its offsets; "ask elsewhere"
                # answers carry -1, like the serving errors above.
                if err in (ErrorCode.none, ErrorCode.offset_out_of_range):
                    parts.append(FetchPartition(idx, err, hw, start, (), 0))
                else:
                    parts.append(_sent_away(ctx, role, idx, err))
                any_error = any_error or err != ErrorCode.none
                continue
            pieces: list = []
            size = 0
            if total < budget or total == 0:
                # Both limits bind every partition, the first too (its first batch
                # alone may cross them: _within).
                limit = min(fp.partition_max_bytes, budget - total)
                try:
                    batches = fsm.read_parts(name, idx, fp.fetch_offset, max(limit, 1))
                except OffsetOutOfRange:
                    parts.append(
                        FetchPartition(idx, ErrorCode.offset_out_of_range, hw, start, (), 0)
                    )
                    any_error = True
                    continue
                if version < ZSTD_MIN_FETCH and any(
                    compression_of(r) == ZSTD for _, _, r in batches
                ):
                    # KIP-110: a client fetching below v10 cannot read zstd; Kafka answers
                    # the partition with UNSUPPORTED_COMPRESSION_TYPE instead of the data.
                    err = ErrorCode.unsupported_compression_type
                    parts.append(FetchPartition(idx, err, -1, -1, (), 0))
                    any_error = True
                    continue
                if version < RECORD_BATCH_MIN_FETCH:
                    try:
                        pieces = _down_converted(batches, version, fp.fetch_offset, limit, total)
                    except ValueError:  # records no decoder reads (stored by a v3+ Produce)
                        err = ErrorCode.corrupt_message
                        parts.append(FetchPartition(idx, err, hw, start, (), 0))
                        any_error = True
                        continue
                    size = sum(len(p) for p in pieces)
                else:
                    for _base, prefix, rest in _within(batches, limit, first=total == 0):
                        pieces.append(prefix)
                        pieces.append(rest)
                        size += len(prefix) + len(rest)
            elif fp.fetch_offset < start:
                parts.append(FetchPartition(idx, ErrorCode.offset_out_of_range, hw, start, (), 0))
                any_error = True
                continue
            total += size
            parts.append(FetchPartition(idx, ErrorCode.none, hw, start, pieces, size))
    return topics, total, any_error


def _within(batches: list, limit: int, first: bool) -> list:
    """The batches that fit in limit bytes, whole, in order (KIP-74, Kafka's log read):
    only the response's first data (first) may exceed it, by its first batch alone, so
    a batch larger than every limit still makes progress. The store's read stops once
    it reached the limit, so its last batch may cross it: a client sizes its receive
    buffer from fetch.max.bytes (librdkafka: at least 512 bytes more) and drops a
    larger answer ("Invalid response size")."""
    out = []
    used = 0
    for b in batches:
        n = len(b[1]) + len(b[2])
        if used + n > limit and not (first and not out):
            break
        out.append(b)
        used += n
    return out


def _down_converted(
    batches: list, version: int, fetch_offset: int, limit: int, total: int
) -> list[bytes]:
    """Fetch v0-3: the stored batches as message set entries (magic 0 for v0-1, 1 for
    v2-3); KIP-74's whole first message only for v3 and only as the response's first data."""
    stored = ((base, bytes(prefix) + bytes(rest)) for base, prefix, rest in batches)
    magic = 0 if version <= 1 else 1
    return down_convert(stored, magic, fetch_offset, limit, first_whole=version >= 3 and not total)


def _leader_endpoints(ctx: HandlerContext, topics: list) -> list:
    """KIP-951 (v16+): the endpoints of the leaders the answer names (current_leader of
    the partitions sent away), so the client skips a Metadata round trip."""
    leaders: list[int] = []
    for _key, parts in topics:
        for p in parts:
            if p.leader_id >= 0 and p.leader_id not in leaders:
                leaders.append(p.leader_id)
    return [ep for ep in map(ctx.endpoint, leaders) if ep is not None]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_long_poll(ctx, call))


async def _long_poll(ctx: HandlerContext, call: Call) -> list:
    def readable(name: str) -> bool:
        return topic_allowed(ctx, call, Operation.READ, name)

    req = call.req
    loop = asyncio.get_running_loop()
    wait_s = min(req.max_wait.total_seconds(), ctx.limits.max_fetch_wait_ms / 1000)
    deadline = loop.time() + max(wait_s, 0.0)
    cap = fetch_bytes_cap(ctx, call)
    while True:
        ev = ctx.partitions.data_event()  # taken before reading: no lost wake-up
        topics, total, any_error = _collect(ctx, req, call.version, cap, readable)
        remaining = deadline - loop.time()
        if total >= max(req.min_bytes, 1) or any_error or remaining <= 0 or ctx.draining:
            endpoints: list = []
            if any_error and call.version >= 16:
                endpoints = _leader_endpoints(ctx, topics)
            throttle, empty = fetch_throttle(ctx, call, total)  # client quotas (muting)
            if empty:  # was over its quota already: nothing, as Kafka answers
                topics, endpoints = [], []
            return encode_fetch(
                call.version, call.corr, topics, node_endpoints=endpoints, throttle_time_ms=throttle
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), remaining)


def error_response(
    version: int, corr: int, req: Any, code: ErrorCode
) -> list[bytes | memoryview] | None:
    """The top-level error (v7+) and every partition of the request with code; None
    where there is neither a request to mirror nor a top-level error code."""
    if req is None:
        return encode_fetch(version, corr, [], error=code) if version >= 7 else None
    topics = [
        (
            _topic_key(ft) if version >= 13 else ft.topic,
            [FetchPartition(fp.partition, code, -1, -1, (), 0) for fp in ft.partitions],
        )
        for ft in req.topics
    ]
    return encode_fetch(version, corr, topics, error=code if version >= 7 else ErrorCode.none)


API = Api(
    FetchRequest,
    (0, 16),
    handle,
    error_response,
    summary=(
        "hand-rolled response; v0-3 down-converted to message sets (magic 0 for v0-1, 1 "
        "for v2-3; headers dropped; v0-2 partition_max_bytes a hard limit); topics by id "
        "from v13 (KIP-516, UNKNOWN_TOPIC_ID); v16 names the partition's leader on "
        "NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (KIP-951); a current_leader_epoch "
        "older than the partition's group term FENCED_LEADER_EPOCH; `session_id` 0 "
        "(sessionless); max_wait/min_bytes honoured; at least one whole batch even above "
        "partition_max_bytes"
    ),
)
