"""`raftsink local --authorization`: a local cluster that checks ACLs, as an operator runs it.

The command prints a super user (`admin`, a fresh password) and the client settings; the
admin produces and reads; `raftsink users create` (logged in as the admin through
cluster.json and DATA_DIR/admin.password) makes `bob`, who is refused on the topic
(TOPIC_AUTHORIZATION_FAILED, nothing written) until `raftsink acl add` allows him; a client
without SASL is refused; Ctrl-C stops it all.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.sasl_tools import until

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402, F401  (ck.admin.AdminClient)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "local-authz"


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, path.read_text())
        if m:
            return m
        assert proc.poll() is None, path.read_text()
        time.sleep(0.1)  # polling a file for a condition, with a deadline
    raise TimeoutError(f"{pattern!r} not in {path} after {timeout} s: {path.read_text()}")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sink.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def _produce(conf: dict, value: bytes) -> str | None:
    """One record to TOPIC partition 0: None when acknowledged, else the error's name."""
    p = ck.Producer({**conf, "message.timeout.ms": 15_000, "retries": 0})
    result: list[str | None] = []
    p.produce(TOPIC, value, partition=0, on_delivery=lambda e, m: result.append(e and e.name()))
    p.flush(30)
    assert len(result) == 1, "no delivery report"
    return result[0]


def test_local_authorization_super_user_and_acls(tmp_path):
    data = tmp_path / "local"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sink.cli", "local", "--authorization", "--data-dir", str(data)],
            stdout=o,
            stderr=e,
            cwd=ROOT,
        )
    try:
        _wait_for(err, r"nodes up", proc, 180)
        m = _wait_for(
            err,
            r"super user User:admin \(password in (\S+)\); clients: security\.protocol=(\S+) "
            r"sasl\.mechanism=(\S+) sasl\.username=(\S+) sasl\.password=(\S+)",
            proc,
            5,
        )
        password_file, protocol, mechanism, user, password = m.groups()
        assert Path(password_file).read_text().strip() == password
        assert os.stat(password_file).st_mode & 0o077 == 0, "the password file is private"
        bootstrap = out.read_text().split()[0]
        admin = {
            "bootstrap.servers": bootstrap,
            "security.protocol": protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
        # The bootstrap user reaches every node through the log: the first login may wait.
        until(lambda: _produce(admin, b"admin-0") is None, 60, "the admin to produce")

        # A second user, made with the CLI logged in as the printed super user.
        login = ["--cluster", f"{data}/cluster.json", "--sasl-user", "admin"]
        login += ["--sasl-password-file", password_file]
        r = _cli("users", "create", "bob", *login, env={"RAFTSINK_USER_PASSWORD": "bob-pw"})
        assert r.returncode == 0, r.stderr
        bob = {**admin, "sasl.username": "bob", "sasl.password": "bob-pw"}
        # bob logs in (once his user reached the node) but has no ACL: refused.
        denied = "TOPIC_AUTHORIZATION_FAILED"
        until(lambda: _produce(bob, b"probe") == denied, 90, "bob to be refused on the topic")
        assert _produce(bob, b"bob-0") == denied

        # Without SASL there is no login at all.
        plain = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
        with pytest.raises(ck.KafkaException):
            plain.list_topics(timeout=5)

        r = _cli(
            "acl", "add", "--allow-principal", "User:bob", "--operation", "WRITE",
            "--topic", TOPIC, "--cluster-file", f"{data}/cluster.json",
            "--sasl-user", "admin", "--sasl-password-file", password_file,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        # Each node authorizes from its own applied state: it may take a round to reach all.
        until(lambda: _produce(bob, b"bob-1") is None, 60, "bob to produce once allowed")

        # What was written: the admin's records and bob's allowed ones, never bob-0.
        c = ck.Consumer({**admin, "group.id": "g", "auto.offset.reset": "earliest"})
        c.assign([ck.TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while b"bob-1" not in got and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        c.close()
        assert b"admin-0" in got and b"bob-1" in got, got
        assert b"bob-0" not in got and b"probe" not in got, got
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.read_text()
