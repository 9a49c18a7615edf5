"""A small Kafka admin client over the project's own protocol code (kio schemas,
sink.kafka.protocol.build): what `raftsink quotas` speaks to a cluster.

One request per short-lived connection. Writes go to the controller, found with
Metadata's controller_id (the Raft leader); a NOT_CONTROLLER answer (leadership
moved meanwhile) makes it look the controller up again, a few times.
"""

from __future__ import annotations

import asyncio
import contextvars
import struct
from collections.abc import Sequence
from typing import Any

from kio.index import load_response_schema
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial import entity_reader

from sink.kafka.protocol.build import encode_request
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.sasl_login import LoginError, sasl_login

_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 64 << 20

ADMIN_CONNECTION: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar(
    "raftsink_admin_connection", default=(None, None)
)
"""(ssl.SSLContext or None, Login or None) of the running admin command
(sink.cli_connect sets it): every request() uses them unless given its own login."""


class AdminError(Exception):
    """The cluster could not be reached, or answered with an error."""


def _encode_request(api_key: int, version: int, corr: int, client_id: str, values: dict) -> bytes:
    body = encode_request(api_key, version, corr, client_id, values)
    return _SIZE.pack(len(body)) + body


async def request(
    address: tuple[str, int],
    api_key: int,
    version: int,
    values: dict,
    *,
    client_id: str = "raftsink-admin",
    timeout: float = 10.0,
    login: Any = None,
) -> Any:
    """Send one request to host:port; its response entity (AdminError if unreachable
    or the login is refused). login (sink.security.sasl_client.Login): SASL first."""
    host, port = address
    frame = _encode_request(api_key, version, 1, client_id, values)
    tls, default_login = ADMIN_CONNECTION.get()
    login = login if login is not None else default_login
    try:
        async with asyncio.timeout(timeout):
            if tls is not None:
                reader, writer = await asyncio.open_connection(host, port, ssl=tls)
            else:
                reader, writer = await asyncio.open_connection(host, port)
            try:
                if login is not None:
                    await sasl_login(reader, writer, login)
                writer.write(frame)
                await writer.drain()
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 0 < size <= _MAX_RESPONSE:
                    raise AdminError(f"bad response size {size} from {host}:{port}")
                data = await reader.readexactly(size)
            finally:
                writer.close()
    except LoginError as exc:
        raise AdminError(f"{host}:{port}: SASL login refused: {exc}") from exc
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        raise AdminError(f"{host}:{port}: {exc!r}") from exc
    cls = load_response_schema(api_key, version)
    _hdr, n = entity_reader(cls.__header_schema__)(data, 0)
    resp, _ = entity_reader(cls)(data, n)
    return resp


async def find_controller(
    bootstrap: Sequence[tuple[str, int]], login: Any = None
) -> tuple[str, int]:
    """The controller's Kafka address, asking each bootstrap address in turn."""
    errors = []
    for addr in bootstrap:
        try:
            md = await request(
                addr,
                MetadataRequest.__api_key__,
                12,
                {
                    "topics": [],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
                login=login,
            )
        except AdminError as exc:
            errors.append(str(exc))
            continue
        for b in md.brokers:
            if b.node_id == md.controller_id:
                return b.host, b.port
        errors.append(f"{addr[0]}:{addr[1]}: no controller known (election in progress?)")
    raise AdminError("no controller found: " + "; ".join(errors))


async def describe_client_quotas(
    bootstrap: Sequence[tuple[str, int]],
    components: Sequence[tuple[str, int, str | None]],
    strict: bool = False,
) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    """[(entity pairs, {key: value})] as the controller has them applied."""
    addr = await find_controller(bootstrap)
    resp = await request(
        addr,
        DescribeClientQuotasRequest.__api_key__,
        1,
        {
            "components": [
                {"entity_type": t, "match_type": m, "match": name} for t, m, name in components
            ],
            "strict": strict,
        },
    )
    if resp.error_code != ErrorCode.none:
        raise AdminError(f"{resp.error_code.name}: {resp.error_message}")
    return [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in resp.entries or ()
    ]


async def alter_client_quotas(
    bootstrap: Sequence[tuple[str, int]],
    entries: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[tuple[str, float, bool]]]],
    validate_only: bool = False,
    attempts: int = 5,
) -> list[tuple[ErrorCode, str | None]]:
    """Apply (entity pairs, [(key, value, remove)]) entries through the controller;
    each entry's (error code, message)."""
    values = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops],
            }
            for entity, ops in entries
        ],
        "validate_only": validate_only,
    }
    for attempt in range(attempts):
        addr = await find_controller(bootstrap)
        resp = await request(addr, AlterClientQuotasRequest.__api_key__, 1, values)
        out = [(e.error_code, e.error_message) for e in resp.entries]
        if all(code != ErrorCode.not_controller for code, _ in out) or attempt == attempts - 1:
            return out
        await asyncio.sleep(0.2 * (attempt + 1))  # leadership moved: look it up again
    raise AssertionError("unreachable")
