"""A Kafka connection's ordered response queue and its writing (a part of
sink.kafka.connection.Connection).

Every request's outcome goes into one FIFO (self._queue), in request order: an
Answer's bytes, a handler's future of its response (most of them), or None (no
answer: acks=0). Entries: (response or future, produce cost, origin (api, call, the
dispatch's perf_counter) or None, request memory reserved, Fetch grant or -1).

Invariants:
- Responses leave in request order (kafka-python requires it) while Produce/Fetch
  wait concurrently: only the head is ever written, as soon as it is ready (a done
  future: in the callback that made it, else from its done callback, _on_head_done;
  the connection holds at most one such callback, on the head: _head_wait). Whatever
  is ready together is written with one call (over TLS, in runs of about one record:
  tls_runs).
- An entry's produce cost, request memory and Fetch grant are held until its
  response is written (or the connection ends: _teardown); a Fetch grant is settled
  to the response's real size when it is built. Writing is the only release of a
  live connection's reservations, so a connection that cannot write stops reading
  (its queue holds its in-flight slots and memory: sink.kafka.conn_input).
- Write flow control: while the transport is over its high-water mark
  (pause_writing) nothing is written; the responses stay queued.
- A response that cannot be formed (NO_ANSWER: its future failed and not even an
  error answer exists) closes the connection after the responses before it.
- A response is activity: writing one moves the idle deadline.
- A dispatched request's time, from its dispatch until its response is handed to the
  transport, counts in its API's histogram (KafkaServer.request_seconds) when written;
  a request the connection drops unanswered (it closed) counts nowhere.

The part holds no state of its own: every field is Connection's, set in
connection_made.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from sink.kafka.protocol.connection import CloseReason

if TYPE_CHECKING:
    from sink.kafka.handlers import Api, Call

log = logging.getLogger("sink.kafka")

NO_ANSWER = object()
"""A response that could not be formed (not even an error answer): the queue writes
what precedes it, then closes the connection."""
TLS_RECORD = 1 << 14
"""The most plaintext one TLS record carries (RFC 8446 5.1): over TLS, a response's
parts are written in runs of about this size (tls_runs)."""


def size_of(data: Any) -> int:
    if isinstance(data, list):
        return sum(len(p) for p in data)
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0


def tls_runs(parts: list) -> list:
    """A response's wire parts regrouped for a TLS transport: the event loop's SSL
    layer (uvloop's and asyncio's sslproto) calls SSLObject.write once per part, and
    each call is at least one TLS record (header, AEAD tag, a cipher call). Small
    parts (the size prefix, a Fetch's headers and small record batches) are joined
    into runs of up to about one record's plaintext; a part of a record or more is
    passed on as it is (the SSL layer cuts it into full records, no copy here).
    Invariant: the concatenation of the result is that of parts, in order."""
    if len(parts) < 2:
        return parts
    out: list = []
    run: list = []
    size = 0
    for p in parts:
        n = len(p)
        if n >= TLS_RECORD:
            if run:
                out.append(run[0] if len(run) == 1 else b"".join(run))
                run, size = [], 0
            out.append(p)
            continue
        run.append(p)
        size += n
        if size >= TLS_RECORD:
            out.append(b"".join(run))
            run, size = [], 0
    if run:
        out.append(run[0] if len(run) == 1 else b"".join(run))
    return out


def consume(fut: asyncio.Future) -> None:
    """A response nobody will write (the connection ended): retrieve its outcome so
    that a failure is not reported as never retrieved."""
    if not fut.cancelled():
        fut.exception()


def consume_result(result: Any) -> None:
    if isinstance(result, asyncio.Future):
        result.add_done_callback(consume)


class ResponseQueue:
    """The response queue and writing part of Connection (no state of its own)."""

    def _push(
        self,
        item: Any,
        cost: int,
        origin: tuple[Api, Call, float] | None,
        reserved: int = 0,
        grant: int = -1,
    ) -> None:
        """Queue a request's outcome; it holds cost (produce bytes), reserved
        (request memory) and grant (Fetch memory) until written."""
        self.state.admit(cost)
        self.server.pending_produce_bytes += cost
        self._queue.append((item, cost, origin, reserved, grant))

    def _on_head_done(self, fut: asyncio.Future) -> None:
        if self._head_wait is fut:
            self._head_wait = None
        self._flush()

    def _flush(self) -> None:
        """Write the queue's ready head responses, in order, with one call."""
        if self._over or self._write_paused:
            return
        try:
            self._write_ready()
        except Exception:  # a bug: never leave the loop's callback with it
            log.exception("kafka.write_error peer=%s", self.peer)
            self.closed_reason = self.closed_reason or "internal error"
            self.transport.abort()  # type: ignore[union-attr]
            self._teardown()
            return
        if self._closing and not self._queue and self._blocked != "step" and not self._over:
            self._close_now()
        elif self._blocked == "room" and self._has_room():
            self.server.room_waiters.discard(self._room_wake)
            self._unblock("room")

    def _write_ready(self) -> None:
        queue = self._queue
        st = self.state
        out: list = []
        freed: list[tuple[int, int]] = []
        done: list[tuple[Api, Call, float]] = []
        close = False
        while queue:
            item, cost, origin, reserved, grant = queue[0]
            if isinstance(item, asyncio.Future):
                if not item.done():
                    if self._head_wait is not item:
                        self._head_wait = item
                        item.add_done_callback(self._on_head_done)
                    break
                if item.cancelled() or item.exception() is not None:
                    exc = asyncio.CancelledError() if item.cancelled() else item.exception()
                    assert exc is not None
                    data = (
                        self._error_answer(origin[0], origin[1], exc)
                        if origin is not None
                        else NO_ANSWER
                    )
                else:
                    data = item.result()
            else:
                data = item
            queue.popleft()
            if origin is not None:
                done.append(origin)
            parts = st.send(None if data is NO_ANSWER else data, cost)
            self.server.release_produce_bytes(cost)
            fetch_bytes = max(grant, 0)
            if grant >= 0:  # account the Fetch response's real size from now on
                fetch_bytes = size_of(data)
                if not self._released:
                    self.memory.fetches.settle(grant, fetch_bytes)
                    self._fetch_held += fetch_bytes - grant
            freed.append((reserved, fetch_bytes))
            if data is NO_ANSWER:  # not even an error answer could be formed
                st.close(CloseReason.NO_ERROR_ANSWER)
                self.closed_reason = CloseReason.NO_ERROR_ANSWER.value
                close = True
                break
            out.extend(parts)
        transport = self.transport
        assert transport is not None
        if out and not transport.is_closing():
            transport.writelines(tls_runs(out) if self._tls else out)
            # A response is activity too: idleness counts from the later of the
            # last input and the last response written (as Kafka's).
            self._deadline = self._loop.time() + self.limits.idle_timeout_s
        if done:
            self.server.count_latencies(done)
        for reserved, fetch_bytes in freed:
            self._release(reserved, fetch_bytes)
        if close:
            self._closing = True
            self._close_now()
