"""The shape every API handler module has, and what the registry keys it by.

A handler module defines one `API = Api(...)`:

- request: any version of the API's kio request class; its __api_key__ is the
  registry key (no literal API numbers anywhere);
- versions: the (min, max) served, which ApiVersions advertises;
- handle(ctx, call): a coroutine. Awaiting it is the dispatch step (the connection
  reads no further request meanwhile, which keeps Produce's proposals in request
  order); it returns ONE kind of result, a future of the response (a done one
  for answers known at once; it resolves to None where no response is sent, as
  for acks=0);
- error_response(version, corr, req, code): the version's response answering
  every part of req (None: a request that could not be read) with code, mirroring
  topics/partitions where the response has them; None where no answer can be
  formed (acks=0; nothing to mirror and no top-level error code);
- priced: the request's frame bytes count against the produce back-pressure
  budget until its response is written;
- summary: one line for the table of APIs in docs/kafka.md (generated, tested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, NamedTuple

from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import QuotaChannel

Response = bytes | list[bytes | memoryview] | None
"""Response frame without the size prefix (parts for zero-copy Fetch), or None: no answer."""


class Call(NamedTuple):
    """One parsed request as its handler sees it."""

    version: int
    corr: int
    req: Any
    frame: bytes
    """The request frame as received (for relaying it to the leader)."""
    quota: QuotaChannel | None = None
    """The connection as client quotas see it (client id, mute deadline); None: unmetered."""
    size: int = 0
    """Bytes of the request frame as received (kept where `frame` is dropped: a priced
    Produce is served from its parsed records); 0: len(frame)."""
    client_host: str = ""
    """The client's address as Kafka reports it ("/127.0.0.1"; DescribeGroups); "": unknown."""
    sasl: Any = None
    """The connection's SASL state (sink.security.SaslSession: the principal, the
    handshake); None: the listener requires no SASL."""
    principal: str = "User:ANONYMOUS"
    """Who the request runs as (sink.security.principal): what ACLs are checked against."""


Handle = Callable[[HandlerContext, Call], Awaitable["asyncio.Future[Response]"]]
ErrorResponse = Callable[[int, int, Any, ErrorCode], Response]


@dataclass(frozen=True, slots=True)
class Api:
    request: type
    versions: tuple[int, int]
    handle: Handle
    error_response: ErrorResponse
    priced: bool = False
    summary: str = ""
    internal: bool = False
    """Served but not advertised in ApiVersions (Envelope: only nodes send it)."""

    @property
    def key(self) -> int:
        return int(self.request.__api_key__)

    @property
    def name(self) -> str:
        return self.request.__name__.removesuffix("Request")


def answered(response: Response) -> asyncio.Future[Response]:
    """A done future of a response known at once."""
    fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
    fut.set_result(response)
    return fut


ANSWER_MARGIN_S = 0.5
"""An admin request bounded by its own timeout answers this long before it (the wire,
a loaded loop): the client waits by the same timeout and drops a later answer."""


def timeout_seconds(timeout: Any) -> float:
    """A request's timeout field in seconds (kio gives a timedelta, older schemas ms)."""
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout / 1000


def answer_by(timeout: Any) -> float:
    """The loop time an admin request with this timeout field (a timedelta, or ms)
    must be answered by: its timeout less ANSWER_MARGIN_S from now."""
    s = timeout_seconds(timeout)
    return asyncio.get_running_loop().time() + max(0.0, s - ANSWER_MARGIN_S)


def later(coro: Coroutine[Any, Any, Response]) -> asyncio.Future[Response]:
    """A future of a response that waits (a long poll, a commit, a relay)."""
    return asyncio.get_running_loop().create_task(coro)
