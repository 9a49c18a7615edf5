"""JoinGroup (classic group protocol): v0-9, answered by the group coordinator once
the rebalance's join phase completes (the response may take up to the rebalance
timeout). v0 has no rebalance timeout: the session timeout stands in (as Kafka; a
"none" made brod's rebalances loop on Redpanda). v4+ use the two-step join
(MEMBER_ID_REQUIRED); v5+ carry group.instance.id (static membership)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.join_group.v9.request import JoinGroupRequest

from sink.groups.messages import JoinRequest, JoinResponse
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


def _ms(v: Any) -> int:
    if isinstance(v, datetime.timedelta):
        return int(v.total_seconds() * 1000)
    return int(v)


def request_of(call: Call) -> JoinRequest:
    req, version = call.req, call.version
    session = _ms(req.session_timeout)
    rebalance = _ms(req.rebalance_timeout) if version >= 1 else session
    return JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        instance_id=getattr(req, "group_instance_id", None),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        client_id=call.quota.client_id if call.quota is not None else "",
        client_host=call.client_host,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    if ctx.groups is None:
        return answered(error_response(call.version, call.corr, call.req, _NO_COORDINATOR))
    groups = ctx.groups
    jreq = request_of(call)

    async def answer() -> Response:
        return encode(call.version, call.corr, await groups.join(jreq))

    return later(answer())


_NO_COORDINATOR = ErrorCode.coordinator_not_available


def encode(version: int, corr: int, r: JoinResponse) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        # v0-6 have a non-null protocol name: "" until one is chosen
        "protocol_name": r.protocol_name if version >= 7 else (r.protocol_name or ""),
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata}
            for m in r.members
        ],
    }
    return encode_response(JoinGroupRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    member = req.member_id if req is not None else ""
    return encode(version, corr, JoinResponse(code, member_id=member))


API = Api(
    JoinGroupRequest,
    (0, 9),
    handle,
    error_response,
    summary=(
        "classic groups (sink/groups): answered when the join phase completes; v4+ two-step "
        "join (MEMBER_ID_REQUIRED); v5+ static members; v0 rebalance timeout = session timeout"
    ),
)
