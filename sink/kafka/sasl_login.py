"""Log in on a fresh connection to a listener that requires SASL: SaslHandshake v1,
then SaslAuthenticate v1 until the exchange is done (sink.security.sasl_client).
What `raftsink users` / `quotas` (sink.kafka.admin) and a follower's relay to the
leader (sink.kafka.forward) send before their request."""

from __future__ import annotations

import asyncio
import struct

from kio.index import load_response_schema
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader

from sink.kafka.protocol.build import encode_request
from sink.kafka.protocol.errors import ErrorCode
from sink.security.sasl_client import Login, LoginExchange
from sink.security.scram import ScramError

_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 1 << 20


class LoginError(Exception):
    """The server refused the login (its error and message), or answered badly."""


def _frame(api_key: int, version: int, corr: int, values: dict) -> bytes:
    body = encode_request(api_key, version, corr, "raftsink-login", values)
    return _SIZE.pack(len(body)) + body


async def _ask(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    corr: int,
    values: dict,
):
    writer.write(_frame(api_key, 1, corr, values))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if not 0 < size <= _MAX_RESPONSE:
        raise LoginError(f"bad response size {size}")
    data = await reader.readexactly(size)
    cls = load_response_schema(api_key, 1)
    _hdr, n = entity_reader(cls.__header_schema__)(data, 0)
    return entity_reader(cls)(data, n)[0]


async def sasl_login(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, login: Login
) -> int:
    """Authenticate the connection; the session lifetime in ms (0: none). Raises
    LoginError (refused), or the stream's errors (connection closed)."""
    hs = await _ask(
        reader, writer, SaslHandshakeRequest.__api_key__, 0x5A51, {"mechanism": login.mechanism}
    )
    if hs.error_code != ErrorCode.none:
        raise LoginError(
            f"{hs.error_code.name.upper()}: {login.mechanism} not enabled "
            f"(enabled: {', '.join(hs.mechanisms) or 'none'})"
        )
    exchange = LoginExchange(login)
    challenge: bytes | None = None
    lifetime = 0
    corr = 0x5A52
    try:
        while (token := exchange.step(challenge)) is not None:
            resp = await _ask(
                reader, writer, SaslAuthenticateRequest.__api_key__, corr, {"auth_bytes": token}
            )
            corr += 1
            if resp.error_code != ErrorCode.none:
                raise LoginError(f"{resp.error_code.name.upper()}: {resp.error_message}")
            challenge = bytes(resp.auth_bytes)
            lifetime = int(resp.session_lifetime.total_seconds() * 1000)
    except ScramError as exc:
        raise LoginError(f"the server's SCRAM answer does not verify: {exc}") from exc
    return lifetime
