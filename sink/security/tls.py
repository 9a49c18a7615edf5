"""TLS settings and contexts of a node: Kafka listeners, read API, Raft transport.

One certificate/key pair (the node's) and one CA bundle (the cluster's) serve every
listener; each listener turns TLS on or off by itself:

    kafka      asyncio listener(s) with an ssl.SSLContext (`KafkaContext`)
    read_api   gRPC server credentials (grpc.dynamic_ssl_server_credentials) and the
               node's own client credentials for forwarding to the leader
    raft       mutual TLS: a peer must present a certificate of the cluster CA, and
               this node presents its own (`GrpcTls`, passed to raftlog's transport)

Invariants:
- TLS >= 1.2 everywhere; ciphers are ssl.create_default_context's (Kafka) and gRPC's
  own defaults (BoringSSL), never widened here.
- Reload (SIGHUP, `reload()`) reads the files again and swaps the contexts whole: a
  connection or handshake in progress keeps the context it started with; new ones get
  the new files. A reload that fails (missing file, key not matching the certificate)
  keeps the previous context and says why: a bad rotation never takes a listener down.

This module imports only the standard library and grpc (no sink module): sink.config
embeds `TlsOptions` and connectors could use it without the server.
"""

from __future__ import annotations

import logging
import ssl
import threading
from dataclasses import dataclass
from typing import Any

import grpc

log = logging.getLogger("sink.security.tls")

CLIENT_AUTH = ("none", "optional", "required")


class TlsConfigError(ValueError):
    """A TLS setting is missing or invalid; the message names the key (tls.x)."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    cert_file: str = ""
    """PEM certificate chain of this node (leaf first), presented by every TLS listener and,
    for mutual TLS, by the node as a client (Raft transport, read-API forwarding)."""
    key_file: str = ""
    """PEM private key of tls.cert_file (unencrypted; keep it readable by the node only)."""
    ca_file: str = ""
    """PEM CA bundle that client and peer certificates must chain to (the cluster CA);
    also what this node trusts when it connects to a peer."""
    kafka: bool = False
    """TLS on the Kafka listener(s) (security.protocol=SSL for clients)."""
    kafka_client_auth: str = "none"
    """Client certificates on the Kafka listener(s): "none", "optional" (checked when
    presented) or "required" (mutual TLS; needs tls.ca_file)."""
    read_api: bool = False
    """TLS on the read API (gRPC: connectors, `raftsink status`, forwarding between nodes)."""
    read_api_client_auth: str = "required"
    """Client certificates on the read API: "none", "optional" or "required" (a
    connector then needs raftsink.ssl.certfile/keyfile of the cluster CA)."""
    raft: bool = False
    """Mutual TLS on the Raft transport: a peer must present a certificate of tls.ca_file
    (always required between nodes); a node with another CA's certificate is refused."""

    def __post_init__(self) -> None:
        for name in ("kafka_client_auth", "read_api_client_auth"):
            if getattr(self, name) not in CLIENT_AUTH:
                raise TlsConfigError(
                    f"tls.{name} must be one of {', '.join(CLIENT_AUTH)}, "
                    f"got {getattr(self, name)!r}"
                )
        if not self.enabled:
            return
        if not self.cert_file or not self.key_file:
            raise TlsConfigError("tls.cert_file and tls.key_file are required when TLS is on")
        needs_ca = (
            self.raft
            or (self.kafka and self.kafka_client_auth != "none")
            or (self.read_api and self.read_api_client_auth != "none")
        )
        if needs_ca and not self.ca_file:
            raise TlsConfigError(
                "tls.ca_file is required with tls.raft or a client_auth other than none"
            )

    @property
    def enabled(self) -> bool:
        return self.kafka or self.read_api or self.raft


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def server_context(opts: TlsOptions, client_auth: str) -> ssl.SSLContext:
    """A server-side context: the node's certificate, TLS >= 1.2, default ciphers,
    client certificates as client_auth says. Raises ssl.SSLError / OSError on bad files."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(opts.cert_file, opts.key_file)
    if opts.ca_file:
        ctx.load_verify_locations(cafile=opts.ca_file)
    ctx.verify_mode = {
        "none": ssl.CERT_NONE,
        "optional": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[client_auth]
    return ctx


def client_context(
    ca_file: str, cert_file: str = "", key_file: str = "", check_hostname: bool = True
) -> ssl.SSLContext:
    """A client-side context (tests, tools): trust ca_file, present cert_file if given."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx


class KafkaContext(ssl.SSLContext):
    """The Kafka listener's SSLContext, whose certificates can be swapped while serving.

    asyncio (and uvloop) call `wrap_bio` once per accepted connection; this context
    delegates it to the current inner context, so after `reload()` new connections
    use the new files and open ones keep theirs. Build it with `KafkaContext.of`."""

    _inner: ssl.SSLContext
    _opts: TlsOptions
    forward: ssl.SSLContext
    """This node as a client of the leader's Kafka listener (sink.kafka.forward): trusts
    tls.ca_file (else the system roots) and presents the node's own certificate."""

    @classmethod
    def of(cls, opts: TlsOptions) -> KafkaContext:
        self = cls(ssl.PROTOCOL_TLS_SERVER)
        self._opts = opts
        self._inner, self.forward = self._build()
        return self

    def _build(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        opts = self._opts
        server = server_context(opts, opts.kafka_client_auth)
        forward = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=opts.ca_file or None)
        forward.minimum_version = ssl.TLSVersion.TLSv1_2
        forward.load_cert_chain(opts.cert_file, opts.key_file)
        return server, forward

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:  # type: ignore[override]
        return self._inner.wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        return self._inner.wrap_socket(*args, **kwargs)

    @property
    def inner(self) -> ssl.SSLContext:
        return self._inner

    def reload(self) -> bool:
        """Read the files again; True if the new context is in use (else the old stays)."""
        try:
            fresh, forward = self._build()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("tls.reload_failed listener=kafka keeping the old certificate: %r", exc)
            return False
        self._inner, self.forward = fresh, forward
        return True


def _key_pair(opts: TlsOptions) -> tuple[bytes, bytes]:
    """(private key, certificate chain) read together, so a reload sees one rotation."""
    key, chain = _read(opts.key_file), _read(opts.cert_file)
    # Fail here, not in a gRPC handshake thread: the key must match the certificate.
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        opts.cert_file, opts.key_file
    )
    return key, chain


class GrpcTls:
    """gRPC credentials of one node from TlsOptions, reloadable.

    server_credentials(): for the read API (client_auth as configured) or the Raft
    transport (require_client=True); grpc.dynamic_ssl_server_credentials asks
    `_fetch` on every new handshake, which hands over a new configuration once after
    each reload, so rotated certificates are served without a restart.
    channel_credentials(): this node as a client (CA + its own key pair): each new
    channel (a Raft sender reconnects, a forwarded read-API call) takes the current ones.

    Satisfies raftlog.transport's TransportSecurity protocol (duck-typed: raftlog
    imports nothing of sink)."""

    def __init__(self, opts: TlsOptions) -> None:
        self.opts = opts
        self._lock = threading.Lock()
        self._load()
        self._pending: dict[int, bool] = {}
        """id(fetcher) -> a reload happened since that server's last handshake."""

    def _load(self) -> None:
        key, chain = _key_pair(self.opts)
        ca = _read(self.opts.ca_file) if self.opts.ca_file else None
        with self._lock:
            self._key, self._chain, self._ca = key, chain, ca

    def reload(self) -> bool:
        """Read the files again; True if in use (a failure keeps the old ones, logged)."""
        try:
            self._load()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("tls.reload_failed listener=grpc keeping the old certificate: %r", exc)
            return False
        with self._lock:
            for k in self._pending:
                self._pending[k] = True
        return True

    def _config(self) -> Any:
        with self._lock:
            return grpc.ssl_server_certificate_configuration(
                [(self._key, self._chain)], root_certificates=self._ca
            )

    def server_credentials(self, require_client: bool = True) -> grpc.ServerCredentials:
        marker = len(self._pending)
        self._pending[marker] = False

        def fetch() -> Any:
            # Runs in gRPC's handshake path: no I/O, only a flag and a lock.
            with self._lock:
                due = self._pending.get(marker, False)
                self._pending[marker] = False
            return self._config() if due else None

        return grpc.dynamic_ssl_server_credentials(
            self._config(), fetch, require_client_authentication=require_client
        )

    def read_api_server_credentials(self) -> grpc.ServerCredentials:
        # gRPC has no "optional" mode with dynamic credentials beyond request/require:
        # "optional" and "none" both accept clients without certificates.
        return self.server_credentials(require_client=self.opts.read_api_client_auth == "required")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        with self._lock:
            return grpc.ssl_channel_credentials(
                root_certificates=self._ca, private_key=self._key, certificate_chain=self._chain
            )


class NodeTls:
    """Everything TLS of one node, built once from TlsOptions at start-up (bad files
    fail the start with a clear error) and reloaded as one on SIGHUP."""

    def __init__(self, opts: TlsOptions) -> None:
        self.opts = opts
        self.kafka: KafkaContext | None = KafkaContext.of(opts) if opts.kafka else None
        self.grpc: GrpcTls | None = GrpcTls(opts) if (opts.read_api or opts.raft) else None
        self.reloads = 0
        self.failed_reloads = 0

    def reload(self) -> bool:
        ok = True
        for part in (self.kafka, self.grpc):
            if part is not None:
                ok = part.reload() and ok
        if ok:
            self.reloads += 1
            log.warning("tls.reloaded cert=%s ca=%s", self.opts.cert_file, self.opts.ca_file)
        else:
            self.failed_reloads += 1
        return ok
