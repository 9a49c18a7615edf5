"""Envelope (KIP-590): a controller request another node relays with its client's
principal, so the controller authorizes every item as that client, not as the relaying
node's relay user.

Without it a relay ran as the relay user (a super user), so a node relayed only what
its client could do in full and answered a partly allowed request itself with
NOT_CONTROLLER; and every node could not name itself the controller, as KRaft's
brokers do (sink.kafka.handlers.metadata: controller_id).

The relaying node (controller_relay) wraps the client's exact frame: request_data, the
client's principal ("User:alice") and its address (4 or 16 bytes). The controller
checks the envelope itself (CLUSTER_ACTION on the cluster: the relay user, a super
user, has it), bounds-checks and parses the inner frame as the listener parses any
(sink.kafka.protocol.framecheck first: no length from the wire reaches kio's reader
unchecked), runs the inner request through the authorization gate and its handler as
the client (HandlerContext.relayed), and answers its response, correlation id and all,
in response_data. Only the relayed APIs are accepted inside (RELAYABLE); anything else,
a nested envelope, a version not served or a frame that does not parse answers
INVALID_REQUEST with no data. Not advertised in ApiVersions (internal, as Kafka's)."""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from typing import Any

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.serial import entity_reader

from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol import parse_request, response_schema
from sink.kafka.protocol.build import encode_request, encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.framecheck import FrameError

ENVELOPE_KEY = int(EnvelopeRequest.__api_key__)

RELAYABLE = frozenset({19, 20, 30, 31, 33, 37, 44, 45, 49, 51, 55})
"""CreateTopics, DeleteTopics, CreateAcls, DeleteAcls, AlterConfigs, CreatePartitions,
IncrementalAlterConfigs, AlterPartitionReassignments, AlterClientQuotas,
AlterUserScramCredentials, DescribeQuorum: what controller_relay relays."""

_HEAD = struct.Struct(">hhi")


class EnvelopeError(Exception):
    """The controller refused the envelope, or its answer does not decode."""


def wrap(call: Call) -> bytes:
    """The envelope frame (no size prefix) carrying call's frame as its principal."""
    host = call.client_host.lstrip("/")
    try:
        address = ipaddress.ip_address(host).packed
    except ValueError:
        address = b""
    values = {
        "request_data": bytes(call.frame),
        "request_principal": call.principal.encode(),
        "client_host_address": address,
    }
    return encode_request(ENVELOPE_KEY, 0, call.corr, "raftsink-relay", values)


def unwrap(reply: bytes) -> bytes:
    """The inner response of an envelope's answer (EnvelopeError if refused)."""
    cls = response_schema(ENVELOPE_KEY, 0)
    try:
        _hdr, n = entity_reader(cls.__header_schema__)(reply, 0)
        resp, _ = entity_reader(cls)(reply, n)
    except Exception as exc:
        raise EnvelopeError(f"envelope answer does not decode: {exc!r}") from exc
    if resp.error_code != ErrorCode.none or resp.response_data is None:
        raise EnvelopeError(f"envelope refused: {resp.error_code.name}")
    return bytes(resp.response_data)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_open(ctx, call))


async def _open(ctx: HandlerContext, call: Call) -> bytes:
    inner = _inner_call(ctx, call.req)
    if inner is None or ctx.relayed is None:
        return _encode(call.version, call.corr, ErrorCode.invalid_request, None)
    api_key, inner_call = inner
    answer = await ctx.relayed(api_key, inner_call)
    if answer is None:
        return _encode(call.version, call.corr, ErrorCode.invalid_request, None)
    data = answer if isinstance(answer, bytes) else b"".join(bytes(p) for p in answer)
    return _encode(call.version, call.corr, ErrorCode.none, data)


def _inner_call(ctx: HandlerContext, env: Any) -> tuple[int, Call] | None:
    frame = bytes(env.request_data)
    if len(frame) < _HEAD.size:
        return None
    api_key, version, corr = _HEAD.unpack_from(frame, 0)
    served = ctx.supported.get(api_key)
    if api_key not in RELAYABLE or served is None or not served[0] <= version <= served[1]:
        return None
    try:
        _hdr, req = parse_request(frame, api_key, version)
    except FrameError:  # out of bounds, a null, or kio's own refusal
        return None
    principal = env.request_principal.decode("utf-8", "replace") if env.request_principal else ""
    if ":" not in principal:
        return None
    try:
        host = "/" + str(ipaddress.ip_address(bytes(env.client_host_address)))
    except ValueError:
        host = ""
    return api_key, Call(version, corr, req, frame, None, len(frame), host, None, principal)


def _encode(version: int, corr: int, code: ErrorCode, data: bytes | None) -> bytes:
    body = {"response_data": data, "error_code": code}
    return encode_response(ENVELOPE_KEY, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, None)


API = Api(
    EnvelopeRequest,
    (0, 0),
    handle,
    error_response,
    internal=True,
    summary=(
        "internal (not advertised): a relayed controller request with its client's "
        "principal, authorized and run as that client (CLUSTER_ACTION on the cluster)"
    ),
)
