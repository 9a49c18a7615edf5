"""Produce benchmark: Kafka clients into a 3-node raftsink cluster (fsync on)
against NATS JetStream (3 nodes, replicas=3, file storage) in the same run.

raftsink (docs/performance.md explains every figure):
- throughput: kcat (librdkafka, idempotent, acks=all) writes N records of 100 B and
  1 KiB over several partitions: records/s and MB/s from start to the last delivery;
- then, once every node has caught up, one idempotent acks=all confluent-kafka
  producer with the client's defaults (linger.ms 5, its batching; the same settings
  in every phase) at 1,000 records/s of 100 B, open loop (send times scheduled in
  advance, latency from the scheduled time: no coordinated omission): p50/p99/p99.9,
  and the 3 nodes' CPU from /proc (utime+stime), the idle cluster's CPU over the same
  time subtracted, per acknowledged record and per Produce request;
- the same producer's closed-loop maximum, then open loop at 25/50/75% of it;
- a per-stage CPU table of the leader and a follower at 1,000/s (the nodes run under
  bench/stage_profile.py, switched on for that phase only).
JetStream: nats-py publish_async with a window of 4,000, then 1,000 msgs/s open loop.
NOTE: nats-server 2.9 does not fsync per message (acks once a quorum has it in the
page cache).

    python bench/produce.py [--quick] [--no-jetstream]
    python bench/produce.py --cpu-only      # CPU per record at 1,000/s + stage table
    python bench/produce.py --tls [--quick]

BENCH_HOT_SPOTS=1 also samples the nodes' stacks and prints hot lines (biased
towards where the loop thread hands over the GIL: read the stage table for CPU).

--tls: the same raftsink workload (kcat 1 KiB throughput, confluent-kafka at 1,000
records/s) against a plaintext cluster, a cluster with TLS on the Kafka listener only
(tls-kafka), and a TLS-everywhere cluster (Kafka listener with client certificates,
mutual TLS between nodes, read API over TLS; throw-away certificates from
scripts/make-certs.sh) in the same run; no JetStream (the latency phase is the
open-loop one above, default linger). For the kcat phase it prints each process's
CPU per record split by thread (loop, gRPC event_engine, other Python threads) and
the client's, and the load average before and after. JSON: tls_throughput_ratio_1k
(TLS everywhere / plaintext records/s), tls_p99_ratio (TLS / plaintext p99),
tls_kafka_throughput_ratio_1k, cpu_split_us.

Needs the Debian packages kcat and nats-server (installed here if missing, as
root) and the pip package nats-py (dev extras). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import CpuMeter, loadavg, machine, percentile, print_targets
from stage_profile import PROFILE_ENV, SAMPLE_ENV, stage_table

from raftlog.process_cluster import free_ports
from sink.process_cluster import SinkProcessCluster
from sink.readapi import ReadApiClient

PARTITIONS = 4
MiB = 1024 * 1024


def ensure_debian_packages(*names: str) -> None:
    missing = [
        n for n in names if shutil.which({"nats-server": "nats-server", "kcat": "kcat"}[n]) is None
    ]
    if not missing:
        return
    print(f"installing {' '.join(missing)} (apt-get)", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(
        ["apt-get", "install", "-y", "-qq", *missing], env=env, capture_output=True
    ).returncode:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", *missing], env=env, check=True, capture_output=True
        )


# ------------------------------------------------------------------ raftsink


def kcat_throughput(
    bootstrap: str,
    topic: str,
    size: int,
    count: int,
    workdir: str,
    conf: dict[str, str] | None = None,
) -> dict:
    """kcat -P of `count` lines of `size` bytes, idempotent, acks=all; wall time to the last ack.
    conf: more librdkafka properties (e.g. security.protocol=ssl)."""
    path = os.path.join(workdir, f"lines-{size}-{count}.txt")
    line = (b"x" * (size - 8)) if size > 8 else b""
    with open(path, "wb") as f:
        chunk = b"".join(b"%08d" % (i % 10**8) + line + b"\n" for i in range(10_000))
        for _ in range(count // 10_000):
            f.write(chunk)
    args = [
        "kcat", "-P", "-b", bootstrap, "-t", topic, "-l", path,
        "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5",
        "-X", "batch.num.messages=10000", "-X", "batch.size=1000000",
        "-X", "queue.buffering.max.messages=2000000", "-X", "queue.buffering.max.kbytes=2097151",
        "-X", "partitioner=random",
    ]  # fmt: skip
    for k, v in (conf or {}).items():
        args += ["-X", f"{k}={v}"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    if proc.returncode != 0 or "ERROR" in proc.stderr:
        raise RuntimeError(f"kcat failed ({proc.returncode}): {proc.stderr[-2000:]}")
    n = (count // 10_000) * 10_000
    return {
        "records": n,
        "seconds": elapsed,
        "records_per_s": n / elapsed,
        "mb_s": n * size / elapsed / MiB,
    }


class _LoadProducer:
    """One idempotent acks=all confluent-kafka producer with the client's defaults
    (linger.ms 5, its batching): the same settings in every phase (issue 17: don't
    tune the client to win). Each value starts with its sequence number, so the one
    delivery callback finds the record's scheduled send time without a closure per
    record. librdkafka's statistics count the Produce requests it sent."""

    def __init__(self, bootstrap: str, conf: dict[str, str] | None = None) -> None:
        from confluent_kafka import Producer

        self.sched: list[float] = []
        self.lat: list[float] = []
        self.errors = 0
        self.delivered = 0
        self.last_delivery = 0.0
        self._stats: dict = {}
        self._stats_seen = threading.Event()
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "statistics.interval.ms": 500,
                "stats_cb": self._on_stats,
                "on_delivery": self._on_delivery,
                **(conf or {}),
            }
        )
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.p.poll(0.02)

    def _on_stats(self, text: str) -> None:
        self._stats = json.loads(text)
        self._stats_seen.set()

    def _on_delivery(self, err: object, msg: Any) -> None:
        now = time.perf_counter()
        if err is not None:
            self.errors += 1
            return
        self.delivered += 1
        self.last_delivery = now
        i = int(msg.value()[:8])
        if i < len(self.sched):
            self.lat.append(now - self.sched[i])

    def produce_requests(self) -> int:
        """Produce requests sent so far, from the latest statistics after this call."""
        self._stats_seen.clear()
        if not self._stats_seen.wait(5):
            raise TimeoutError("no librdkafka statistics within 5 s")
        return sum(
            b.get("req", {}).get("Produce", 0) for b in self._stats.get("brokers", {}).values()
        )

    def send(self, topic: str, value: bytes) -> None:
        while True:
            try:
                self.p.produce(topic, value)
                return
            except BufferError:  # the client's queue is full: wait for deliveries
                time.sleep(0.001)

    def reset(self) -> None:
        self.sched, self.lat, self.errors, self.delivered = [], [], 0, 0

    def flush(self, timeout: float = 120) -> None:
        left = self.p.flush(timeout)
        if left:
            raise RuntimeError(f"{left} records not delivered within {timeout} s")

    def close(self) -> None:
        self.flush()
        self._stop.set()
        self._poller.join()


def _value(i: int, size: int) -> bytes:
    return b"%08d" % (i % 10**8) + b"y" * (size - 8)


def open_loop(prod: _LoadProducer, topic: str, size: int, rate: float, seconds: float) -> dict:
    """Open loop, coordinated-omission-free (as the OpenMessaging Benchmark): send
    times are scheduled in advance at `rate`; a record's latency counts from its
    scheduled time, so a stall of the server (or of this sender) delays every record
    due meanwhile and shows in the tail instead of silently slowing the sender."""
    prod.reset()
    n = int(rate * seconds)
    tail = b"y" * (size - 8)
    sched = prod.sched = [0.0] * n
    requests0 = prod.produce_requests()
    start = time.perf_counter() + 0.01
    k = 0
    while k < n:
        now = time.perf_counter()
        due = start + k / rate
        if due > now:
            time.sleep(due - now)
            now = time.perf_counter()
        # Everything due by now goes out now, stamped with its own scheduled time.
        while k < n and start + k / rate <= now:
            sched[k] = start + k / rate
            prod.send(topic, b"%08d" % k + tail)
            k += 1
    prod.flush()
    wall = max(prod.last_delivery, time.perf_counter()) - start
    requests = prod.produce_requests() - requests0
    lat = prod.lat
    return {
        "rate": rate,
        "sent": n,
        "acked": prod.delivered,
        "errors": prod.errors,
        "requests": requests,
        "wall_s": wall,
        "p50_ms": percentile(lat, 0.5) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "p999_ms": percentile(lat, 0.999) * 1000,
    }


def closed_loop_max(prod: _LoadProducer, topic: str, size: int, seconds: float) -> float:
    """The most records/s this producer gets acknowledged (sending as fast as its
    queue takes them for `seconds`, then to the last delivery): the 100% of the
    25/50/75% load points."""
    prod.reset()
    value = _value(0, size)
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            prod.send(topic, value)
        n += 1000
    prod.flush()
    if prod.errors:
        raise RuntimeError(f"{prod.errors} delivery errors in the max-rate phase")
    return prod.delivered / (prod.last_delivery - t0)


def kafka_latency(
    bootstrap: str,
    topic: str,
    size: int,
    rate: float,
    seconds: float,
    conf: dict[str, str] | None = None,
) -> dict:
    """p50/p99/p99.9 at a fixed rate from a fresh producer (open loop; see open_loop)."""
    prod = _LoadProducer(bootstrap, conf)
    try:
        prod.send(topic, _value(0, size))  # warm-up: the idempotent PID handshake
        prod.flush(30)
        return open_loop(prod, topic, size, rate, seconds)
    finally:
        prod.close()


async def total_records(read_api: str, topic: str, credentials: object = None) -> int:
    c = ReadApiClient(read_api, credentials=credentials)  # type: ignore[arg-type]
    try:
        reply = await c.partitions([topic], linearizable=True)
        return sum(p.high_watermark - p.log_start_offset for p in reply.partitions)
    finally:
        await c.close()


async def total_records_any_replica(
    read_apis: list[str], topic: str, credentials: object = None
) -> int:
    """total_records over a cluster whose nodes each host only some partitions (partition
    groups with more nodes than replicas: a node answers -1 offsets for a partition it
    does not host): per partition, the most any node reports."""
    best: dict[int, int] = {}
    for addr in read_apis:
        c = ReadApiClient(addr, credentials=credentials)  # type: ignore[arg-type]
        try:
            reply = await c.partitions([topic], linearizable=True)
        finally:
            await c.close()
        for p in reply.partitions:
            if p.high_watermark >= 0 and p.log_start_offset >= 0:
                n = p.high_watermark - p.log_start_offset
                best[p.partition] = max(best.get(p.partition, 0), n)
    return sum(best.values())


# ------------------------------------------------------------------ JetStream


def start_nats(base: str) -> tuple[list[subprocess.Popen], list[str], list[int]]:
    ports = free_ports(9)
    client, route, monitor = ports[0:3], ports[3:6], ports[6:9]
    procs = []
    for i in range(3):
        d = os.path.join(base, f"nats{i}")
        os.makedirs(d, exist_ok=True)
        routes = ", ".join(f"nats-route://127.0.0.1:{route[j]}" for j in range(3) if j != i)
        conf = os.path.join(d, "nats.conf")
        with open(conf, "w") as f:
            f.write(
                f"server_name: n{i}\nlisten: 127.0.0.1:{client[i]}\nhttp: 127.0.0.1:{monitor[i]}\n"
                f'jetstream {{ store_dir: "{d}/js", max_file_store: 20G, max_memory_store: 1G }}\n'
                f"cluster {{ name: bench, listen: 127.0.0.1:{route[i]}, routes: [{routes}] }}\n"
            )
        procs.append(
            subprocess.Popen(
                ["nats-server", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
    return procs, [f"nats://127.0.0.1:{p}" for p in client], monitor


def wait_nats(monitor: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{monitor[0]}/jsz", timeout=2) as r:
                if json.load(r).get("meta_cluster", {}).get("leader"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("JetStream meta leader not elected")


async def nats_throughput(urls: list[str], size: int, seconds: float, subject: str) -> dict:
    import nats

    nc = await nats.connect(servers=urls)
    js = nc.jetstream(publish_async_max_pending=4000)
    await js.add_stream(name=subject.upper(), subjects=[subject], num_replicas=3, storage="file")
    payload = b"z" * size
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        await js.publish_async(subject, payload)
        n += 1
    await js.publish_async_completed()
    elapsed = time.perf_counter() - t0
    await nc.close()
    return {"records": n, "records_per_s": n / elapsed, "mb_s": n * size / elapsed / MiB}


async def nats_latency(
    urls: list[str], size: int, rate: float, seconds: float, subject: str
) -> dict:
    import nats

    nc = await nats.connect(servers=urls)
    js = nc.jetstream()
    await js.add_stream(name=subject.upper(), subjects=[subject], num_replicas=3, storage="file")
    payload = b"z" * size
    lat: list[float] = []

    async def one(due: float) -> None:
        await js.publish(subject, payload)
        lat.append(time.perf_counter() - due)  # from the scheduled time (open loop)

    tasks = []
    start = time.perf_counter()
    k = 0
    while True:
        due = start + k / rate
        if due - start > seconds:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
        k += 1
    await asyncio.gather(*tasks)
    await nc.close()
    return {
        "p50_ms": percentile(lat, 0.5) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "p999_ms": percentile(lat, 0.999) * 1000,
    }


# ---------------------------------------------------------------------- main


# ------------------------------------------------------------------ TLS vs plaintext

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


class _ProfiledCluster(SinkProcessCluster):
    """Nodes run under bench/stage_profile.py (idle until its control file exists)."""

    def __init__(self, base_dir: str, control: str, **kw: Any) -> None:
        super().__init__(base_dir, node_wrapper="bench.stage_profile", **kw)
        self.control = control

    def env_for(self, node_id: int) -> dict[str, str] | None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONPATH=path, **{PROFILE_ENV: self.control})
        if os.environ.get("BENCH_HOT_SPOTS"):
            env[SAMPLE_ENV] = "1"
        return env


def idle_cpu_rate(pids: list[int], seconds: float) -> float:
    """The idle cluster's CPU seconds per second (ticks, heartbeats, housekeeping)."""
    with CpuMeter(pids) as cpu:
        time.sleep(seconds)
    return cpu.cpu_s / cpu.wall_s


def _last_index(cluster: SinkProcessCluster) -> int:
    """The Raft log's last index (the highest any node reports)."""
    sts = [asyncio.run(cluster.status(i)) for i in cluster.alive()]
    return max(st["last_index"] for st in sts if st)


def measured_phase(
    cluster: SinkProcessCluster,
    prod: _LoadProducer,
    idle_rate: float,
    topic: str,
    rate: float,
    seconds: float,
) -> dict:
    """Open-loop latency at `rate`, with the cluster's CPU (idle subtracted) per
    acknowledged record and per Produce request, and Raft entries per request."""
    pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
    first = _last_index(cluster)
    with CpuMeter(pids) as cpu:
        r = open_loop(prod, topic, 100, rate, seconds)
    r["entries"] = _last_index(cluster) - first
    r["entries_per_request"] = r["entries"] / max(r["requests"], 1)
    if r["errors"]:
        raise RuntimeError(f"{r['errors']} delivery errors at {rate:.0f} records/s")
    net = cpu.cpu_s - idle_rate * cpu.wall_s
    r["cpu_s"] = cpu.cpu_s
    r["cpu_net_s"] = net
    r["cpu_us_per_record"] = net / max(r["acked"], 1) * 1e6
    r["cpu_us_per_request"] = net / max(r["requests"], 1) * 1e6
    r["records_per_request"] = r["acked"] / max(r["requests"], 1)
    print(
        f"  raftsink at {rate:>7.0f} records/s: p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} "
        f"p99.9 {r['p999_ms']:.2f} ms; {r['acked']} acked in {r['requests']} Produce requests "
        f"({r['entries']} Raft entries); "
        f"3 nodes' CPU {cpu.cpu_s:.2f} s in {cpu.wall_s:.1f} s ({net:.2f} s above idle): "
        f"{r['cpu_us_per_record']:.0f} us/record, {r['cpu_us_per_request']:.0f} us/request"
    )
    return r


def _wait_files(paths: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for path in paths:
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear within {timeout} s")
            time.sleep(0.02)


def profile_phase(
    prod: _LoadProducer,
    control: str,
    pids: dict[int, int],
    leader: int,
    topic: str,
    rate: float,
    seconds: float,
) -> dict[str, dict[str, float]]:
    """The per-stage CPU account at `rate` (bench/stage_profile.py switched on in
    every node for this phase only: its sampling costs CPU, so the measured phases
    run without it). Returns {"leader"|"follower": {stage: us per acked record}}."""
    for pid in pids.values():
        for suffix in ("json", "started"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{control}.{pid}.{suffix}")
    open(control, "w").close()
    _wait_files([f"{control}.{pid}.started" for pid in pids.values()], 10)
    try:
        r = open_loop(prod, topic, 100, rate, seconds)
    finally:
        os.unlink(control)
    _wait_files([f"{control}.{pid}.json" for pid in pids.values()], 10)
    reports = {}
    for nid, pid in pids.items():
        with open(f"{control}.{pid}.json") as f:
            reports[nid] = json.load(f)
    if os.environ.get("BENCH_HOT_SPOTS"):
        for nid in (leader, min(n for n in pids if n != leader)):
            print(f"  node {nid} loop hot spots (samples):")
            for where, n in list(reports[nid]["loop_hot_spots"].items())[:40]:
                print(f"    {n:>5} {where}")
    follower = min(n for n in pids if n != leader)
    acked = max(r["acked"], 1)
    out = {}
    for role, nid in (("leader", leader), ("follower", follower)):
        table = stage_table(reports[nid])
        out[role] = {k: v / acked * 1e6 for k, v in table.items()}
        out[role]["(process total)"] = reports[nid]["process_cpu_s"] / acked * 1e6
    stages = sorted(
        {s for t in out.values() for s in t if s != "(process total)"},
        key=lambda s: -(out["leader"].get(s, 0) + out["follower"].get(s, 0)),
    )
    print(
        f"  per-stage CPU at {rate:.0f} records/s ({seconds:.0f} s, {r['acked']} records, "
        f"{r['requests']} Produce requests; leader node {leader}, follower node {follower}; "
        "us of CPU per acknowledged record, stage clocks on):"
    )
    print(f"    {'stage':<56} {'leader':>8} {'follower':>8}")
    for s in stages:
        lead, fol = out["leader"].get(s, 0.0), out["follower"].get(s, 0.0)
        if lead >= 0.05 or fol >= 0.05:
            print(f"    {s:<56} {lead:>8.1f} {fol:>8.1f}")
    print(
        f"    {'(process total, profiler included)':<56} "
        f"{out['leader']['(process total)']:>8.1f} {out['follower']['(process total)']:>8.1f}"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 2 min)")
    ap.add_argument(
        "--tls", action="store_true", help="plaintext against TLS everywhere, same workload"
    )
    ap.add_argument(
        "--no-jetstream", action="store_true", help="raftsink only (for quick A/B of a change)"
    )
    ap.add_argument(
        "--cpu-only",
        action="store_true",
        help="only CPU per record at 1,000/s and the per-stage table (A/B of a change)",
    )
    args = ap.parse_args()
    if args.cpu_only:
        return main_cpu(20.0, float(os.environ.get("BENCH_PROFILE_S", "10")))
    if args.tls:
        return main_tls(args.quick)
    ensure_debian_packages("kcat", *(() if args.no_jetstream else ("nats-server",)))
    counts = {100: 300_000, 1024: 100_000} if args.quick else {100: 3_000_000, 1024: 1_000_000}
    lat_seconds = 8.0 if args.quick else 20.0
    load_seconds = 5.0 if args.quick else 10.0
    idle_seconds = 5.0 if args.quick else 10.0
    nats_seconds = 3.0 if args.quick else 10.0
    base = tempfile.mkdtemp(prefix="rs-bench-produce-")
    print(f"machine: {machine()}")
    print(
        f"mode: {'quick' if args.quick else 'full'}; raftsink: 3 processes, fsync on, {PARTITIONS} partitions"
    )
    fig: dict = {"mode": "quick" if args.quick else "full"}
    control = os.path.join(base, "stage-profile")
    cluster = _ProfiledCluster(
        os.path.join(base, "raftsink"), control, default_partitions=PARTITIONS
    )
    cluster.start()
    stages: dict = {}
    try:
        leader = asyncio.run(cluster.wait_ready())
        by_node = {i: n.proc.pid for i, n in cluster.nodes.items() if n.proc is not None}
        pids = list(by_node.values())
        for size, count in counts.items():
            topic = f"bench-{size}"
            with CpuMeter(pids) as cpu:
                r = kcat_throughput(cluster.bootstrap_servers, topic, size, count, base)
            stored = asyncio.run(total_records(cluster.peers[1].read_api, topic))
            key = "100b" if size == 100 else "1k"
            fig[f"records_per_s_{key}"] = round(r["records_per_s"])
            fig[f"mb_s_{key}"] = round(r["mb_s"], 1)
            fig[f"cluster_cpu_us_per_record_{key}"] = round(cpu.cpu_s / r["records"] * 1e6, 2)
            print(
                f"  raftsink {size:>5} B: {r['records_per_s']:>10.0f} records/s {r['mb_s']:>7.1f} MB/s "
                f"(kcat, {r['records']} records in {r['seconds']:.1f} s; {stored} stored); "
                f"3 nodes' CPU {cpu.cpu_s:.1f} s in {cpu.wall_s:.1f} s wall, "
                f"{cpu.cpu_s / r['records'] * 1e6:.2f} us/record"
            )
            if stored != r["records"]:
                raise RuntimeError(f"{r['records']} records delivered but {stored} stored")
        t0 = time.monotonic()
        index = asyncio.run(cluster.wait_settled())
        print(f"  (every node applied entry {index}; settled in {time.monotonic() - t0:.1f} s)")
        idle = idle_cpu_rate(pids, idle_seconds)
        fig["idle_cpu_pct"] = round(idle * 100, 1)
        print(f"  idle cluster: {idle * 100:.1f}% of a core for 3 nodes ({idle_seconds:.0f} s)")
        prod = _LoadProducer(cluster.bootstrap_servers)
        try:
            prod.send("bench-latency", _value(0, 100))  # warm-up: the idempotent PID handshake
            prod.flush(30)
            one_k = measured_phase(cluster, prod, idle, "bench-latency", 1000, lat_seconds)
            fig["cpu_us_per_record_1k"] = round(one_k["cpu_us_per_record"], 1)
            fig["cpu_us_per_request_1k"] = round(one_k["cpu_us_per_request"], 1)
            fig["records_per_request_1k"] = round(one_k["records_per_request"], 2)
            fig["entries_per_request_1k"] = round(one_k["entries_per_request"], 2)
            fig["p50_ms"] = round(one_k["p50_ms"], 2)
            fig["p99_ms"] = round(one_k["p99_ms"], 2)
            fig["p999_ms"] = round(one_k["p999_ms"], 2)
            max_rate = closed_loop_max(prod, "bench-max", 100, load_seconds)
            fig["max_records_per_s_100b"] = round(max_rate)
            print(f"  raftsink max (this producer, closed loop, 100 B): {max_rate:.0f} records/s")
            for pct in (25, 50, 75):
                asyncio.run(cluster.wait_settled())
                r = measured_phase(
                    cluster, prod, idle, "bench-load", max_rate * pct / 100, load_seconds
                )
                fig[f"p50_ms_at_{pct}pct"] = round(r["p50_ms"], 2)
                fig[f"p99_ms_at_{pct}pct"] = round(r["p99_ms"], 2)
                fig[f"p999_ms_at_{pct}pct"] = round(r["p999_ms"], 2)
                if pct == 50:
                    fig["cpu_us_per_record_50pct"] = round(r["cpu_us_per_record"], 1)
                    fig["cpu_us_per_request_50pct"] = round(r["cpu_us_per_request"], 1)
            asyncio.run(cluster.wait_settled())
            leader = asyncio.run(cluster.wait_ready())  # it may have moved since
            stages = profile_phase(
                prod, control, by_node, leader, "bench-profile", 1000, load_seconds
            )
        finally:
            prod.close()
    finally:
        cluster.stop()
    fig["stages_us_per_record_1k"] = {
        role: {k: round(v, 1) for k, v in t.items() if v >= 0.05} for role, t in stages.items()
    }
    if not args.no_jetstream:
        jetstream(fig, base, nats_seconds, lat_seconds)
    shutil.rmtree(base, ignore_errors=True)
    if fig.get("jetstream_records_per_s_100b"):
        fig["ratio_vs_jetstream_100b"] = round(
            fig["records_per_s_100b"] / fig["jetstream_records_per_s_100b"], 1
        )
    if fig.get("jetstream_p99_ms"):
        fig["p99_ratio_vs_jetstream"] = round(fig["p99_ms"] / fig["jetstream_p99_ms"], 2)
    if fig.get("jetstream_mb_s_1k"):
        fig["mb_s_ratio_vs_jetstream_1k"] = round(fig["mb_s_1k"] / fig["jetstream_mb_s_1k"], 1)
    targets = {
        "cpu_us_per_record_1k <= 120": fig["cpu_us_per_record_1k"] <= 120,
        "p99 <= 2x JetStream's": fig.get("p99_ratio_vs_jetstream", 99) <= 2,
        "1 KiB MB/s >= 6x JetStream's": fig.get("mb_s_ratio_vs_jetstream_1k", 0) >= 6,
        "p99 at 50% of max <= 25 ms": fig["p99_ms_at_50pct"] <= 25,
        ">= 500k records/s of 100 B": fig["records_per_s_100b"] >= 500_000,
    }
    print_targets(targets)
    print(json.dumps(fig))
    return 0


def main_cpu(lat_seconds: float, profile_seconds: float) -> int:
    """CPU per record at 1,000 records/s (idle subtracted) and the per-stage table only."""
    base = tempfile.mkdtemp(prefix="rs-bench-cpu-")
    print(f"machine: {machine()}")
    control = os.path.join(base, "stage-profile")
    cluster = _ProfiledCluster(
        os.path.join(base, "raftsink"), control, default_partitions=PARTITIONS
    )
    cluster.start()
    fig: dict = {"mode": "cpu-only"}
    try:
        asyncio.run(cluster.wait_ready())
        by_node = {i: n.proc.pid for i, n in cluster.nodes.items() if n.proc is not None}
        pids = list(by_node.values())
        idle = idle_cpu_rate(pids, 10.0)
        fig["idle_cpu_pct"] = round(idle * 100, 1)
        prod = _LoadProducer(cluster.bootstrap_servers)
        try:
            prod.send("bench-latency", _value(0, 100))
            prod.flush(30)
            r = measured_phase(cluster, prod, idle, "bench-latency", 1000, lat_seconds)
            fig["cpu_us_per_record_1k"] = round(r["cpu_us_per_record"], 1)
            fig["cpu_us_per_request_1k"] = round(r["cpu_us_per_request"], 1)
            fig["records_per_request_1k"] = round(r["records_per_request"], 2)
            fig["entries_per_request_1k"] = round(r["entries_per_request"], 2)
            fig["p50_ms"], fig["p99_ms"] = round(r["p50_ms"], 2), round(r["p99_ms"], 2)
            fig["p999_ms"] = round(r["p999_ms"], 2)
            leader = asyncio.run(cluster.wait_ready())
            stages = profile_phase(
                prod, control, by_node, leader, "bench-profile", 1000, profile_seconds
            )
        finally:
            prod.close()
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    fig["stages_us_per_record_1k"] = {
        role: {k: round(v, 1) for k, v in t.items() if v >= 0.05} for role, t in stages.items()
    }
    print(json.dumps(fig))
    return 0


def jetstream(fig: dict, base: str, nats_seconds: float, lat_seconds: float) -> None:
    """The same run's JetStream figures (NO fsync per message in nats-server 2.9)."""
    procs, urls, monitor = start_nats(os.path.join(base, "nats"))
    try:
        wait_nats(monitor)
        nats_pids = [p.pid for p in procs]
        for size in (100, 1024):
            with CpuMeter(nats_pids) as cpu:
                r = asyncio.run(nats_throughput(urls, size, nats_seconds, f"bench{size}"))
            key = "100b" if size == 100 else "1k"
            fig[f"jetstream_records_per_s_{key}"] = round(r["records_per_s"])
            fig[f"jetstream_mb_s_{key}"] = round(r["mb_s"], 1)
            fig[f"jetstream_cpu_us_per_record_{key}"] = round(cpu.cpu_s / r["records"] * 1e6, 2)
            print(
                f"  JetStream {size:>5} B: {r['records_per_s']:>9.0f} records/s {r['mb_s']:>7.1f} MB/s "
                "(nats-py, window 4,000; NO fsync per message); "
                f"3 servers' CPU {cpu.cpu_s:.1f} s, {cpu.cpu_s / r['records'] * 1e6:.2f} us/record"
            )
        with CpuMeter(nats_pids) as cpu:
            lat = asyncio.run(nats_latency(urls, 100, 1000, lat_seconds, "benchlat"))
        fig["jetstream_p50_ms"] = round(lat["p50_ms"], 2)
        fig["jetstream_p99_ms"] = round(lat["p99_ms"], 2)
        fig["jetstream_p999_ms"] = round(lat["p999_ms"], 2)
        fig["jetstream_cpu_us_per_record_at_1k"] = round(cpu.cpu_s / (1000 * lat_seconds) * 1e6, 1)
        print(
            f"  JetStream at 1,000 msgs/s: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
            f"p99.9 {lat['p999_ms']:.2f} ms (open loop; idle CPU not subtracted: "
            f"{fig['jetstream_cpu_us_per_record_at_1k']:.0f} us/record)"
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
