"""A Kafka connection's input: acting on the state machine's events, input flow
control and the idle and frame timers (a part of sink.kafka.connection.Connection,
whose buffer_updated feeds the state machine and calls _process).

_process runs the state machine (_pump) in the callback that brought the bytes: a
NeedMemory reserves the frame's memory (sink.kafka.conn_memory), a Request runs its
handler's dispatch step inline (sink.kafka.conn_dispatch), an Answer (the
ApiVersions fallback, INVALID_REQUEST) is queued (sink.kafka.conn_responses), a Close
ends the connection. Every callback that may unblock the connection ends in
_process, which ends by writing what is ready (_flush).

Back-pressure: the connection stops reading its socket (pause_reading; the client's
bytes stay in the kernel) while it is blocked (self._blocked): "room" while it has
max_inflight_requests unanswered requests or too many pending produce bytes (per
connection or server-wide; which requests are priced is each Api's `priced`),
"step" while a dispatch step is suspended, "memory" while a frame waits for request
memory, "quota" while muted by a client quota (librdkafka ignores throttle_time).
Nothing is dispatched while blocked. One reason at a time: the connection blocks
only from _pump (directly, or in the _reserve or _dispatch it calls), which runs
only while it is unblocked and stops once blocked; only the event that reason waits
for unblocks it (_unblock(why)).

Invariants:
- Whenever the connection is not blocked and not closing, its state machine has
  returned NEED_DATA and the transport is reading (_want_input; between callbacks:
  _pump runs until it blocks or needs data). self._reading marks waiting for input:
  the timers judge idleness and late frames only then.
- _process does not re-enter itself (self._busy): an event that unblocks during
  _pump is picked up by the running loop.
- Idleness: one lazily re-armed timer per connection. Input and responses only move
  a deadline (self._deadline); the timer, when it fires, closes the connection only
  if the deadline really passed while it was waiting for input (blocked on its own
  back-pressure is not idleness, nor waiting for its own responses).
- A frame granted memory must arrive whole by self._frame_deadline, judged only
  while the connection reads (held up by its own back-pressure, the deadline moves).

The part holds no state of its own: every field is Connection's, set in
connection_made.
"""

from __future__ import annotations

import logging

from sink.kafka.protocol.connection import (
    NEED_DATA,
    Answer,
    Close,
    CloseReason,
    NeedMemory,
    Request,
    SaslToken,
)

log = logging.getLogger("sink.kafka")


class ProtocolError(Exception):
    """Input that ends the connection."""

    def __init__(self, close: Close) -> None:
        super().__init__(close.detail or close.reason.value)
        self.close = close


class InputFlow:
    """The input part of Connection (no state of its own)."""

    def _has_room(self) -> bool:
        lim = self.limits
        return (
            self.state.has_room(lim.max_inflight_requests, lim.max_pending_produce_bytes)
            and self.server.pending_produce_bytes < lim.max_pending_produce_bytes_total
        )

    def _process(self) -> None:
        """Act on what the state machine has, then write what is ready. Every
        callback that may unblock the connection ends here."""
        if self._busy or self._over:
            return
        self._busy = True
        try:
            if not self._closing:
                self._pump()
        except ProtocolError as exc:
            self._protocol_error(exc)
        except Exception:  # a bug here must not leave the connection half-alive
            log.exception("kafka.connection_error peer=%s", self.peer)
            self._protocol_error(
                ProtocolError(self.state.close(CloseReason.NO_ERROR_ANSWER, "internal error"))
            )
        finally:
            self._busy = False
        self._flush()

    def _pump(self) -> None:
        st = self.state
        while self._blocked is None and not self._closing:
            if not self._has_room():
                self._flush()  # what is ready frees its slot now
                if not self._has_room():
                    self._block("room")
                    self.server.room_waiters.add(self._room_wake)
                    return
            if self.quota.muted_for() > 0:  # client quotas: throttled, read nothing
                self._block("quota")
                self._quota_timer = self._loop.call_later(self.quota.muted_for(), self._unmute)
                return
            ev = st.next_event()
            if ev is NEED_DATA:
                if st.frame_started:
                    self._arm_frame_timer()
                self._want_input()
                return
            self._reading = False
            if isinstance(ev, NeedMemory):
                self._reserve(ev.size)
            elif isinstance(ev, Request):
                self._dispatch(ev)
            elif isinstance(ev, Answer):
                log.info("kafka.answer peer=%s %s", self.peer, ev.note)
                self._push(ev.data, 0, None, ev.reserved)
            elif isinstance(ev, SaslToken):
                self._raw_token(ev)
            else:
                assert isinstance(ev, Close)
                if ev.reason is CloseReason.EOF:
                    self.closed_reason = CloseReason.EOF.value
                    self._begin_close()
                    return
                raise ProtocolError(ev)

    def _want_input(self) -> None:
        """NEED_DATA: the transport reads, the idle timer watches."""
        self._reading = True
        self._deadline = self._loop.time() + self.limits.idle_timeout_s
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_at(self._deadline, self._check_idle)
        if self._read_paused and not self.transport.is_closing():  # type: ignore[union-attr]
            self._read_paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    def _block(self, why: str) -> None:
        """Stop dispatching and reading: what the client sends meanwhile stays in the
        kernel's socket buffer, not in this process."""
        self._blocked = why
        self._reading = False
        self._pause_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and not self.transport.is_closing():  # type: ignore[union-attr]
            self._read_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def _unblock(self, why: str) -> None:
        if self._blocked == why:
            self._blocked = None
            self._process()

    def _on_server_room(self) -> None:
        """The listener released produce bytes (KafkaServer.release_produce_bytes)."""
        if self._blocked == "room":
            self._loop.call_soon(self._recheck_room)

    def _recheck_room(self) -> None:
        if self._blocked == "room" and self._has_room():
            self.server.room_waiters.discard(self._room_wake)
            self._unblock("room")

    def _unmute(self) -> None:
        self._quota_timer = None
        if self._blocked == "quota" and not self._over:
            self._unblock("quota")

    # ------------------------------------------------------------- timers

    def _check_idle(self) -> None:
        """Timer callback: close the connection if it has waited past its deadline."""
        self._idle_timer = None
        if not self._reading or self._closing:
            return  # dispatching or blocked on back-pressure; the next NEED_DATA re-arms
        what = self.state.waiting_for
        now = self._loop.time()
        if now < self._deadline or (what == "size" and self.state.inflight > 0):
            # Not idle yet, or waiting on our own responses (which is not idleness).
            due = max(self._deadline, now + self.limits.idle_timeout_s / 4)
            self._idle_timer = self._loop.call_at(due, self._check_idle)
            return
        self._expire(
            CloseReason.IDLE,
            f"idle for {self.limits.idle_timeout_s}s waiting for the request {what}",
        )

    def _arm_frame_timer(self) -> None:
        if self._frame_timer is None:
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)

    def _check_frame(self) -> None:
        """Timer callback: close a connection whose granted frame is late."""
        self._frame_timer = None
        if not self.state.frame_started or self._closing:
            return  # that frame arrived; the next one arms its own timer
        now = self._loop.time()
        if now < self._frame_deadline:
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)
            return
        if not self._reading:  # held up by our own back-pressure, not by the client
            self._frame_deadline = now + self.limits.frame_read_timeout_s / 4
            self._frame_timer = self._loop.call_at(self._frame_deadline, self._check_frame)
            return
        self._expire(
            CloseReason.FRAME_TIMEOUT,
            f"request frame ({self.state.buffered} bytes in) not received whole within "
            f"frame_read_timeout_s={self.limits.frame_read_timeout_s}",
        )

    def _expire(self, reason: CloseReason, detail: str) -> None:
        self._protocol_error(ProtocolError(self.state.close(reason, detail)))
        self._flush()
