"""sink.security.tls: settings validation, contexts, and reload of rotated certificates.

Real certificates (scripts/make-certs.sh) and real TLS handshakes over 127.0.0.1: an
asyncio server on a KafkaContext, a client that reads the certificate it was served.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import grpc
import pytest

from sink.config import load_config
from sink.config.values import ConfigError
from sink.security.tls import GrpcTls, KafkaContext, NodeTls, TlsConfigError, TlsOptions
from tests.helpers.tls_certs import Certs


def _opts(certs: Certs, name: str = "node1", **kw) -> TlsOptions:
    return TlsOptions(cert_file=certs.cert(name), key_file=certs.key(name), ca_file=certs.ca, **kw)


def test_off_by_default_and_needs_files_when_on(certs):
    assert not TlsOptions().enabled
    with pytest.raises(TlsConfigError, match=r"tls\.cert_file and tls\.key_file"):
        TlsOptions(kafka=True)
    with pytest.raises(TlsConfigError, match=r"tls\.ca_file is required"):
        TlsOptions(cert_file="c", key_file="k", raft=True)
    with pytest.raises(TlsConfigError, match=r"tls\.kafka_client_auth must be one of"):
        TlsOptions(kafka_client_auth="maybe")
    # Kafka TLS without client certificates needs no CA.
    assert TlsOptions(cert_file="c", key_file="k", kafka=True).enabled


def test_config_section_from_flags_and_environment(certs):
    peers = "1=127.0.0.1:1/127.0.0.1:2/127.0.0.1:3"
    cfg = load_config(
        env={
            "RAFTSINK_TLS_CERT_FILE": certs.cert("node1"),
            "RAFTSINK_TLS_KEY_FILE": certs.key("node1"),
            "RAFTSINK_TLS_CA_FILE": certs.ca,
        },
        overrides={"node.id": 1, "node.data_dir": "/tmp/x", "node.peers": peers, "tls.raft": True},
    )
    assert cfg.tls.raft and not cfg.tls.kafka and cfg.tls.ca_file == certs.ca
    with pytest.raises(ConfigError, match=r"tls\.cert_file"):
        load_config(
            env={},
            overrides={"node.id": 1, "node.data_dir": "/x", "node.peers": peers, "tls.kafka": "on"},
        )


def test_bad_files_fail_at_start_not_at_the_first_handshake(certs, tmp_path):
    with pytest.raises(FileNotFoundError):
        NodeTls(TlsOptions(cert_file=str(tmp_path / "no.pem"), key_file="k", kafka=True))
    # A key that is not the certificate's.
    wrong = _opts(certs, raft=True)
    wrong = TlsOptions(
        cert_file=wrong.cert_file, key_file=certs.key("node2"), ca_file=certs.ca, raft=True
    )
    with pytest.raises(ssl.SSLError):
        NodeTls(wrong)


def test_server_context_is_tls12_or_newer_with_default_ciphers(certs):
    ctx = KafkaContext.of(_opts(certs, kafka=True, kafka_client_auth="required"))
    assert ctx.inner.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert ctx.inner.verify_mode == ssl.CERT_REQUIRED
    default = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert {c["name"] for c in ctx.inner.get_ciphers()} == {
        c["name"] for c in default.get_ciphers()
    }


async def _served(port: int, ca: str) -> bytes:
    client = ssl.create_default_context(cafile=ca)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert der is not None
        return der
    finally:
        writer.close()


def test_kafka_context_reload_serves_new_connections_the_new_certificate(certs, tmp_path):
    # The node's files live in their own directory, rotated in place.
    live = tmp_path / "live"
    live.mkdir()
    for suffix in ("pem", "key"):
        shutil.copy(f"{certs.dir}/node1.{suffix}", live / f"node.{suffix}")
    opts = TlsOptions(cert_file=str(live / "node.pem"), key_file=str(live / "node.key"), kafka=True)
    ctx = KafkaContext.of(opts)

    async def main() -> tuple[bytes, bytes, bytes]:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            first = await _served(port, certs.ca)
            for suffix in ("pem", "key"):
                shutil.copy(f"{certs.dir}/node2.{suffix}", live / f"node.{suffix}")
            assert ctx.reload()
            second = await _served(port, certs.ca)
            # A rotation that leaves a broken file keeps the last good context.
            (live / "node.key").write_text("not a key")
            assert not ctx.reload()
            third = await _served(port, certs.ca)
            return first, second, third
        finally:
            server.close()
            await server.wait_closed()

    first, second, third = asyncio.run(main())
    pem = {n: ssl.PEM_cert_to_DER_cert(Path(certs.cert(n)).read_text()) for n in ("node1", "node2")}
    assert first == pem["node1"]
    assert second == pem["node2"]
    assert third == pem["node2"]


def test_grpc_credentials_reload_and_channel_credentials(certs, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    for suffix in ("pem", "key"):
        shutil.copy(f"{certs.dir}/node1.{suffix}", live / f"node.{suffix}")
    g = GrpcTls(
        TlsOptions(
            cert_file=str(live / "node.pem"),
            key_file=str(live / "node.key"),
            ca_file=certs.ca,
            raft=True,
        )
    )
    assert isinstance(g.server_credentials(), grpc.ServerCredentials)
    assert isinstance(g.channel_credentials(), grpc.ChannelCredentials)
    before = g._chain
    shutil.copy(f"{certs.dir}/node2.pem", live / "node.pem")
    assert not g.reload(), "a certificate without its key must not be taken"
    assert g._chain == before
    shutil.copy(f"{certs.dir}/node2.key", live / "node.key")
    assert g.reload()
    assert g._chain == (live / "node.pem").read_bytes() != before


def test_is_tls_failure_tells_refusals_from_cut_connections():
    """Details as gRPC 1.85 gives them (measured against real servers and a proxy)."""
    from raftlog.transport.security import is_tls_failure

    head = "failed to connect to all addresses; last error: "
    refusals = [
        "UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL:"
        " error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
        "UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL:"
        " error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER",  # plaintext peer
        "UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed",  # TLS 1.3: the peer refused our cert
    ]
    not_tls = [
        "UNAVAILABLE: ipv4:127.0.0.1:1: Handshake read failed "
        "(recvmsg:Connection reset by peer (104))",  # a proxy cut it before the handshake
        "UNAVAILABLE: ipv4:127.0.0.1:1: Handshake read failed (Socket closed)",
        "UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused",
    ]
    assert [is_tls_failure(head + d) for d in refusals] == [True] * len(refusals)
    assert [is_tls_failure(head + d) for d in not_tls] == [False] * len(not_tls)
