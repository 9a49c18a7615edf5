"""InitProducerId: a new PID with epoch 0 for every non-transactional request (KIP-98).

Transactions are not served: a request with a transactional_id is refused at once with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a non-retriable error for every client:
librdkafka's init_transactions() raises it as fatal within milliseconds
(tests/integration/test_group_offsets_failover.py), where a retriable coordinator
error would keep it retrying until its timeout. Until transactions exist, no
transactional id is authorized.

A follower relays the request to the leader (librdkafka keeps asking the same
broker). When no leader can allocate (none known, the relay failed, leadership
lost mid-write) the answer is COORDINATOR_LOAD_IN_PROGRESS, as Kafka's own
producer-id manager answers while it waits for a block: every client retries the
same request. Never NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: an idempotent
producer has no coordinator, and kafka-python 3.0 answers those by looking one up
with a null key (FindCoordinator v4 with coordinator_keys [null], a malformed
request any broker closes the connection on), after which it never produces
(tests/integration/test_idempotent_no_leader.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

log = logging.getLogger("sink.kafka")


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_run(ctx, call))


async def _run(ctx: HandlerContext, call: Call) -> bytes:
    lead = ctx.controller
    ep = lead.forward_endpoint()
    if call.req.transactional_id is not None:
        err, pid, epoch = ErrorCode.transactional_id_authorization_failed, -1, -1
    elif not lead.is_leader() and ep is not None and ep[0] != lead.node_id and call.frame:
        try:
            return await forward_frame(ep[1], ep[2], call.frame, login=ctx.relay_login)
        except ForwardError as exc:
            log.warning("kafka.forward init_producer_id failed: %s", exc)
            err, pid, epoch = ErrorCode.coordinator_load_in_progress, -1, -1
    elif not lead.is_leader():
        err, pid, epoch = ErrorCode.coordinator_load_in_progress, -1, -1
    else:
        err, pid, epoch = await ctx.producer_ids.init_producer_id()
    return _encode(call.version, call.corr, err, pid, epoch)


def _encode(version: int, corr: int, err: ErrorCode, pid: int, epoch: int) -> bytes:
    body = {"throttle_time": 0, "error_code": err, "producer_id": pid, "producer_epoch": epoch}
    return encode_response(InitProducerIdRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(version, corr, code, -1, -1)


API = Api(
    InitProducerIdRequest,
    (0, 4),
    handle,
    error_response,
    summary=(
        "null transactional id only (a transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "
        "at once); a new PID (allocated through the log) with epoch 0; "
        "a follower relays the request to the leader"
    ),
)
