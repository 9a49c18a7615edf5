"""Forward a raw request frame to the Raft leader's Kafka listener.

Followers cannot propose (raftlog has no proposal forwarding), but some
requests must reach the log wherever the client sent them: librdkafka sends
InitProducerId to any broker and keeps retrying the same one on
NOT_COORDINATOR, and Metadata with auto-creation may hit a follower. The
follower relays the exact frame (same correlation id) over a short-lived
connection and returns the leader's response as is. A relayed request carries
no marker, so a transient disagreement about the leader could bounce it back
once; the timeout bounds that. Where the leader's listener requires SASL, the
relay first logs in as the node's relay user (sasl.relay_user): the relayed
request then runs as that user, not as the client (an Envelope carrying the
client's principal, as Kafka forwards, is not built yet).

TLS: when the node's Kafka listeners speak TLS, so does the leader's, and the
relay connects with the node's client context. That context travels in
FORWARD_TLS, a context variable the listener sets in each connection's context
(handlers call forward_frame(host, port, frame) and need not know about TLS;
in-process test clusters keep one context per listener, not per process).
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import struct
from collections.abc import Callable
from typing import Any

from sink.kafka.sasl_login import LoginError, sasl_login

_SIZE = struct.Struct(">i")


FORWARD_TLS: contextvars.ContextVar[Callable[[], ssl.SSLContext] | None] = contextvars.ContextVar(
    "raftsink_forward_tls", default=None
)
"""Set per connection by the Kafka listener: () -> the current client SSLContext to
reach the leader's listener, or None (plaintext)."""


class ForwardError(Exception):
    """The leader could not be reached or answered badly."""


class ForwardUnreachable(ForwardError):
    """The leader could not be reached: the frame was never sent (no connection, a
    failed TLS handshake or login), so sending it again cannot apply it twice."""


async def forward_frame(
    host: str,
    port: int,
    frame: bytes,
    *,
    timeout: float = 5.0,
    max_response_bytes: int = 64 << 20,
    login: Any = None,
) -> bytes:
    """Send frame (without size prefix) and return the response body (without size).
    login (sink.security.sasl_client.Login): authenticate the connection first.
    Bounded by asyncio.wait_for, not asyncio.timeout: a dispatch step may run this
    before its first suspension, where there is no current task (sink.kafka.stepping)."""
    try:
        return await asyncio.wait_for(
            _exchange(host, port, frame, max_response_bytes, login), timeout
        )
    except ForwardUnreachable:
        raise
    except (OSError, TimeoutError, asyncio.IncompleteReadError, LoginError) as exc:
        raise ForwardError(f"forward to {host}:{port} failed: {exc!r}") from exc


async def _exchange(
    host: str, port: int, frame: bytes, max_response_bytes: int, login: Any
) -> bytes:
    tls = FORWARD_TLS.get()
    try:
        if tls is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(host, port, ssl=tls())
    except OSError as exc:  # ssl.SSLError is an OSError
        raise ForwardUnreachable(f"forward to {host}:{port} failed: {exc!r}") from exc
    try:
        if login is not None:
            try:
                await sasl_login(reader, writer, login)
            except (OSError, asyncio.IncompleteReadError, LoginError) as exc:
                raise ForwardUnreachable(f"forward to {host}:{port} failed: {exc!r}") from exc
        writer.write(_SIZE.pack(len(frame)) + frame)
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 0 < size <= max_response_bytes:
            raise ForwardError(f"bad response size {size} from the leader")
        return await reader.readexactly(size)
    finally:
        writer.close()
