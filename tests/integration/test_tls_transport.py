"""raftlog's gRPC transport with mutual TLS (credentials from sink.security.tls):
two transports of the cluster CA exchange messages; a transport with another CA's
certificate gets none through, counts the refusals and warns once, by peer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from raftlog.core.messages import RequestVote
from raftlog.process_cluster import free_ports
from raftlog.transport import GrpcTransport
from raftlog.transport.routing import TransportStats
from sink.security.tls import GrpcTls, TlsOptions


def _tls(cert: str, key: str, ca: str) -> GrpcTls:
    return GrpcTls(TlsOptions(cert_file=cert, key_file=key, ca_file=ca, raft=True))


async def _exchange(
    a_tls: GrpcTls, b_tls: GrpcTls, done: Callable[[list, TransportStats], bool]
) -> tuple[list, TransportStats]:
    """b sends votes to a until done(delivered, b's stats) or 60 s; returns both."""
    pa, pb = free_ports(2)
    got: list = []
    a = GrpcTransport(1, f"127.0.0.1:{pa}", {2: f"127.0.0.1:{pb}"}, security=a_tls)
    b = GrpcTransport(2, f"127.0.0.1:{pb}", {1: f"127.0.0.1:{pa}"}, security=b_tls)
    await a.start(got.extend)
    await b.start(lambda msgs: None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    try:
        while not done(got, b.stats) and loop.time() < deadline:
            b.send([RequestVote(src=2, dst=1, term=1, last_index=0, last_term=0)])
            await asyncio.sleep(0.1)  # resend period while polling for delivery
    finally:
        await b.close()
        await a.close()
    return got, b.stats


def test_same_ca_delivers(certs):
    a = _tls(*certs.pair("node1"), certs.ca)
    b = _tls(*certs.pair("node2"), certs.ca)
    got, stats = asyncio.run(_exchange(a, b, lambda got, _: bool(got)))
    assert got and got[0].src == 2
    assert stats.tls_failures == 0


def test_another_ca_is_refused_counted_and_logged_once(certs, caplog):
    a = _tls(*certs.pair("node1"), certs.ca)
    # Trusts the cluster CA, but its own certificate is the rogue CA's: a refuses it.
    b = _tls(*certs.rogue, certs.ca)
    with caplog.at_level(logging.WARNING, logger="raftlog.transport"):
        got, stats = asyncio.run(_exchange(a, b, lambda got, st: bool(got) or st.tls_failures >= 3))
    assert got == []
    assert stats.tls_failures >= 3, stats
    warnings = [r for r in caplog.records if "transport.tls_refused" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "peer=1" in warnings[0].getMessage()


class _Cutter:
    """A TCP "proxy" that accepts every connection and drops it at once, before any
    TLS byte is answered (a load balancer without a backend, say); counts them."""

    def __init__(self) -> None:
        self.cut = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self, port: int) -> None:
        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.cut += 1
            writer.transport.abort()

        self.server = await asyncio.start_server(drop, "127.0.0.1", port)

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def test_connections_cut_before_the_handshake_are_not_tls_refusals(certs, caplog):
    """A peer address where connections are cut before the handshake: not a TLS
    refusal (is_tls_failure: "Handshake read failed (...)"): no tls_failures, no
    transport.tls_refused warning, only the ordinary reconnects."""
    b_tls = _tls(*certs.pair("node2"), certs.ca)

    async def run() -> tuple[TransportStats, int]:
        pa, pb = free_ports(2)
        cutter = _Cutter()
        await cutter.start(pa)
        b = GrpcTransport(2, f"127.0.0.1:{pb}", {1: f"127.0.0.1:{pa}"}, security=b_tls)
        await b.start(lambda msgs: None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        try:
            while (cutter.cut < 3 or b.stats.reconnects < 3) and loop.time() < deadline:
                b.send([RequestVote(src=2, dst=1, term=1, last_index=0, last_term=0)])
                await asyncio.sleep(0.1)  # resend period while polling for the cuts
        finally:
            await b.close()
            await cutter.close()
        return b.stats, cutter.cut

    with caplog.at_level(logging.WARNING, logger="raftlog.transport"):
        stats, cut = asyncio.run(run())
    assert cut >= 3 and stats.reconnects >= 3, (cut, stats)
    assert stats.tls_failures == 0, stats
    assert not [r for r in caplog.records if "transport.tls_refused" in r.getMessage()]
