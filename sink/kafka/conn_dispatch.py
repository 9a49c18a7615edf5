"""A Kafka connection's dispatch of requests to their handlers, and its error answers
(a part of sink.kafka.connection.Connection).

A Request (from the state machine, via sink.kafka.conn_input's _pump) becomes a
Call carrying the connection's principal (the SASL user, the client certificate's,
else ANONYMOUS; sink.security.principal) and its quota channel; sink.kafka.authorize
refuses what the ACLs do not allow before the handler runs (or the handler refuses
single items). The handler's dispatch step runs inline (sink.kafka.stepping); only a
step that suspends is finished by a task (self._task), and the connection is blocked
("step": nothing more is dispatched nor read) until it has: that keeps Produce
proposals in request order. What the step returns (a future of the response) goes
into the response queue (sink.kafka.conn_responses).

Invariants:
- Errors never cost the connection: a handler that raises, or whose future fails,
  answers that request with UNKNOWN_SERVER_ERROR in its version's shape (its Api's
  error_response), logged with who asked and counted (KafkaServer.handler_errors).
  Only when no answer can be formed (error_response raised, or gave none to a
  request that expects one) is the connection closed (NO_ANSWER).
- A request's reservations (its frame's request memory, a Fetch's grant) go into
  the queue with its outcome, answered or refused, so writing it releases them; a
  request that closes the connection instead leaves them to _teardown's
  _release_all.
- SASL: after a failed authentication the answer is queued, then the connection
  closes (it is flushed first), as Kafka does. Raw v0 tokens (SaslToken) are
  answered here with the raw challenge; their failure closes at once.
- Client quotas: request_percentage counts the dispatch step's time, from its
  start until it ended (a suspended step's wait included).

The part holds no state of its own: every field is Connection's, set in
connection_made.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from kio.schema.fetch.v16.request import FetchRequest

from sink.kafka.authorize import gate
from sink.kafka.conn_input import ProtocolError
from sink.kafka.conn_responses import NO_ANSWER, consume_result
from sink.kafka.handlers import REGISTRY, Api, Call
from sink.kafka.protocol.connection import CloseReason, Request, SaslToken, api_name
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.stepping import Suspended, first_step, resume
from sink.security.principal import connection_principal

log = logging.getLogger("sink.kafka")

_FETCH_KEY = int(FetchRequest.__api_key__)


class Dispatcher:
    """The dispatch part of Connection (no state of its own)."""

    def _dispatch(self, ev: Request) -> None:
        api = REGISTRY[ev.api_key]
        req, grant = ev.req, -1
        if ev.api_key == _FETCH_KEY:
            req, grant = self._fetch_grant(req)
        self.quota.client_id = self.state.client_id or ""
        # A priced (Produce) request is served from its parsed records: its frame is
        # dropped here, so what it holds until answered is about its reservation.
        call = Call(
            ev.version,
            ev.corr,
            req,
            b"" if api.priced else ev.frame,
            self.quota,
            len(ev.frame),
            self._client_host,
            self.sasl,
            connection_principal(self.sasl, self.tls_principal),
        )
        denied = gate(self.server.context, ev.api_key, call)
        if denied is not None:  # refused whole, in the API's own shape (sink.kafka.authorize)
            self._push(
                api.error_response(ev.version, ev.corr, req, denied), 0, None, ev.reserved, grant
            )
            return
        cost = len(ev.frame) if api.priced else 0
        started = time.perf_counter()
        step = first_step(self._ctx, api.handle(self.server.context, call))
        if not isinstance(step, Suspended):
            self._dispatched(api, call, ev.reserved, cost, grant, started, step.result, step.error)
            return
        # The step waits (a topic to create, a relay, a credential): a task finishes
        # it; nothing more of this connection is dispatched (nor read) until then.
        self._block("step")
        task = self._loop.create_task(resume(step), context=self._ctx)
        self._task = task
        task.add_done_callback(
            functools.partial(self._step_done, api, call, ev.reserved, cost, grant, started)
        )

    def _step_done(
        self,
        api: Api,
        call: Call,
        reserved: int,
        cost: int,
        grant: int,
        started: float,
        task: asyncio.Task,
    ) -> None:
        self._task = None
        if task.cancelled():
            return  # the connection was aborted
        exc = task.exception()
        if self._over:
            if exc is None:
                consume_result(task.result())
            return
        result = task.result() if exc is None else None
        err = exc if isinstance(exc, Exception) or exc is None else RuntimeError(repr(exc))
        try:
            self._dispatched(api, call, reserved, cost, grant, started, result, err)
        except ProtocolError as pe:
            self._protocol_error(pe)
            self._flush()
            return
        self._unblock("step")

    def _dispatched(
        self,
        api: Api,
        call: Call,
        reserved: int,
        cost: int,
        grant: int,
        started: float,
        result: Any,
        exc: Exception | None,
    ) -> None:
        """The dispatch step ended: queue its future (or its error's answer)."""
        if exc is not None:  # a bug: answer this request, keep the connection
            answer = self._error_answer(api, call, exc)
            if answer is NO_ANSWER:
                raise ProtocolError(
                    self.state.close(CloseReason.NO_ERROR_ANSWER, f"{api.name} v{call.version}")
                )
            self._push(answer, 0, None, reserved, grant)
            return
        # client quotas: request_percentage counts the dispatch step's time
        self.server.context.quotas.record_request_time(self.quota, time.perf_counter() - started)
        self._push(result, cost, (api, call, started), reserved, grant)
        self._after_sasl()

    def _raw_token(self, ev: SaslToken) -> None:
        """A v0 raw SASL token: answer the raw challenge; a failure closes at once
        (no error can be framed without SaslAuthenticate, as in Kafka)."""
        assert self.sasl is not None
        step = self.sasl.authenticate(bytes(ev.token), 0)
        if self.sasl.failed:
            raise ProtocolError(
                self.state.close(CloseReason.AUTHENTICATION, step.message or "failed")
            )
        self._push(step.challenge, 0, None, ev.reserved)

    def _after_sasl(self) -> None:
        """A SASL request failed the session: its answer is queued; close after it."""
        if self.sasl is not None and self.sasl.failed:
            raise ProtocolError(
                self.state.close(
                    CloseReason.AUTHENTICATION,
                    f"{self.sasl.failure} ({self.state.client()})",
                )
            )

    def _error_answer(self, api: Api, call: Call, exc: BaseException) -> Any:
        """UNKNOWN_SERVER_ERROR in the request's own shape for a handler that
        raised (Kafka's answer to an unexpected exception); logged with who asked,
        and counted. None: no answer (acks=0); NO_ANSWER: none could be formed."""
        self.server.handler_errors += 1
        log.error(
            "kafka.handler_error api=%s version=%d peer=%s %s: %r",
            api_name(api.key),
            call.version,
            self.peer,
            self.state.client(),
            exc,
            exc_info=exc,
        )
        try:
            answer = api.error_response(
                call.version, call.corr, call.req, ErrorCode.unknown_server_error
            )
        except Exception:
            log.exception("kafka.error_response_failed api=%s", api_name(api.key))
            return NO_ANSWER
        if answer is None and getattr(call.req, "acks", None) != 0:
            return NO_ANSWER
        return answer
