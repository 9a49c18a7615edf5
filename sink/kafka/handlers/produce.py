"""Produce (v0-v10, hand-rolled response).

v0-2 carry a MessageSet v0/v1 (magic 0/1) instead of RecordBatch v2: it is converted
at ingest into one RecordBatch v2 per partition (sink.kafka.protocol.messageset), so
storage and everything downstream see only v2; a damaged set (bad CRC-32, truncation)
is CORRUPT_MESSAGE for that partition.

Dispatch (handle's await) validates every partition's batches and proposes them
before returning, so a connection's batches reach the Raft log in request order;
the returned future resolves to the response once every proposal is committed
and applied. acks=0: the future resolves to None (no response at all).

Routing: each partition goes to the Raft group that owns it (PartitionRoles.role).
A partition this node does not lead (it follows, or hosts no replica of the group)
is NOT_LEADER_OR_FOLLOWER, with that partition's leader and epoch in
`current_leader` and the leader's endpoint in `node_endpoints` (v10, KIP-951); the
others are proposed into their groups. One response once every partition is done.
Validation (CORRUPT_MESSAGE, ...) answers first, as before the check.

Authorization: a topic the principal may not WRITE is TOPIC_AUTHORIZATION_FAILED on
each of its partitions and nothing of it is proposed; an unknown topic is
auto-created only with CREATE (else UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.produce.v9.request import ProduceRequest

from sink.kafka.authorize import may_create_topic, topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.quota_throttle import produce_throttle_ms
from sink.kafka.handlers.services import HandlerContext, ProduceOutcome
from sink.kafka.protocol.encoders import ProducePartition, encode_produce
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.messageset import decode_message_set, to_batch_v2
from sink.kafka.protocol.record_check import check_records
from sink.kafka.protocol.records import ZSTD, ZSTD_MIN_PRODUCE, BatchError, parse_batches
from sink.security.acl import Operation

RECORD_BATCH_MIN_PRODUCE = 3  # below: a MessageSet v0/v1, converted at ingest

# Per partition: a final outcome now, or a future of one (a proposal).
_Pending = list[tuple[str, list[tuple[int, "asyncio.Future | ErrorCode"]]]]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    acks = req.acks
    throttle = produce_throttle_ms(ctx, call)  # client quotas: mutes the connection if over
    pending: _Pending = []
    for td in req.topic_data:
        name = td.name
        parts: list[tuple[int, asyncio.Future | ErrorCode]] = []
        pending.append((name, parts))
        topic_err = ErrorCode.none
        if acks not in (0, 1, -1):
            topic_err = ErrorCode.invalid_required_acks
        elif getattr(req, "transactional_id", None) is not None:  # v3+ only
            topic_err = ErrorCode.invalid_request  # transactions are not supported
        elif not topic_allowed(ctx, call, Operation.WRITE, name):
            topic_err = ErrorCode.topic_authorization_failed  # nothing is proposed
        elif ctx.partitions.topic(name) is None:
            # Kafka answers an unknown topic UNKNOWN_TOPIC_OR_PARTITION on every broker; only
            # where auto-creation would create it may another node (the controller) help.
            if not may_create_topic(ctx, call, name) or not ctx.partitions.auto_create_topics:
                topic_err = ErrorCode.unknown_topic_or_partition
            elif ctx.controller.is_leader():  # creating a topic is the controller's
                topic_err, _ = await ctx.producing.ensure_topic(name)
                if topic_err == ErrorCode.leader_not_available:
                    topic_err = ErrorCode.not_leader_or_follower
            else:
                topic_err = ErrorCode.not_leader_or_follower
        for pd in td.partition_data:
            if topic_err != ErrorCode.none:
                parts.append((pd.index, topic_err))
                continue
            if not ctx.partitions.has_partition(name, pd.index):
                # Before any leadership question: no node leads a partition that does not
                # exist (with partition groups it has no group), and Kafka's brokers all
                # answer UNKNOWN_TOPIC_OR_PARTITION for it.
                parts.append((pd.index, ErrorCode.unknown_topic_or_partition))
                continue
            records = pd.records
            if records is None:
                parts.append((pd.index, ErrorCode.invalid_record))
                continue
            try:
                if call.version < RECORD_BATCH_MIN_PRODUCE:
                    records = to_batch_v2(decode_message_set(records), int(time.time() * 1000))
                batches = parse_batches(records)
                check_records(records, batches)
            except BatchError as exc:
                parts.append((pd.index, exc.error_code))
                continue
            if call.version < ZSTD_MIN_PRODUCE and any(b.compression == ZSTD for b in batches):
                # KIP-110: zstd needs Produce v7; Kafka refuses it from older clients.
                parts.append((pd.index, ErrorCode.unsupported_compression_type))
                continue
            if not ctx.role(name, pd.index).leads:  # proposing needs the partition's leader
                parts.append((pd.index, ErrorCode.not_leader_or_follower))
                continue
            parts.append((pd.index, ctx.producing.produce(name, pd.index, records, batches)))
    if acks == 0:
        return answered(None)
    return _response_when_done(ctx, call, pending, throttle)


def _response_when_done(
    ctx: HandlerContext, call: Call, pending: _Pending, throttle: int = 0
) -> asyncio.Future:
    """A future of the response bytes, set by done-callbacks of the partition
    futures: no task per request on the produce hot path."""
    out = asyncio.get_running_loop().create_future()
    waiting = [r for _, parts in pending for _, r in parts if isinstance(r, asyncio.Future)]
    remaining = len(waiting)

    def finish() -> None:
        if out.done():
            return
        try:
            out.set_result(_encode_response(ctx, call, pending, throttle))
        except (Exception, asyncio.CancelledError) as exc:  # fail this response only
            out.set_exception(exc)

    def one_done(_f: asyncio.Future) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            finish()

    if not waiting:
        finish()
    for f in waiting:
        f.add_done_callback(one_done)
    return out


def _encode_response(
    ctx: HandlerContext, call: Call, pending: _Pending, throttle: int = 0
) -> bytes:
    topics = []
    leaders: list[int] = []  # of partitions sent away, in order of first mention
    for name, parts in pending:
        out = []
        for index, r in parts:
            if isinstance(r, asyncio.Future):
                res: ProduceOutcome = r.result()
                error, base, start = res.error, res.base_offset, res.log_start_offset
            else:
                error, base, start = r, -1, -1
            lead, epoch = -1, -1
            if error == ErrorCode.not_leader_or_follower:
                # The partition's leader as known now (KIP-951 current_leader).
                role = ctx.role(name, index)
                lead = ctx.broker(role.leader)
                if lead >= 0:
                    epoch = role.leader_epoch
                    if lead not in leaders:
                        leaders.append(lead)
            out.append(ProducePartition(index, error, base, start, lead, epoch))
        topics.append((name, out))
    endpoints = []
    if call.version >= 10:  # KIP-951: where the leaders are, no Metadata trip
        endpoints = [ep for ep in map(ctx.endpoint, leaders) if ep is not None]
    return encode_produce(call.version, call.corr, topics, endpoints, throttle)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    """Every partition of the request answered with code (None: no answer, for
    acks=0, or when there is no request to mirror: an empty answer would read as
    success)."""
    if req is None or req.acks == 0:
        return None
    topics = [
        (td.name, [ProducePartition(pd.index, code, -1, -1) for pd in td.partition_data])
        for td in req.topic_data
    ]
    return encode_produce(version, corr, topics)


API = Api(
    ProduceRequest,
    (0, 10),
    handle,
    error_response,
    priced=True,
    summary=(
        "v0-2 MessageSet v0/v1 converted to one RecordBatch v2 per partition at ingest "
        "(CRC-32 checked, gzip/snappy/lz4 wrappers unpacked, timestamps kept); "
        "hand-rolled response (byte-identical to kio for every version); v10 fills "
        "`current_leader` + `node_endpoints` on "
        "NOT_LEADER_OR_FOLLOWER (KIP-951)"
    ),
)
