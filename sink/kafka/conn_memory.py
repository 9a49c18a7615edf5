"""A Kafka connection's share of the node's memory budgets (a part of
sink.kafka.connection.Connection; sink.kafka.budget argues the design).

Request memory: before a frame's body is read its size is reserved from the node's
request memory (the state machine's NeedMemory event: _reserve). When the budget,
or this connection's share of it, is used up the connection blocks ("memory": it
reads nothing) and one task waits for the memory (_wait_for_memory; the only task
a connection has besides a suspended dispatch step's, and never both at once:
self._task). Fetch memory: a Fetch is granted response memory from the node's
fetch budget and clamped to it (_fetch_grant); the grant is settled to the
response's size when it is built (sink.kafka.conn_responses).

Invariants:
- self._held (request memory) and self._fetch_held (Fetch memory) are exactly what
  this connection holds of the node's budgets: every reservation is added when
  granted and subtracted once, in _release, when its request's response has been
  written, or all at once when the connection ends (_release_all; self._released
  then makes every later _release a no-op).
- A reservation granted to a connection that ended while it waited is given back
  at once (nobody would release it).
- self._room is set whenever this connection releases request memory (or ends):
  its waiter, over its share, waits for its own responses.
- A frame granted memory must arrive whole within frame_read_timeout_s
  (self._frame_deadline; the frame timer is sink.kafka.conn_input's).

The part holds no state of its own: every field is Connection's, set in
connection_made.
"""

from __future__ import annotations

from typing import Any

from sink.kafka.budget import clamp_fetch
from sink.kafka.conn_input import ProtocolError
from sink.kafka.protocol.connection import CloseReason

_NO_FETCH_LIMIT = 1 << 30  # a Fetch's max_bytes <= 0 (none): what the handler assumes


class MemoryShare:
    """The memory-budget part of Connection (no state of its own)."""

    def _reserve(self, size: int) -> None:
        """Reserve a frame's bytes from the node's request memory, then let the state
        read the body; when it cannot be had now, block and wait for it in a task."""
        mem = self.memory.requests
        if mem.ledger.too_large(size):
            sz = mem.sizes
            raise ProtocolError(
                self.state.close(
                    CloseReason.FRAME_TOO_LARGE,
                    f"frame of {size} bytes exceeds what the request memory budget can hold "
                    f"({sz.largest_frame} bytes of kafka.request_memory_bytes={sz.limit})",
                )
            )
        if mem.ledger.within_share(size, self._held) and mem.try_reserve(size):
            self._granted(size)
            return
        self._block("memory")
        self._task = self._loop.create_task(self._wait_for_memory(size))

    async def _wait_for_memory(self, size: int) -> None:
        mem = self.memory.requests
        try:
            while not mem.ledger.within_share(size, self._held):
                # Over this connection's share: wait for its own responses.
                self._room.clear()
                await self._room.wait()
                if self._over:
                    return
            await mem.reserve(size)
        finally:
            self._task = None
        if self._over:  # ended while it waited: nobody will release it
            mem.release(size)
            return
        self._granted(size)
        self._unblock("memory")

    def _granted(self, size: int) -> None:
        self._held += size
        self.state.grant(size)
        self._frame_deadline = self._loop.time() + self.limits.frame_read_timeout_s

    def _release(self, reserved: int, fetch: int) -> None:
        if self._released:
            return  # the connection already gave back everything it held
        if reserved:
            self._held -= reserved
            self.memory.requests.release(reserved)
            self._room.set()
        if fetch:
            self._fetch_held -= fetch
            self.memory.fetches.release(fetch)

    def _release_all(self) -> None:
        """The connection ended: give back the reservations it still holds."""
        if not self._released:
            self._release(self._held, self._fetch_held)
            self._released = True

    def _fetch_grant(self, req: Any) -> tuple[Any, int]:
        """Reserve response memory for a Fetch; clamp it to what the budget grants."""
        # What the response can hold: max_bytes, and no more than the partitions' own
        # limits (a long-polling consumer of one partition holds 1 MiB, not 50 MB).
        max_bytes = getattr(req, "max_bytes", -1)  # absent before Fetch v3
        want = min(
            max_bytes if max_bytes > 0 else _NO_FETCH_LIMIT,
            sum(max(fp.partition_max_bytes, 0) for ft in req.topics for fp in ft.partitions),
        )
        grant = self.memory.fetches.grant(want)
        self._fetch_held += grant
        if grant < want or any(
            fp.partition_max_bytes > grant for ft in req.topics for fp in ft.partitions
        ):
            req = clamp_fetch(req, grant)
        return req, grant
