"""`raftsink chaos --secure`: the campaign's cluster with every security feature on.

- TLS on every listener: Kafka (SASL_SSL), the read API (mutual TLS: the campaign's readers
  present a client certificate) and the Raft transport (mutual TLS between nodes, through
  the fault proxy, which forwards TCP bytes and never sees plaintext);
- SASL with SCRAM-SHA-512 for every Kafka client of the campaign (bootstrap users, written
  through the log by the first leader);
- authorization ON (`raftsink serve`'s default). The workload runs as `User:chaos`, an
  ordinary principal with ACLs only for what it does (so every produce, fetch, ListOffsets
  and Metadata of the campaign goes through the authorizer, on every node, through every
  fault); `User:admin` is the only super user, used once to write those ACLs (and as the
  relay user a follower logs in as when it relays a request to the leader).

Certificates are made by scripts/make-certs.sh into CLUSTER_DIR/certs (a throw-away CA);
they name 127.0.0.1, which is what every node and client dials (the proxy ports included).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKE_CERTS = os.path.join(ROOT, "scripts", "make-certs.sh")
MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
WORKLOAD_USER = "chaos"
GROUP_PREFIX = "chaos-"
"""Every consumer group of the workload starts with this (workload.py: chaos-consumer-K,
chaos-hw-watch, ...): one PREFIXED ACL covers them all."""


@dataclass(frozen=True)
class SecureSetup:
    certs: str
    """Directory of ca.pem and NAME.pem/NAME.key (node1..nodeN, client)."""
    admin_password: str
    workload_password: str

    @classmethod
    def make(cls, base_dir: str, n: int) -> SecureSetup:
        """A fresh CA and pairs for node1..nodeN and the client; random passwords."""
        certs = os.path.join(base_dir, "certs")
        names = [f"node{i}" for i in range(1, n + 1)] + ["client"]
        subprocess.run(["bash", MAKE_CERTS, certs, *names], check=True, capture_output=True)
        setup = cls(certs, os.urandom(12).hex(), os.urandom(12).hex())
        # admin first: the relay user defaults to the first bootstrap user. A file (0600),
        # not a flag: passwords stay out of `ps`.
        fd = os.open(setup.path("users.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{ADMIN_USER}:{setup.admin_password}\n")
            f.write(f"{WORKLOAD_USER}:{setup.workload_password}\n")
        return setup

    def path(self, name: str) -> str:
        return os.path.join(self.certs, name)

    # ----------------------------------------------------------- nodes

    def node_args(self) -> list[str]:
        """Flags of every node (the pair is per node: node_pair_args)."""
        return [
            "--tls-ca-file",
            self.path("ca.pem"),
            "--tls-kafka",
            "--tls-read-api",
            "--tls-raft",
            "--sasl-enabled",
            "--sasl-mechanisms",
            MECHANISM,
            "--sasl-bootstrap-users-file",
            self.path("users.txt"),
            "--authorization-enabled",
            "true",
            "--authorization-super-users",
            f"User:{ADMIN_USER}",
        ]

    def node_pair_args(self, i: int) -> list[str]:
        cert, key = self.path(f"node{i}.pem"), self.path(f"node{i}.key")
        return ["--tls-cert-file", cert, "--tls-key-file", key]

    def read_api_credentials(self) -> Any:
        from sink.readapi.client import tls_credentials

        return tls_credentials(
            self.path("ca.pem"), self.path("client.pem"), self.path("client.key")
        )

    # ----------------------------------------------------------- Kafka clients

    def kafka_conf(self, user: str = WORKLOAD_USER) -> dict[str, str]:
        """librdkafka settings of a SASL_SSL client logged in as `user`."""
        password = self.admin_password if user == ADMIN_USER else self.workload_password
        return {
            "security.protocol": "sasl_ssl",
            "ssl.ca.location": self.path("ca.pem"),
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
        }

    def grant_workload(self, bootstrap: str, nodes: list[str], topic: str, timeout: float) -> None:
        """As the admin: ACLs for the workload principal (ALL on the topic, which covers
        its auto-creation, WRITE, READ and DESCRIBE; ALL on the groups `chaos-*`;
        IDEMPOTENT_WRITE on the cluster), then wait until every node has applied them
        (each node authorizes from its own applied state): the workload user sees the
        topic's metadata on each node alone. Bootstrap users are applied through the log
        first, so logins are retried until the deadline."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        principal = f"User:{WORKLOAD_USER}"
        allow = AclPermissionType.ALLOW
        bindings = [
            AclBinding(
                ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                AclOperation.ALL, allow,
            ),
            AclBinding(
                ResourceType.GROUP, GROUP_PREFIX, ResourcePatternType.PREFIXED, principal,
                "*", AclOperation.ALL, allow,
            ),
            AclBinding(
                ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal,
                "*", AclOperation.IDEMPOTENT_WRITE, allow,
            ),
        ]  # fmt: skip
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        admin = AdminClient({"bootstrap.servers": bootstrap, **self.kafka_conf(ADMIN_USER)})
        while True:
            try:
                for fut in admin.create_acls(bindings, request_timeout=10).values():
                    fut.result()
                break
            except KafkaException as exc:  # not logged in yet, no leader yet
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not create the workload's ACLs: {last}")
            time.sleep(0.5)
        for node in nodes:
            client = AdminClient({"bootstrap.servers": node, **self.kafka_conf()})
            while True:
                try:
                    md = client.list_topics(topic, timeout=5)  # auto-creates it
                    t = md.topics.get(topic)
                    if t is not None and t.error is None:
                        break
                    last = RuntimeError(f"{node}: {t.error if t else 'no topic'}")
                except KafkaException as exc:
                    last = exc
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node} does not authorize the workload yet: {last}")
                time.sleep(0.3)
