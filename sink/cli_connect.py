"""How the admin commands reach a cluster: one set of connection flags and one reader
of them, shared by `raftsink acl`, `users`, `quotas` (Kafka protocol: SASL and TLS)
and `raftsink members`, `status` (read API: TLS).

Kafka flags (add_kafka_args):
    --bootstrap-servers HOST:PORT,...  or --cluster FILE (cluster.json of `raftsink local`)
    --sasl-user U, password in RAFTSINK_SASL_PASSWORD or --sasl-password-file FILE,
    --sasl-mechanism (default SCRAM-SHA-512)
    --tls, --tls-ca-file CA, --tls-cert-file CERT --tls-key-file KEY (client certificate)
Read API flags (add_read_api_args): --tls-ca-file, --tls-cert-file, --tls-key-file.
A cluster.json with a "tls" entry (`raftsink local --secure`) supplies the TLS files
when no flag does.

The Kafka connection is set for the command's run in sink.kafka.admin's ADMIN_CONNECTION
context variable, so every admin request of the command (sink.kafka.admin.request) uses
it without each admin function taking it.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import ssl
from typing import Any

from sink.config import parse_hostport
from sink.security.sasl import ALL_MECHANISMS
from sink.security.sasl_client import Login

READ_API_CREDENTIALS: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "raftsink_read_api_credentials", default=None
)
"""The read API's gRPC channel credentials for the running command (None: plaintext)."""


def _add_tls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca-file", help="CA bundle the cluster's certificates chain to")
    p.add_argument("--tls-cert-file", help="client certificate (mutual TLS)")
    p.add_argument("--tls-key-file", help="the client certificate's key")


def add_kafka_args(p: argparse.ArgumentParser, cluster_file_flag: str = "--cluster") -> None:
    """cluster_file_flag: the flag naming cluster.json (`raftsink acl` keeps --cluster
    for the CLUSTER resource, as kafka-acls.sh has it)."""
    p.add_argument("--bootstrap-servers", help="Kafka addresses HOST:PORT,...")
    p.add_argument(
        cluster_file_flag, dest="cluster", help="cluster.json written by `raftsink local`"
    )
    p.add_argument("--sasl-user", help="log in as this user (a cluster that requires SASL)")
    p.add_argument("--sasl-password-file", help="file holding --sasl-user's password")
    p.add_argument("--sasl-mechanism", default="SCRAM-SHA-512", choices=ALL_MECHANISMS)
    p.add_argument("--tls", action="store_true", help="TLS to the Kafka listeners")
    _add_tls_args(p)


def add_read_api_args(p: argparse.ArgumentParser) -> None:
    _add_tls_args(p)


def read_first_line(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\r\n")


def _cluster_file(args: argparse.Namespace) -> dict:
    if not getattr(args, "cluster", None):
        return {}
    with open(args.cluster) as f:
        return json.load(f)


def _tls_files(args: argparse.Namespace) -> tuple[str, str, str] | None:
    """(ca, cert, key) from the flags, else from cluster.json; None: no TLS asked."""
    ca, cert, key = args.tls_ca_file or "", args.tls_cert_file or "", args.tls_key_file or ""
    if bool(cert) != bool(key):
        raise ValueError("--tls-cert-file and --tls-key-file go together")
    if ca or cert or getattr(args, "tls", False):
        return ca, cert, key
    tls = _cluster_file(args).get("tls")
    if tls:
        return tls["ca"], tls["cert"], tls["key"]
    return None


def bootstrap(args: argparse.Namespace) -> list[tuple[str, int]]:
    data = _cluster_file(args)
    if data:
        servers = data["bootstrap_servers"]
    elif args.bootstrap_servers:
        servers = args.bootstrap_servers
    else:
        raise ValueError("give --bootstrap-servers HOST:PORT,... or --cluster FILE")
    return [parse_hostport("--bootstrap-servers", s.strip()) for s in servers.split(",")]


def login(args: argparse.Namespace) -> Login | None:
    if not args.sasl_user:
        return None
    if args.sasl_password_file:
        password = read_first_line(args.sasl_password_file)
    else:
        password = os.environ.get("RAFTSINK_SASL_PASSWORD", "")
    if not password:
        raise ValueError("--sasl-user needs RAFTSINK_SASL_PASSWORD or --sasl-password-file")
    return Login(args.sasl_mechanism, args.sasl_user, password)


def ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    files = _tls_files(args)
    if files is None:
        return None
    ca, cert, key = files
    ctx = ssl.create_default_context(cafile=ca or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def use_kafka_connection(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Read the Kafka flags, set the connection for this command's admin requests;
    returns the bootstrap addresses (ValueError/OSError on bad flags or files)."""
    from sink.kafka.admin import ADMIN_CONNECTION

    addresses = bootstrap(args)
    ADMIN_CONNECTION.set((ssl_context(args), login(args)))
    return addresses


def use_read_api_connection(args: argparse.Namespace) -> Any:
    """Read the TLS flags, set READ_API_CREDENTIALS; returns the credentials."""
    files = _tls_files(args)
    creds = None
    if files is not None:
        from sink.readapi.client import tls_credentials

        creds = tls_credentials(*files)
    READ_API_CREDENTIALS.set(creds)
    return creds
