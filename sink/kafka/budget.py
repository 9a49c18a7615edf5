"""The node's memory budgets for Kafka requests and Fetch responses.

Request memory (Kafka's queued.max.request.bytes pool, Redpanda's per-shard request
memory semaphore). Bytes of requests being read and queued, over every connection of
every listener of the node, never exceed one budget:

- reserve on header: a frame's announced size is reserved as soon as its 4-byte size
  prefix is read, BEFORE its body is read or allocated (the connection then fills one
  buffer of exactly that size); the reservation is released when the request's
  response has been written (Produce: after its commit), or when the connection ends.
  A connection that cannot reserve stops reading its socket (TCP back-pressure); it
  resumes when memory is released. Nothing is allocated past the budget except what
  the kernel and the event loop buffer per connection before a frame's size is known
  (bounded by kafka.read_buffer_bytes and the read chunk: the documented baseline).
- a frame larger than what large frames may ever hold is refused at once (the
  connection is closed with the frame size and the budget in the reason), so no
  request waits for memory that can never be free.

Deadlock freedom and fairness, argued for the flood of issue 21 (300 connections each
announcing a 90 MiB frame and trickling it):

1. reserve-on-header grants whole frames: the first N frames that fit are read, the
   rest do not start (a half-reserved frame would hold memory and still not complete:
   N partial frames that each hold part of the budget can starve each other for ever);
2. a frame that has started must arrive whole within kafka.frame_read_timeout_s, else
   the connection is closed and its reservation released: a trickling client holds the
   budget for a bounded time, and the next waiter gets it;
3. a reserved slice (request_memory_small_reserve_bytes) only small frames
   (<= request_memory_small_frame_bytes) may use: large frames, however many, never
   take the last slice, so an ordinary producer's small frames keep getting through
   while the flood holds the rest. Small and large waiters queue separately; each
   queue is FIFO (a large waiter is never overtaken by a later large one, so large
   frames are not starved by a stream of other large frames either);
4. a per-connection share (request_memory_per_connection_bytes): a connection holding
   reservations may not take more than its share (it waits for its own responses,
   not in the budget's queues), but one with none may always take one frame, so
   one pipelining connection cannot take the whole budget and every connection can
   still make progress.

A per-connection share alone would not do: 300 connections x any useful share is past
the budget. The reserved slice alone would not do either: without the frame timeout,
trickling clients would hold the large part for ever.

The parse of a frame (kio) briefly holds the frame and its parsed copy; frames are
parsed one at a time on the event loop, so this adds at most one frame, node-wide.

Fetch responses (many consumers asking for 50 MB each at once): a separate budget of
response bytes being built and queued for writing. A Fetch is granted what it can
receive (min(max_bytes, the sum of its partition_max_bytes)) or what is left, if
less; its max_bytes and partition_max_bytes are clamped to the
grant, so the response is smaller instead of memory growing (at least one batch is
still returned, KIP-74, so a consumer always progresses). The grant is corrected to
the response's real size once built, and released when it has been written.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from sink.kafka.limits import KafkaLimits, MiB

log = logging.getLogger("sink.kafka")

AUTO_FRACTION = 0.10
AUTO_MIN = 64 * MiB
AUTO_MAX = 1024 * MiB


def node_memory_bytes(
    meminfo: str = "/proc/meminfo", cgroup_max: str = "/sys/fs/cgroup/memory.max"
) -> int | None:
    """min(MemTotal, cgroup v2 memory.max) in bytes; None when neither is readable."""
    sizes: list[int] = []
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    sizes.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(cgroup_max) as f:
            text = f.read().strip()
        if text and text != "max":
            sizes.append(int(text))
    except (OSError, ValueError):
        pass
    return min(sizes) if sizes else None


def auto_request_memory(memory: int | None) -> int:
    """The default budget: AUTO_FRACTION of the node's memory in [AUTO_MIN, AUTO_MAX]."""
    if memory is None:
        return AUTO_MIN
    return max(AUTO_MIN, min(AUTO_MAX, int(memory * AUTO_FRACTION)))


@dataclass(frozen=True, slots=True)
class BudgetSizes:
    """The request budget's resolved sizes (kafka limits with their 0s resolved)."""

    limit: int
    small_frame: int
    small_reserve: int
    per_connection: int
    fetch_limit: int

    @property
    def largest_frame(self) -> int:
        """The largest frame that can ever be reserved (large frames leave the slice)."""
        return self.limit - self.small_reserve

    @classmethod
    def of(cls, limits: KafkaLimits, memory: int | None = None) -> BudgetSizes:
        limit = limits.request_memory_bytes or auto_request_memory(
            memory if memory is not None else node_memory_bytes()
        )
        small_frame = min(limits.request_memory_small_frame_bytes, limit)
        reserve = limits.request_memory_small_reserve_bytes or max(limit // 8, 4 * small_frame)
        reserve = min(reserve, limit - 1) if limit > 1 else 0
        per_conn = limits.request_memory_per_connection_bytes or max(limit // 4, 1)
        fetch = limits.fetch_response_memory_bytes or limit
        return cls(limit, small_frame, reserve, per_conn, fetch)


class BudgetLedger:
    """The request budget's accounting (pure: no waiting, no clock).

    Invariants: 0 <= used_large <= limit - small_reserve; 0 <= used <= limit.
    """

    def __init__(self, sizes: BudgetSizes) -> None:
        self.sizes = sizes
        self.used = 0
        self.used_large = 0

    def is_small(self, n: int) -> bool:
        return n <= self.sizes.small_frame

    def too_large(self, n: int) -> bool:
        """A frame no reservation can ever cover (refuse it, never wait for it)."""
        return n > (self.sizes.limit if self.is_small(n) else self.sizes.largest_frame)

    def within_share(self, n: int, held: int) -> bool:
        """A connection holding held bytes may reserve n more (its first always)."""
        return not held or held + n <= self.sizes.per_connection

    def fits(self, n: int, held: int = 0) -> bool:
        """n more bytes fit the budget (and the share of a connection holding held)."""
        sz = self.sizes
        if not self.within_share(n, held):
            return False
        if self.used + n > sz.limit:
            return False
        return self.is_small(n) or self.used_large + n <= sz.largest_frame

    def take(self, n: int) -> None:
        self.used += n
        if not self.is_small(n):
            self.used_large += n

    def give(self, n: int) -> None:
        self.used -= n
        if not self.is_small(n):
            self.used_large -= n
        assert self.used >= 0 and self.used_large >= 0, "released more than reserved"


class _Waiter:
    __slots__ = ("fut", "n", "since")

    def __init__(self, n: int, fut: asyncio.Future, since: float) -> None:
        self.n, self.fut, self.since = n, fut, since


class RequestMemory:
    """The node-wide request budget shared by every connection of every listener.

    A reservation is released with exactly the size it was taken with (release(n)):
    small/large is a property of the size, so the slice accounting stays exact.
    """

    def __init__(self, sizes: BudgetSizes) -> None:
        self.ledger = BudgetLedger(sizes)
        self._small: collections.deque[_Waiter] = collections.deque()
        self._large: collections.deque[_Waiter] = collections.deque()
        self.waits = 0
        """Reservations that had to wait."""
        self.waited_bytes = 0
        self.wait_seconds = 0.0
        self.high_water = 0

    @property
    def sizes(self) -> BudgetSizes:
        return self.ledger.sizes

    @property
    def used(self) -> int:
        return self.ledger.used

    @property
    def waiting(self) -> int:
        return len(self._small) + len(self._large)

    def try_reserve(self, n: int) -> bool:
        """Reserve at once if it fits and nobody of its kind waits ahead (FIFO).
        (A connection's share is its own check: ledger.within_share.)"""
        queue = self._small if self.ledger.is_small(n) else self._large
        if queue or not self.ledger.fits(n):
            return False
        self._take(n)
        return True

    async def reserve(self, n: int) -> None:
        """Reserve n bytes, waiting (in FIFO order of its kind) until they fit.
        The caller has checked too_large(n). Cancelled: nothing stays reserved."""
        if self.try_reserve(n):
            return
        fut = asyncio.get_running_loop().create_future()
        w = _Waiter(n, fut, time.monotonic())
        (self._small if self.ledger.is_small(n) else self._large).append(w)
        self.waits += 1
        self.waited_bytes += n
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as we were cancelled
            else:
                self._drop(w)
            raise
        finally:
            self.wait_seconds += time.monotonic() - w.since

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.ledger.give(n)
        self._wake()

    def _take(self, n: int) -> None:
        self.ledger.take(n)
        self.high_water = max(self.high_water, self.ledger.used)

    def _drop(self, w: _Waiter) -> None:
        for q in (self._small, self._large):
            try:
                q.remove(w)
            except ValueError:
                continue
            self._wake()  # a large head that left may unblock the ones behind it
            return

    def _wake(self) -> None:
        # Small waiters first (the reserved slice is for them); each queue FIFO: a
        # head that does not fit blocks the ones behind it (nobody overtakes it).
        for q in (self._small, self._large):
            while q:
                w = q[0]
                if w.fut.done():
                    q.popleft()
                    continue
                if not self.ledger.fits(w.n, 0):
                    break
                q.popleft()
                self._take(w.n)
                w.fut.set_result(None)


class FetchMemory:
    """The node-wide budget of Fetch response bytes being built and queued (pure).

    grant() never waits: what is short is answered with less data."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.clamped = 0
        """Fetches whose max_bytes was reduced because the budget was short."""
        self.high_water = 0

    def grant(self, want: int) -> int:
        """Reserve up to want bytes (>= 0; 0 when nothing is left: the fetch returns
        one batch at most); the caller later calls settle(granted, actual)."""
        g = max(0, min(want, self.limit - self.used))
        if g < want:
            self.clamped += 1
        self.used += g
        self.high_water = max(self.high_water, self.used)
        return g

    def settle(self, granted: int, actual: int) -> None:
        """The response was built: account its real size instead of the grant."""
        self.used += actual - granted
        self.high_water = max(self.high_water, self.used)

    def release(self, n: int) -> None:
        self.used -= n
        assert self.used >= 0, "released more fetch bytes than granted"


class NodeMemory:
    """The node's two budgets, shared by all its Kafka listeners."""

    def __init__(self, sizes: BudgetSizes) -> None:
        self.sizes = sizes
        self.requests = RequestMemory(sizes)
        self.fetches = FetchMemory(sizes.fetch_limit)

    @classmethod
    def of(cls, limits: KafkaLimits) -> NodeMemory:
        mem = cls(BudgetSizes.of(limits))
        sz = mem.sizes
        log.info(
            "kafka.memory request_budget=%d small_reserve=%d per_connection=%d fetch_budget=%d",
            sz.limit,
            sz.small_reserve,
            sz.per_connection,
            sz.fetch_limit,
        )
        if limits.max_frame_bytes > sz.largest_frame:
            log.warning(
                "kafka.max_frame_bytes=%d exceeds what the request memory budget can hold "
                "(%d): larger frames are refused; raise kafka.request_memory_bytes",
                limits.max_frame_bytes,
                sz.largest_frame,
            )
        return mem

    def stats(self) -> dict[str, float]:
        r, f = self.requests, self.fetches
        return {
            "request_memory_used_bytes": r.used,
            "request_memory_limit_bytes": self.sizes.limit,
            "request_memory_high_water_bytes": r.high_water,
            "request_memory_waiting": r.waiting,
            "request_memory_waits": r.waits,
            "request_memory_waited_bytes": r.waited_bytes,
            "request_memory_wait_seconds": r.wait_seconds,
            "fetch_memory_used_bytes": f.used,
            "fetch_memory_limit_bytes": f.limit,
            "fetch_memory_clamped": f.clamped,
        }


def clamp_fetch(req: Any, max_bytes: int) -> Any:
    """req (a FetchRequest of any version) with max_bytes and every
    partition_max_bytes at most max_bytes (>= 1: one batch is still returned).
    Fetch v0-v2 have no request-wide max_bytes: only the partitions are capped."""
    cap = max(1, max_bytes)
    topics = tuple(
        replace(
            ft,
            partitions=tuple(
                replace(fp, partition_max_bytes=min(fp.partition_max_bytes, cap))
                if fp.partition_max_bytes > cap
                else fp
                for fp in ft.partitions
            ),
        )
        for ft in req.topics
    )
    if not hasattr(req, "max_bytes"):
        return replace(req, topics=topics)
    return replace(
        req, max_bytes=min(req.max_bytes, cap) if req.max_bytes > 0 else cap, topics=topics
    )
