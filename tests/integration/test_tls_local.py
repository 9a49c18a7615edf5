"""`raftsink local --secure`: a local 3-node cluster with TLS everywhere, as a user runs it.

The command makes its own CA, prints the client settings and the bootstrap servers;
a confluent-kafka producer and consumer with those settings round-trip records,
`raftsink status --cluster` reads every node over the TLS read API, and Ctrl-C
(SIGINT) stops it all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402, F401  (ck.admin.AdminClient)


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, path.read_text())
        if m:
            return m
        assert proc.poll() is None, path.read_text()
        time.sleep(0.1)  # polling a file for a condition, with a deadline
    raise TimeoutError(f"{pattern!r} not in {path} after {timeout} s: {path.read_text()}")


def test_local_secure_cluster_round_trip(tmp_path):
    data = tmp_path / "local"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sink.cli", "local", "--secure", "--data-dir", str(data)],
            stdout=o,
            stderr=e,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
    try:
        _wait_for(err, r"nodes up", proc, 180)
        m = _wait_for(err, r"security\.protocol=ssl (\S+) (\S+) (\S+)", proc, 5)
        conf = dict(kv.split("=", 1) for kv in m.groups())
        conf["security.protocol"] = "ssl"
        bootstrap = out.read_text().split()[0]
        p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **conf})
        for i in range(10):
            p.produce("local-secure", value=b"v%d" % i)
        assert p.flush(60) == 0
        c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "g",
                "auto.offset.reset": "earliest",
                **conf,
            }
        )
        c.subscribe(["local-secure"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        c.close()
        assert got == [b"v%d" % i for i in range(10)]
        # Plaintext clients are not served.
        plain = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
        with pytest.raises(ck.KafkaException):
            plain.list_topics(timeout=5)
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "sink.cli",
                "status",
                "--json",
                "--cluster",
                f"{data}/cluster.json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        sts = json.loads(status.stdout)
        assert len(sts) == 3 and all("error" not in st for st in sts.values()), sts
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.read_text()
