"""Synchronous, failing-over access to the cluster's read API (sink.readapi.ReadApiClient).

Spark calls the source from plain threads in several processes (source runner, planner,
executor workers), none with an event loop of ours, so each process runs one private asyncio
loop in a daemon thread and keeps one ReadApiClient per address in it (Python workers are
reused across tasks, so the clients survive between read() calls). Nothing here is created in
__init__ of a reader: readers are pickled, sockets are not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from connectors.spark.errors import ClusterUnreachableError
from connectors.spark.offsets import TopicPartition
from connectors.spark.options import SslOptions
from sink.readapi import ReadApiClient
from sink.readapi.client import tls_credentials

log = logging.getLogger("connectors.spark")
T = TypeVar("T")

NOT_SERVED = -1
"""A partition's log start and high watermark in a Partitions answer of a node that holds no
replica of it (partition groups: sink.node.routed_reads.NOT_HERE)."""


class _LoopThread:
    """One event loop per process, in a daemon thread (stop() is never called by Spark)."""

    _lock = threading.Lock()
    _instance: _LoopThread | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[tuple[str, SslOptions | None], ReadApiClient] = {}
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        threading.Thread(target=run, name="raftsink-read-api", daemon=True).start()
        ready.wait()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._lock:
            # A forked child inherits the object but not the thread: make a new one.
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = _LoopThread()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout + 5.0)
        except TimeoutError:
            fut.cancel()
            raise

    def client(self, address: str, ssl: SslOptions | None = None) -> ReadApiClient:
        """The process's client of address (plaintext, or TLS with `ssl`'s files)."""
        key = (address, ssl)
        c = self.clients.get(key)
        if c is None:
            creds = (
                tls_credentials(ssl.cafile, ssl.certfile, ssl.keyfile) if ssl is not None else None
            )

            async def make() -> ReadApiClient:
                return ReadApiClient(address, credentials=creds)

            c = self.run(make(), 5.0)
            self.clients[key] = c
        return c


@dataclass(frozen=True)
class PartitionState:
    log_start_offset: int
    high_watermark: int
    leader: int = 0
    """The partition's leader as the answering node knows it (0: none known)."""
    replicas: tuple[tuple[int, str], ...] = ()
    """(node id, read API address) of the partition's replicas; the address is "" when
    the answering node does not know it; empty: a node older than these fields."""

    @property
    def served(self) -> bool:
        """The answering node serves the partition (else its offsets are NOT_SERVED)."""
        return self.high_watermark != NOT_SERVED and self.log_start_offset != NOT_SERVED


def _states_of(reply: Any) -> dict[TopicPartition, PartitionState]:
    return {
        (p.topic, p.partition): PartitionState(
            p.log_start_offset,
            p.high_watermark,
            p.leader_id,
            tuple((r.node_id, r.read_api) for r in p.replicas),
        )
        for p in reply.partitions
    }


def _back_off(what: str, errors: dict[str, str], deadline: float, delay: float) -> float:
    """Sleep before the next pass over the nodes -> the next delay (doubling, at most
    1 s); ClusterUnreachableError naming every node's error once the deadline would
    pass."""
    if time.monotonic() + delay > deadline:
        tried = "; ".join(f"{a} ({e})" for a, e in errors.items())
        raise ClusterUnreachableError(
            f"raftsink cluster unreachable for {what}: tried {tried}. Check that the"
            " nodes run and that raftsink.nodes lists their read API addresses"
            " (not the Kafka ports)."
        )
    time.sleep(delay)
    return min(1.0, delay * 2)


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        try:
            return f"{code().name}: {details()}"
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


class ReadCluster:
    """The read API of every node in `nodes`, tried in order with failover.

    `preferred` remembers the last node that answered so a dead node is not retried first on
    every call; the order is otherwise the user's.
    """

    def __init__(
        self,
        nodes: Sequence[str],
        request_timeout_s: float = 10.0,
        retry_timeout_s: float = 60.0,
        ssl: SslOptions | None = None,
    ) -> None:
        """ssl: TLS to the read API (the source's raftsink.ssl.* options); None: plaintext."""
        self.ssl = ssl
        self.nodes = list(nodes)
        self.request_timeout_s = request_timeout_s
        self.retry_timeout_s = retry_timeout_s
        self.preferred = 0

    def order(self) -> list[int]:
        n = len(self.nodes)
        return [(self.preferred + i) % n for i in range(n)]

    def call(self, address: str, fn: Callable[[ReadApiClient], Coroutine[Any, Any, T]]) -> T:
        loop = _LoopThread.get()
        return loop.run(fn(loop.client(address, self.ssl)), self.request_timeout_s)

    def first_answer(
        self,
        what: str,
        fn: Callable[[ReadApiClient], Coroutine[Any, Any, T]],
        deadline_s: float | None = None,
    ) -> T:
        """fn on the first node that answers; passes over all nodes until the deadline."""
        deadline = time.monotonic() + (self.retry_timeout_s if deadline_s is None else deadline_s)
        errors: dict[str, str] = {}
        delay = 0.05
        while True:
            for i in self.order():
                addr = self.nodes[i]
                try:
                    result = self.call(addr, fn)
                except Exception as exc:  # grpc errors, timeouts, refused connections
                    errors[addr] = _describe(exc)
                    continue
                self.preferred = i
                return result
            delay = _back_off(what, errors, deadline, delay)

    def partitions(
        self,
        topics: list[str] | None = None,
        linearizable: bool = False,
        deadline_s: float | None = None,
    ) -> dict[TopicPartition, PartitionState]:
        """Log start and high watermark (committed, applied) of every partition of `topics`.

        With partition groups a node knows the offsets of the partitions it holds a replica
        of only; it lists the others with NOT_SERVED (-1) offsets and their replicas. Those
        are asked of other nodes (the source's, then the partitions' replicas' addresses)
        until every partition has the answer of a node that serves it (with `linearizable`,
        each node's ReadIndex covers the groups it serves). Invariant: no state returned
        carries NOT_SERVED offsets; when no node serves a partition before the deadline,
        ClusterUnreachableError names it (never a -1 high watermark taken as an offset)."""
        deadline = time.monotonic() + (self.retry_timeout_s if deadline_s is None else deadline_s)

        async def fn(c: ReadApiClient) -> Any:
            return await c.partitions(
                topics or None, linearizable=linearizable, timeout=self.request_timeout_s
            )

        states = _states_of(self.first_answer("Partitions", fn, deadline_s))
        missing = {tp for tp, st in states.items() if not st.served}
        if missing:
            self._fill_unserved(states, missing, fn, deadline, self.nodes[self.preferred])
        return states

    def _fill_unserved(
        self,
        states: dict[TopicPartition, PartitionState],
        missing: set[TopicPartition],
        fn: Callable[[ReadApiClient], Coroutine[Any, Any, Any]],
        deadline: float,
        answered: str,
    ) -> None:
        """Replace each missing partition's state by that of a node serving it (in place)."""
        errors: dict[str, str] = {}
        delay = 0.05
        asked = {answered}  # this round's nodes; the first answer needs no second call
        while True:
            for addr in self._candidates(states, missing):
                if addr in asked:
                    continue
                asked.add(addr)
                try:
                    reply = self.call(addr, fn)
                except Exception as exc:  # a dead node: another replica may answer
                    errors[addr] = _describe(exc)
                    continue
                for tp, st in _states_of(reply).items():
                    if tp in missing and st.served:
                        states[tp] = st
                        missing.discard(tp)
                if not missing:
                    return
                errors[addr] = "serves none of them"
            if time.monotonic() + delay > deadline:
                names = ", ".join(f"{t}/{p}" for t, p in sorted(missing))
                tried = "; ".join(f"{a} ({e})" for a, e in errors.items())
                raise ClusterUnreachableError(
                    f"no node serves {names} (partition groups: only a partition's replicas"
                    f" hold its offsets); tried {tried}. Check that the partitions' replicas"
                    " run and that raftsink.nodes lists read API addresses."
                )
            time.sleep(delay)
            delay = min(1.0, delay * 2)
            asked = set()

    def _candidates(
        self, states: dict[TopicPartition, PartitionState], missing: set[TopicPartition]
    ) -> list[str]:
        """Where to ask for the missing partitions: the source's nodes (in failover order;
        addresses the user gave are reachable from here), then the missing partitions'
        replicas as the cluster names them (a node the user did not list)."""
        out = [self.nodes[i] for i in self.order()]
        for tp in sorted(missing):
            for _, addr in states[tp].replicas:
                if addr and addr not in out:
                    out.append(addr)
        return out

    def offsets_for_times(
        self, queries: dict[TopicPartition, int], deadline_s: float | None = None
    ) -> dict[TopicPartition, int]:
        """{tp: timestamp ms} -> {tp: offset of the first record at or after it; -1: none}.

        Each row is taken from a node that answers it without error: with partition groups
        only a partition's replicas can look a timestamp up (the others answer that row
        NOT_SERVED_HERE), so the rows may come from several nodes."""
        if not queries:
            return {}
        deadline = time.monotonic() + (self.retry_timeout_s if deadline_s is None else deadline_s)
        out: dict[TopicPartition, int] = {}
        errors: dict[str, str] = {}
        delay = 0.05
        while True:
            for i in self.order():
                addr = self.nodes[i]
                pending = {tp: ts for tp, ts in queries.items() if tp not in out}

                async def fn(c: ReadApiClient, pending: dict = pending) -> Any:
                    return await c.offsets_for_times(pending, timeout=self.request_timeout_s)

                try:
                    reply = self.call(addr, fn)
                except Exception as exc:  # grpc errors, timeouts, refused connections
                    errors[addr] = _describe(exc)
                    continue
                bad = []
                for o in reply.offsets:
                    if o.error_code:
                        bad.append(f"{o.topic}/{o.partition}: error {o.error_code}")
                    elif (o.topic, o.partition) in pending:
                        out[(o.topic, o.partition)] = o.offset
                if bad:
                    errors[addr] = ", ".join(bad)
                if len(out) == len(queries):
                    self.preferred = i
                    return out
            delay = _back_off("OffsetsForTimes", errors, deadline, delay)

    def fetch(self, address: str, topic: str, partition: int, offset: int, max_bytes: int) -> Any:
        return self.fetch_soon(address, topic, partition, offset, max_bytes).result(
            self.request_timeout_s + 5.0
        )

    def fetch_soon(
        self, address: str, topic: str, partition: int, offset: int, max_bytes: int
    ) -> Future[Any]:
        """Start a Fetch now and return its future (a reader prefetches the next range
        while it decodes the current one)."""
        loop = _LoopThread.get()
        client = loop.client(address, self.ssl)
        return asyncio.run_coroutine_threadsafe(
            client.fetch(
                topic, partition, offset, max_bytes=max_bytes, timeout=self.request_timeout_s
            ),
            loop.loop,
        )

    def commit(self, pipeline_id: str, offsets: dict[TopicPartition, int]) -> bool:
        """Report consumed offsets if the read API has a Commit RPC; False if it has none.

        ReadApiClient.commit(pipeline, {(topic, partition): next offset}) replicates the
        offsets through Raft (any node forwards to the leader); a reply with an error code is
        retried on the next node like a transport error.
        """
        if not callable(getattr(ReadApiClient, "commit", None)):
            return False

        async def fn(c: ReadApiClient) -> Any:
            reply = await c.commit(pipeline_id, offsets, timeout=self.request_timeout_s)  # type: ignore[attr-defined]
            if getattr(reply, "error_code", 0):
                raise RuntimeError(f"commit refused: {reply.error_code} {reply.error}")
            return reply

        self.first_answer("Commit", fn)
        return True
