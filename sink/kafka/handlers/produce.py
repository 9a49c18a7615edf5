"""Produce (v3-v10, hand-rolled response) and InitProducerId.

Dispatch (this coroutine) validates every partition's batches and proposes
them before returning, so a connection's batches reach the Raft log in request
order; the returned future resolves to the response once every proposal is
committed and applied. acks=0 returns None: no response at all.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sink.kafka import errors as E
from sink.kafka.build import encode_response
from sink.kafka.encoders import ProducePartition, encode_produce
from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.context import HandlerContext
from sink.kafka.records import BatchError, parse_batches
from sink.state import ProduceResult

log = logging.getLogger("sink.kafka")

PRODUCE = 0
INIT_PRODUCER_ID = 22


def _err(code: int) -> ProduceResult:
    return ProduceResult(code, -1, -1)


async def handle_produce(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> asyncio.Future | None:
    svc, fsm = ctx.service, ctx.fsm
    acks = req.acks
    pending: list[tuple[str, list[tuple[int, asyncio.Future | ProduceResult]]]] = []
    for td in req.topic_data:
        name = td.name
        parts: list[tuple[int, asyncio.Future | ProduceResult]] = []
        pending.append((name, parts))
        topic_err = E.NONE
        if acks not in (0, 1, -1):
            topic_err = E.INVALID_REQUIRED_ACKS
        elif req.transactional_id is not None:
            topic_err = E.INVALID_REQUEST  # transactions are not supported
        elif fsm.topic(name) is None:
            if svc.is_leader():
                topic_err, _ = await svc.ensure_topic(name)
                if topic_err == E.LEADER_NOT_AVAILABLE:
                    topic_err = E.NOT_LEADER_OR_FOLLOWER
            else:
                topic_err = E.NOT_LEADER_OR_FOLLOWER
        for pd in td.partition_data:
            if topic_err != E.NONE:
                parts.append((pd.index, _err(topic_err)))
                continue
            records = pd.records
            if records is None:
                parts.append((pd.index, _err(E.INVALID_RECORD)))
                continue
            try:
                batches = parse_batches(records)
            except BatchError as exc:
                parts.append((pd.index, _err(exc.error_code)))
                continue
            parts.append((pd.index, svc.produce(name, pd.index, records, batches)))
    if acks == 0:
        return None
    return _response_when_done(ctx, version, corr, pending)


def _response_when_done(
    ctx: HandlerContext,
    version: int,
    corr: int,
    pending: list[tuple[str, list[tuple[int, asyncio.Future | ProduceResult]]]],
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
            out.set_result(_encode_response(ctx, version, corr, pending))
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
    ctx: HandlerContext,
    version: int,
    corr: int,
    pending: list[tuple[str, list[tuple[int, asyncio.Future | ProduceResult]]]],
) -> bytes:
    svc = ctx.service
    topics = []
    not_leader = False
    for name, parts in pending:
        out = []
        for index, r in parts:
            res = r.result() if isinstance(r, asyncio.Future) else r
            lead, epoch = -1, -1
            if res.error == E.NOT_LEADER_OR_FOLLOWER:
                not_leader = True
                lead, epoch = ctx.leader_id(), svc.leader_epoch()
                if lead < 0:
                    epoch = -1
            out.append(
                ProducePartition(
                    index, res.error, res.base_offset, res.log_start_offset, lead, epoch
                )
            )
        topics.append((name, out))
    endpoints = []
    if not_leader and version >= 10:
        ep = ctx.leader_endpoint()
        if ep is not None:
            endpoints.append(ep)
    return encode_produce(version, corr, topics, endpoints)


def produce_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
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


def init_producer_id_error_response(version: int, corr: int, req: Any, code: int) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
    return encode_response(INIT_PRODUCER_ID, version, corr, body)


async def handle_init_producer_id(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> asyncio.Future:
    """A new PID with epoch 0 for every non-transactional request (KIP-98).
    A follower relays the request to the leader (librdkafka keeps asking the
    same broker), answering NOT_COORDINATOR only if that fails."""

    async def run() -> bytes:
        svc = ctx.service
        ep = svc.forward_endpoint()
        if req.transactional_id is not None:
            err, pid, epoch = E.INVALID_REQUEST, -1, -1
        elif not svc.is_leader() and ep is not None and ep[0] != svc.node_id and frame:
            try:
                return await forward_frame(ep[1], ep[2], frame)
            except ForwardError as exc:
                log.warning("kafka.forward init_producer_id failed: %s", exc)
                err, pid, epoch = E.NOT_COORDINATOR, -1, -1
        elif not svc.is_leader():
            err, pid, epoch = E.NOT_COORDINATOR, -1, -1
        else:
            err, pid, epoch = await ctx.service.init_producer_id()
        body = {"throttle_time": 0, "error_code": err, "producer_id": pid, "producer_epoch": epoch}
        return encode_response(INIT_PRODUCER_ID, version, corr, body)

    return asyncio.get_running_loop().create_task(run())
