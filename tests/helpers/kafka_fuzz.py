"""The fuzz driver: mutants sent to real node processes over several
connections per node, each followed by an ApiVersions probe.

Each worker owns one connection to one node and runs mutant, probe, mutant,
probe...: it sends the mutant and an ApiVersions v0 probe right behind it, then
reads answers until the probe's (responses leave a connection in request
order). If the node closes the connection, the probe goes out again on a new
connection; if nothing comes back within HOLD_S (the mutant may legitimately
hold the connection, e.g. a long-poll Fetch), the connection is dropped and the
probe goes to a new one. A probe that a NEW connection does not answer within
PROBE_S is a finding: the node died or hung. A mutant whose size prefix lies is
sent and the connection half-closed, since the node must then wait for bytes
that never come. Workers pull mutant indices from one shared counter, and a
node that died is restarted (after noting the mutants in flight on it) so one
run finds every killer, not only the first.

Nothing the server sends is decoded with kio here: answers are only framed and
their correlation ids read; probes are parsed by hand.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.helpers.kafka_harness import (
    PROBE_CORR,
    WireError,
    api_versions_frame,
    parse_api_versions_v0,
)
from tests.helpers.kafka_mutate import Mutant

HOLD_S = 5.0  # how long a mutant may hold its connection before we move on
PROBE_S = 15.0  # a fresh connection's ApiVersions must be answered within this
MAX_ANSWER = 64 << 20


@dataclass
class Death:
    node: int
    suspects: list[Mutant]
    detail: str


@dataclass
class FuzzStats:
    sent: int = 0
    closed_by_server: int = 0
    held: int = 0
    held_mutants: list[Mutant] = field(default_factory=list)  # kept a connection > HOLD_S
    answers: int = 0
    bad_answers: list[str] = field(default_factory=list)
    deaths: list[Death] = field(default_factory=list)
    per_node: dict[int, int] = field(default_factory=dict)


class NodeDown(Exception):
    pass


async def _read_frame(reader: asyncio.StreamReader, timeout: float) -> bytes:
    head = await asyncio.wait_for(reader.readexactly(4), timeout)
    (size,) = struct.unpack(">i", head)
    if size < 4 or size > MAX_ANSWER:
        raise WireError(f"answer size prefix {size}")
    return await asyncio.wait_for(reader.readexactly(size), timeout)


async def probe_new_connection(port: int, corr: int) -> None:
    """ApiVersions on a new connection; NodeDown if the node does not answer."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), PROBE_S)
        writer.write(api_versions_frame(corr))
        await writer.drain()
        payload = await _read_frame(reader, PROBE_S)
        got, err, keys = parse_api_versions_v0(payload)
        if got != corr or err != 0 or 18 not in keys:
            raise NodeDown(f"ApiVersions answer corr={got} err={err}")
    except (TimeoutError, OSError, asyncio.IncompleteReadError, WireError) as e:
        raise NodeDown(repr(e)) from e
    finally:
        if writer is not None:
            writer.close()


class Worker:
    def __init__(self, wid: int, node: int, port: int, stats: FuzzStats) -> None:
        self.wid, self.node, self.port, self.stats = wid, node, port, stats
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.in_flight: Mutant | None = None
        self.probes = 0

    def _probe_corr(self) -> int:
        self.probes += 1
        return PROBE_CORR + (self.wid << 8) + (self.probes & 0xFF)

    async def _connect(self) -> None:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.port), PROBE_S
        )

    def _drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def run_one(self, m: Mutant) -> None:
        """Send m (+ a probe); NodeDown if the node stops answering."""
        self.in_flight = m
        self.stats.sent += 1
        self.stats.per_node[self.node] = self.stats.per_node.get(self.node, 0) + 1
        if self.writer is None:
            try:
                await self._connect()
            except (TimeoutError, OSError) as e:
                raise NodeDown(f"connect: {e!r}") from e
        assert self.reader is not None and self.writer is not None
        corr = self._probe_corr()
        try:
            self.writer.write(m.wire)
            if m.eof:
                self.writer.write_eof()
            else:
                self.writer.write(api_versions_frame(corr))
            await self.writer.drain()
            if m.eof:
                await self._drain_until_eof()
            elif await self._await_probe(m, corr):
                self.in_flight = None
                return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.stats.closed_by_server += 1
        except TimeoutError:
            self.stats.held += 1
            self.stats.held_mutants.append(m)
        except WireError as e:
            self.stats.bad_answers.append(f"node {self.node}: {e} after {m.describe()}")
        self._drop()
        await probe_new_connection(self.port, self._probe_corr())
        self.in_flight = None

    async def _drain_until_eof(self) -> None:
        assert self.reader is not None
        deadline = time.monotonic() + HOLD_S
        while True:
            chunk = await asyncio.wait_for(self.reader.read(1 << 16), deadline - time.monotonic())
            if not chunk:
                return

    async def _await_probe(self, m: Mutant, corr: int) -> bool:
        """Read answers until the probe's; True if it came on this connection."""
        assert self.reader is not None
        sent_corr = struct.unpack_from(">i", m.wire, 8)[0] if len(m.wire) >= 12 else None
        deadline = time.monotonic() + HOLD_S
        while True:
            payload = await _read_frame(self.reader, max(0.01, deadline - time.monotonic()))
            got = struct.unpack_from(">i", payload)[0]
            if got == corr:
                _c, err, keys = parse_api_versions_v0(payload)
                if err != 0 or 18 not in keys:
                    raise WireError(f"probe answer err={err}")
                return True
            self.stats.answers += 1
            if got != sent_corr:
                raise WireError(f"answer with correlation id {got}, sent {sent_corr}")


async def run_fuzz(
    ports: dict[int, int],
    mutants: list[Mutant],
    restart: Callable[[int], int],
    workers_per_node: int = 6,
    max_deaths: int = 10,
) -> FuzzStats:
    """Send every mutant once, spread over `workers_per_node` connections per node.

    restart(node) -> port restarts a dead node (blocking; run in a thread)."""
    stats = FuzzStats()
    queue = iter(mutants)
    lock = asyncio.Lock()
    node_lock = {n: asyncio.Lock() for n in ports}
    workers = [
        Worker(w * 16 + n, n, p, stats) for n, p in ports.items() for w in range(workers_per_node)
    ]

    async def handle_death(w: Worker, detail: str) -> None:
        async with node_lock[w.node]:
            try:  # another worker may have restarted it already
                await probe_new_connection(w.port, PROBE_CORR - 1)
                return
            except NodeDown:
                pass
            suspects = [x.in_flight for x in workers if x.node == w.node and x.in_flight]
            stats.deaths.append(Death(w.node, suspects, detail))
            port = await asyncio.to_thread(restart, w.node)
            for x in workers:
                if x.node == w.node:
                    x.port = port
                    x._drop()
                    x.in_flight = None

    async def loop(w: Worker) -> None:
        while len(stats.deaths) < max_deaths:
            async with lock:
                m = next(queue, None)
            if m is None:
                return
            try:
                await w.run_one(m)
            except NodeDown as e:
                w._drop()
                await handle_death(w, str(e))

    await asyncio.gather(*(loop(w) for w in workers))
    for w in workers:
        w._drop()
    return stats
