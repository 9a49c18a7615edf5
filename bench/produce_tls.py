"""bench/produce.py --tls: the same raftsink workload against a plaintext cluster, a
cluster with TLS on the Kafka listener only and a TLS-everywhere cluster in one run
(see bench/produce.py's docstring), with each process's CPU per record split by thread
kind (from /proc/<pid>/task) and the client's (kcat, a reaped child)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

from bench.common import CpuMeter, loadavg, machine, print_targets
from bench.kafka_load import (
    PARTITIONS,
    ensure_debian_packages,
    kafka_latency,
    kcat_throughput,
    total_records,
)
from sink.process_cluster import SinkProcessCluster

TLS_LAYOUTS = {
    "plaintext": [],
    "tls-kafka": ["--tls-kafka", "--tls-kafka-client-auth", "required"],
    "tls": [
        "--tls-kafka", "--tls-kafka-client-auth", "required", "--tls-read-api", "--tls-raft",
    ],
}  # fmt: skip
"""The --tls phases: what each cluster encrypts. tls-kafka (the Kafka listener only,
Raft and the read API in plaintext) splits TLS's cost between the client-facing
listener and the node-to-node transport; tls (everywhere) is what the targets judge."""


def thread_ticks(pid: int) -> dict[str, int]:
    """CPU ticks (utime+stime) of one process's threads so far, summed per thread kind:
    "loop" (the main thread: the asyncio loop, the Kafka listener and its TLS record
    layer), else the thread's name from /proc (grpc's C threads: event_engine,
    grpc_global_tim; uvloop's libuv-worker; "python" for Python threads, e.g. gRPC's
    Python server pool and the storage threads). A thread that ended is not counted."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        name = "loop" if int(tid) == pid else head.split("(", 1)[1]
        fields = rest.split()
        out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
    return out


class ThreadSplit:
    """Per process and per thread kind CPU between enter and exit (see thread_ticks),
    plus the CPU of the children this process reaps meanwhile (the client: kcat)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids  # role ("leader", "follower-2", ...) -> pid
        self.split: dict[str, dict[str, float]] = {}
        self.client_s = 0.0

    def __enter__(self) -> ThreadSplit:
        self._t0 = {role: thread_ticks(pid) for role, pid in self.pids.items()}
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._c0 = ru.ru_utime + ru.ru_stime
        return self

    def __exit__(self, *exc: object) -> None:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.client_s = ru.ru_utime + ru.ru_stime - self._c0
        ticks = os.sysconf("SC_CLK_TCK")
        for role, pid in self.pids.items():
            now, before = thread_ticks(pid), self._t0[role]
            self.split[role] = {
                k: (v - before.get(k, 0)) / ticks
                for k, v in sorted(now.items())
                if v - before.get(k, 0) > 0
            }

    def per_record_us(self, records: int) -> dict[str, dict[str, float]]:
        """{role: {thread kind: us per record}} with each role's "total", and the client's."""
        out: dict[str, dict[str, float]] = {}
        for role, kinds in self.split.items():
            row = {k: round(v / records * 1e6, 2) for k, v in kinds.items()}
            row["total"] = round(sum(kinds.values()) / records * 1e6, 2)
            out[role] = row
        out["client"] = {"total": round(self.client_s / records * 1e6, 2)}
        return out


def _print_split(label: str, split: dict[str, dict[str, float]]) -> None:
    print(f"  {label:>9}  CPU per 1 KiB record (us), per process and thread:")
    for role, row in split.items():
        kinds = " ".join(f"{k}={v:.2f}" for k, v in row.items() if k != "total")
        print(f"  {'':>9}    {role:<11} {row['total']:>6.2f}  {kinds}")


def _tls_phase(label: str, base: str, count: int, lat_seconds: float, certs: str) -> dict:
    """One cluster (TLS_LAYOUTS[label] says what is encrypted): 1 KiB throughput with
    kcat (with the per-process, per-thread CPU split), then p50/p99 at 1,000 records/s
    with confluent-kafka."""
    from sink.readapi.client import tls_credentials

    layout = TLS_LAYOUTS[label]
    extra, conf, creds = list(layout), {}, None
    if layout:
        extra = ["--tls-ca-file", f"{certs}/ca.pem", *layout]
        conf = {
            "security.protocol": "ssl",
            "ssl.ca.location": f"{certs}/ca.pem",
            "ssl.certificate.location": f"{certs}/client.pem",
            "ssl.key.location": f"{certs}/client.key",
        }
    if "--tls-read-api" in layout:
        creds = tls_credentials(f"{certs}/ca.pem", f"{certs}/client.pem", f"{certs}/client.key")
    cluster = SinkProcessCluster(
        os.path.join(base, label),
        default_partitions=PARTITIONS,
        extra_args=extra,
        read_api_credentials=creds,
    )
    if layout:
        for i, n in cluster.nodes.items():
            n.extra_args += ["--tls-cert-file", f"{certs}/node{i}.pem"]
            n.extra_args += ["--tls-key-file", f"{certs}/node{i}.key"]
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready(120))
        pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
        roles = {
            ("leader" if i == leader else f"follower-{i}"): n.proc.pid
            for i, n in sorted(cluster.nodes.items())
            if n.proc is not None
        }
        with CpuMeter(pids) as cpu, ThreadSplit(roles) as threads:
            r = kcat_throughput(cluster.bootstrap_servers, "bench-1k", 1024, count, base, conf)
        stored = asyncio.run(total_records(cluster.peers[1].read_api, "bench-1k", creds))
        if stored != r["records"]:
            raise RuntimeError(f"{r['records']} records delivered but {stored} stored")
        asyncio.run(cluster.wait_settled())
        lat = kafka_latency(cluster.bootstrap_servers, "bench-lat", 100, 1000, lat_seconds, conf)
        if lat["errors"]:
            raise RuntimeError(f"{lat['errors']} delivery errors in the latency phase")
    finally:
        cluster.stop()
    out = {
        "records_per_s": r["records_per_s"],
        "mb_s": r["mb_s"],
        "cpu_us_per_record": cpu.cpu_s / r["records"] * 1e6,
        "p50_ms": lat["p50_ms"],
        "p99_ms": lat["p99_ms"],
        "cpu_split_us": threads.per_record_us(r["records"]),
    }
    print(
        f"  {label:>9}: 1 KiB {out['records_per_s']:>8.0f} records/s {out['mb_s']:>6.1f} MB/s "
        f"({r['records']} records, {out['cpu_us_per_record']:.1f} us CPU/record); "
        f"at 1,000/s p50 {out['p50_ms']:.2f} ms p99 {out['p99_ms']:.2f} ms"
    )
    _print_split(label, out["cpu_split_us"])
    sys.stdout.flush()
    return out


def main_tls(quick: bool) -> int:
    ensure_debian_packages("kcat")
    count = 100_000 if quick else 300_000
    lat_seconds = 5.0 if quick else 20.0
    base = tempfile.mkdtemp(prefix="rs-bench-tls-")
    print(f"machine: {machine()}")
    print(
        f"mode: {'quick' if quick else 'full'}, --tls; 3 processes, fsync on, {PARTITIONS} partitions"
    )
    print(f"load average before: {loadavg()}")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
    certs = os.path.join(base, "certs")
    subprocess.run(
        ["bash", os.path.join(script, "make-certs.sh"), certs], check=True, capture_output=True
    )
    try:
        ph = {label: _tls_phase(label, base, count, lat_seconds, certs) for label in TLS_LAYOUTS}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average after: {loadavg()}")
    plain, kafka_only, tls = ph["plaintext"], ph["tls-kafka"], ph["tls"]
    fig = {
        "mode": ("quick" if quick else "full") + "-tls",
        "records_per_s_1k": round(plain["records_per_s"]),
        "tls_kafka_records_per_s_1k": round(kafka_only["records_per_s"]),
        "tls_records_per_s_1k": round(tls["records_per_s"]),
        "p99_ms": round(plain["p99_ms"], 2),
        "tls_p99_ms": round(tls["p99_ms"], 2),
        "tls_throughput_ratio_1k": round(tls["records_per_s"] / plain["records_per_s"], 3),
        "tls_p99_ratio": round(tls["p99_ms"] / plain["p99_ms"], 3),
        "tls_cpu_ratio_1k": round(tls["cpu_us_per_record"] / plain["cpu_us_per_record"], 3),
        "tls_kafka_throughput_ratio_1k": round(
            kafka_only["records_per_s"] / plain["records_per_s"], 3
        ),
        "cpu_us_per_record_1k": {k: round(v["cpu_us_per_record"], 2) for k, v in ph.items()},
        "cpu_split_us": {k: v["cpu_split_us"] for k, v in ph.items()},
    }
    print_targets(
        {
            "TLS throughput ratio >= 0.7 (1 KiB)": fig["tls_throughput_ratio_1k"] >= 0.7,
            "TLS p99 ratio <= 1.5": fig["tls_p99_ratio"] <= 1.5,
        }
    )
    print(json.dumps(fig))
    return 0
