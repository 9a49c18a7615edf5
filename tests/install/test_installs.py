"""Installs that fit each user, tried as a user would: a fresh virtual environment, `pip
install` of this source tree (no editable install, no repo on sys.path), then the commands.

- base (no extras): only the server's dependencies arrive; `raftsink local` starts three
  node processes that serve a produce and a fetch (driven by a Kafka client of the test's
  own environment); the tools say which extra they need instead of failing part-way.
- [chaos]: a 20-second fault campaign writes its report and plot.

pip resolves from this machine's configured indexes and wheel cache (PIP_* settings of
the environment apply), with build isolation (setuptools>=77 comes from the index). Each
venv costs about 15 s (base) to 40 s ([chaos]); the campaign about 60 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a source tree copy leaves out: environments, caches, build products.
IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", "build", "*.so", ".pytest_cache", "bench"
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if res.returncode != 0:
        raise AssertionError(f"{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def make_venv(tmp: Path, extras: str = "") -> Path:
    """A fresh venv with raftsink[extras] installed from a copy of this tree; returns bin/."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    venv = tmp / "venv"
    t0 = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    spec = f"{src}[{extras}]" if extras else str(src)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", spec], timeout=480)
    print(f"venv with raftsink{f'[{extras}]' if extras else ''}: {time.monotonic() - t0:.1f} s")
    return venv / "bin"


def installed(bin_dir: Path) -> set[str]:
    out = _run([str(bin_dir / "python"), "-m", "pip", "list", "--format=json"], timeout=60)
    return {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("base"))


def test_base_install_has_only_the_server_dependencies(base_venv):
    have = installed(base_venv)
    assert {"raftsink", "grpcio", "lmdb", "kio", "protobuf"} <= have
    for heavy in ("pyspark", "pyarrow", "numpy", "matplotlib", "pytest", "testcontainers"):
        assert heavy not in have, f"{heavy} is in the base install"
    for client in ("confluent-kafka", "aiokafka"):
        assert client not in have, f"{client} is in the base install"


@pytest.mark.parametrize(
    ("command", "extra"), [(["chaos", "--seconds", "5"], "chaos"), (["demo"], "demo")]
)
def test_a_tool_without_its_extra_names_the_extra(base_venv, tmp_path, command, extra):
    res = subprocess.run(
        [str(base_venv / "raftsink"), *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert res.returncode == 2, res
    assert f"pip install 'raftsink[{extra}]'" in res.stderr
    assert list(tmp_path.iterdir()) == [], "the tool started work before checking its extra"


@pytest.mark.crash
def test_base_install_serves_a_produce_and_a_fetch(base_venv, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    data = tmp_path / "cluster"
    proc = subprocess.Popen(
        [str(base_venv / "raftsink"), "local", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # not the repo: the venv's own installed packages only
        start_new_session=True,
    )
    try:
        bootstrap = proc.stdout.readline().strip()  # printed once the cluster has a leader
        assert bootstrap, f"raftsink local printed nothing; stderr: {proc.stderr.read()}"
        topic = f"plain-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        delivered: list[object] = []
        values = [f"v{i}".encode() for i in range(20)]
        for v in values:
            producer.produce(topic, v, on_delivery=lambda err, msg: delivered.append(err or msg))
        assert producer.flush(60) == 0
        assert all(not isinstance(d, Exception) and d.error() is None for d in delivered)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])  # the node serves no group joins
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert got == values
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()


@pytest.mark.crash
def test_chaos_extra_runs_a_campaign_with_report_and_plot(tmp_path):
    bin_dir = make_venv(tmp_path, "chaos")
    assert {"matplotlib", "confluent-kafka", "aiokafka"} <= installed(bin_dir)
    seed = int(os.environ.get("RAFTSINK_CHAOS_SEED", "7"))
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = subprocess.run(
        [
            str(bin_dir / "raftsink"),
            "chaos",
            "--seconds",
            "10",
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--drop-data",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    print(f"seed={seed}; campaign took {time.monotonic() - t0:.1f} s\n{res.stdout}")
    assert res.returncode in (0, 3), f"rc={res.returncode}\n{res.stdout}\n{res.stderr}"
    report = json.loads((out / "report.json").read_text())
    assert report["anomaly_count"] == 0, report["anomalies"]
    assert not report["crashes"], report["crashes"]
    assert (out / "summary.txt").stat().st_size > 0
    assert (out / "plot.png").stat().st_size > 10_000
