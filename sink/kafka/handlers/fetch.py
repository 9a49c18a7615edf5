"""Fetch (v4-v12, hand-rolled response) and ListOffsets.

Only applied (committed) data is served. A leader serves only after
on_leader_start of its current term (an own-term entry applied), so its high
watermark is at least every earlier leader's; followers serve their applied
data, and above their high watermark send the client to the leader (see
_beyond_high_watermark: OFFSET_OUT_OF_RANGE only where the offset surely does not exist). Fetch
honours max_wait/min_bytes with a wake-up on newly applied
records, declines fetch sessions (session_id 0), returns whole batches from
the one containing fetch_offset, and at least one batch even above
partition_max_bytes (KIP-74).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sink.kafka import errors as E
from sink.kafka.build import encode_response
from sink.kafka.encoders import FetchPartition, encode_fetch
from sink.kafka.handlers.context import HandlerContext
from sink.state import OffsetOutOfRange

FETCH = 1
LIST_OFFSETS = 2


def _serving_error(ctx: HandlerContext) -> int:
    svc = ctx.service
    if svc.is_leader() and not svc.leader_ready():
        return E.NOT_LEADER_OR_FOLLOWER  # new leader, own-term entry not applied yet
    return E.NONE


def _beyond_high_watermark(ctx: HandlerContext, client_epoch: int) -> int:
    """The answer to a Fetch above this node's high watermark (NONE: an empty, waiting answer).

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
    Metadata and retries. Only this answer checks the epoch: serving committed data below the
    high watermark is correct on any replica in any term.
    """
    svc = ctx.service
    if not svc.leader_ready():
        return E.NOT_LEADER_OR_FOLLOWER
    if client_epoch > svc.leader_epoch():
        return E.UNKNOWN_LEADER_EPOCH
    if not svc.applied_all_committed():
        return E.NONE
    return E.OFFSET_OUT_OF_RANGE


def _collect(ctx: HandlerContext, req: Any) -> tuple[list, int, bool]:
    fsm = ctx.fsm
    budget = req.max_bytes if req.max_bytes > 0 else 1 << 30
    total = 0
    any_error = False
    serving = _serving_error(ctx)
    topics = []
    for ft in req.topics:
        name = ft.topic
        parts = []
        for fp in ft.partitions:
            idx = fp.partition
            if not fsm.has_partition(name, idx):
                parts.append(FetchPartition(idx, E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, (), 0))
                any_error = True
                continue
            hw = fsm.high_watermark(name, idx)
            start = fsm.log_start_offset(name, idx)
            if serving != E.NONE:
                parts.append(FetchPartition(idx, serving, -1, -1, (), 0))
                any_error = True
                continue
            if fp.fetch_offset > hw:
                err = _beyond_high_watermark(ctx, getattr(fp, "current_leader_epoch", -1))
                # Only answers about this partition's log carry its offsets; "ask elsewhere"
                # answers carry -1, like the serving errors above.
                known = err in (E.NONE, E.OFFSET_OUT_OF_RANGE)
                parts.append(
                    FetchPartition(idx, err, hw if known else -1, start if known else -1, (), 0)
                )
                any_error = any_error or err != E.NONE
                continue
            pieces: list = []
            size = 0
            if total < budget or total == 0:
                limit = (
                    min(fp.partition_max_bytes, budget - total) if total else fp.partition_max_bytes
                )
                try:
                    batches = fsm.read_parts(name, idx, fp.fetch_offset, max(limit, 1))
                except OffsetOutOfRange:
                    parts.append(FetchPartition(idx, E.OFFSET_OUT_OF_RANGE, hw, start, (), 0))
                    any_error = True
                    continue
                for _base, prefix, rest in batches:
                    pieces.append(prefix)
                    pieces.append(rest)
                    size += len(prefix) + len(rest)
            elif fp.fetch_offset < start:
                parts.append(FetchPartition(idx, E.OFFSET_OUT_OF_RANGE, hw, start, (), 0))
                any_error = True
                continue
            total += size
            parts.append(FetchPartition(idx, E.NONE, hw, start, pieces, size))
        topics.append((name, parts))
    return topics, total, any_error


async def handle_fetch(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> asyncio.Future:
    async def run() -> list:
        loop = asyncio.get_running_loop()
        wait_s = min(req.max_wait.total_seconds(), ctx.limits.max_fetch_wait_ms / 1000)
        deadline = loop.time() + max(wait_s, 0.0)
        while True:
            ev = ctx.fsm.data_event()  # taken before reading: no lost wake-up
            topics, total, any_error = _collect(ctx, req)
            remaining = deadline - loop.time()
            if total >= max(req.min_bytes, 1) or any_error or remaining <= 0:
                return encode_fetch(version, corr, topics)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), remaining)

    return asyncio.get_running_loop().create_task(run())


def fetch_error_response(
    version: int, corr: int, req: Any, code: int
) -> list[bytes | memoryview] | None:
    """The top-level error (v7+) and every partition of the request with code; None
    where there is neither a request to mirror nor a top-level error code."""
    if req is None:
        return encode_fetch(version, corr, [], error=code) if version >= 7 else None
    topics = [
        (ft.topic, [FetchPartition(fp.partition, code, -1, -1, (), 0) for fp in ft.partitions])
        for ft in req.topics
    ]
    return encode_fetch(version, corr, topics, error=code if version >= 7 else 0)


def list_offsets_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
    if req is None:
        return None
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": code,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return encode_response(LIST_OFFSETS, version, corr, {"throttle_time": 0, "topics": topics})


async def handle_list_offsets(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    """-1 latest (high watermark), -2 / -4 earliest, -3 max timestamp (approximated
    by the last offset, timestamp -1). Lookup by a real timestamp is not
    supported: answered with offset -1 (no such record)."""
    svc, fsm = ctx.service, ctx.fsm
    if not svc.is_leader():
        err_all = E.NOT_LEADER_OR_FOLLOWER
    elif not svc.leader_ready():
        err_all = E.LEADER_NOT_AVAILABLE
    else:
        err_all = E.NONE
    epoch = svc.leader_epoch()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry = {
                "partition_index": p.partition_index,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            if err_all != E.NONE:
                entry["error_code"] = err_all
            elif not fsm.has_partition(t.name, p.partition_index):
                entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                hw = fsm.high_watermark(t.name, p.partition_index)
                start = fsm.log_start_offset(t.name, p.partition_index)
                ts = p.timestamp
                if ts == -1:
                    off = hw
                elif ts in (-2, -4):
                    off = start
                elif ts == -3:
                    off = hw - 1 if hw > start else -1
                else:
                    off = -1
                entry.update(error_code=E.NONE, offset=off, leader_epoch=epoch)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return encode_response(LIST_OFFSETS, version, corr, {"throttle_time": 0, "topics": topics})
