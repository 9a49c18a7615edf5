"""Produce benchmark: Kafka clients into a 3-node raftsink cluster (fsync on)
against NATS JetStream (3 nodes, replicas=3, file storage) in the same run.

raftsink: kcat (librdkafka, idempotent, acks=all) writes N records of 100 B and
1 KiB over several partitions: records/s and MB/s from start to the last
delivery. Then, once every node has caught up (no follower still replaying the
throughput phase's backlog), confluent-kafka at a fixed 1,000 records/s:
p50/p99 delivery latency (produce() to delivery callback). JetStream: nats-py publish_async with a window of 4,000, then
1,000 msgs/s with one publish awaited at a time. NOTE: nats-server 2.9 does not
fsync per message (acks once a quorum has it in the page cache).

    python bench/produce.py [--quick]
    python bench/produce.py --tls [--quick]

--tls: the same raftsink workload (kcat 1 KiB throughput, confluent-kafka at 1,000
records/s) against a plaintext cluster and then a TLS cluster (Kafka listener with
client certificates, mutual TLS between nodes, read API over TLS; throw-away
certificates from scripts/make-certs.sh) in the same run; no JetStream. JSON:
tls_throughput_ratio_1k (TLS / plaintext records/s) and tls_p99_ratio (TLS /
plaintext p99).

Needs the Debian packages kcat and nats-server (installed here if missing, as
root) and the pip package nats-py (dev extras). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import CpuMeter, machine, percentile, print_targets

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


def kafka_latency(
    bootstrap: str,
    topic: str,
    size: int,
    rate: float,
    seconds: float,
    conf: dict[str, str] | None = None,
) -> dict:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            **(conf or {}),
        }
    )
    lat: list[float] = []
    errors = 0
    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            p.poll(0.05)

    def cb(err, msg, t0: float = 0.0) -> None:
        nonlocal errors
        if err is None:
            lat.append(time.perf_counter() - t0)
        else:
            errors += 1

    value = b"y" * size
    # warm-up: the idempotent producer's PID handshake takes ~0.5 s
    p.produce(topic, value)
    p.flush(30)
    th = threading.Thread(target=poller, daemon=True)
    th.start()
    start = time.perf_counter()
    k = 0
    while True:
        due = start + k / rate
        now = time.perf_counter()
        if due - start > seconds:
            break
        if due > now:
            time.sleep(due - now)
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda e, m, t0=t0: cb(e, m, t0))
        k += 1
    p.flush(60)
    stop.set()
    th.join()
    return {
        "sent": k,
        "errors": errors,
        "p50_ms": percentile(lat, 0.5) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
    }


async def total_records(read_api: str, topic: str, credentials: object = None) -> int:
    c = ReadApiClient(read_api, credentials=credentials)  # type: ignore[arg-type]
    try:
        reply = await c.partitions([topic], linearizable=True)
        return sum(p.high_watermark - p.log_start_offset for p in reply.partitions)
    finally:
        await c.close()


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

    async def one() -> None:
        t0 = time.perf_counter()
        await js.publish(subject, payload)
        lat.append(time.perf_counter() - t0)

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
        tasks.append(asyncio.create_task(one()))
        k += 1
    await asyncio.gather(*tasks)
    await nc.close()
    return {"p50_ms": percentile(lat, 0.5) * 1000, "p99_ms": percentile(lat, 0.99) * 1000}


# ---------------------------------------------------------------------- main


# ------------------------------------------------------------------ TLS vs plaintext


def _tls_phase(label: str, base: str, count: int, lat_seconds: float, tls: dict | None) -> dict:
    """One cluster (plaintext, or TLS everywhere when tls is given): 1 KiB throughput
    with kcat, then p50/p99 at 1,000 records/s with confluent-kafka."""
    from sink.readapi.client import tls_credentials

    extra, conf, creds = [], {}, None
    if tls is not None:
        d = tls["dir"]
        extra = [
            "--tls-ca-file", f"{d}/ca.pem", "--tls-kafka", "--tls-kafka-client-auth", "required",
            "--tls-read-api", "--tls-raft",
        ]  # fmt: skip
        conf = {
            "security.protocol": "ssl",
            "ssl.ca.location": f"{d}/ca.pem",
            "ssl.certificate.location": f"{d}/client.pem",
            "ssl.key.location": f"{d}/client.key",
        }
        creds = tls_credentials(f"{d}/ca.pem", f"{d}/client.pem", f"{d}/client.key")
    cluster = SinkProcessCluster(
        os.path.join(base, label),
        default_partitions=PARTITIONS,
        extra_args=extra,
        read_api_credentials=creds,
    )
    if tls is not None:
        for i, n in cluster.nodes.items():
            n.extra_args += ["--tls-cert-file", f"{tls['dir']}/node{i}.pem"]
            n.extra_args += ["--tls-key-file", f"{tls['dir']}/node{i}.key"]
    cluster.start()
    try:
        asyncio.run(cluster.wait_ready(120))
        pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
        with CpuMeter(pids) as cpu:
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
    }
    print(
        f"  {label:>9}: 1 KiB {out['records_per_s']:>8.0f} records/s {out['mb_s']:>6.1f} MB/s "
        f"({r['records']} records, {out['cpu_us_per_record']:.1f} us CPU/record); "
        f"at 1,000/s p50 {out['p50_ms']:.2f} ms p99 {out['p99_ms']:.2f} ms"
    )
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
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
    certs = os.path.join(base, "certs")
    subprocess.run(
        ["bash", os.path.join(script, "make-certs.sh"), certs], check=True, capture_output=True
    )
    try:
        plain = _tls_phase("plaintext", base, count, lat_seconds, None)
        tls = _tls_phase("tls", base, count, lat_seconds, {"dir": certs})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    fig = {
        "mode": ("quick" if quick else "full") + "-tls",
        "records_per_s_1k": round(plain["records_per_s"]),
        "tls_records_per_s_1k": round(tls["records_per_s"]),
        "p99_ms": round(plain["p99_ms"], 2),
        "tls_p99_ms": round(tls["p99_ms"], 2),
        "tls_throughput_ratio_1k": round(tls["records_per_s"] / plain["records_per_s"], 3),
        "tls_p99_ratio": round(tls["p99_ms"] / plain["p99_ms"], 3),
        "tls_cpu_ratio_1k": round(tls["cpu_us_per_record"] / plain["cpu_us_per_record"], 3),
    }
    print_targets(
        {
            "TLS throughput ratio >= 0.7 (1 KiB)": fig["tls_throughput_ratio_1k"] >= 0.7,
            "TLS p99 ratio <= 1.5": fig["tls_p99_ratio"] <= 1.5,
        }
    )
    print(json.dumps(fig))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 60 s)")
    ap.add_argument(
        "--tls", action="store_true", help="plaintext against TLS everywhere, same workload"
    )
    args = ap.parse_args()
    if args.tls:
        return main_tls(args.quick)
    ensure_debian_packages("kcat", "nats-server")
    counts = {100: 300_000, 1024: 100_000} if args.quick else {100: 3_000_000, 1024: 1_000_000}
    lat_seconds = 5.0 if args.quick else 20.0
    nats_seconds = 3.0 if args.quick else 10.0
    base = tempfile.mkdtemp(prefix="rs-bench-produce-")
    print(f"machine: {machine()}")
    print(
        f"mode: {'quick' if args.quick else 'full'}; raftsink: 3 processes, fsync on, {PARTITIONS} partitions"
    )
    fig: dict = {"mode": "quick" if args.quick else "full"}
    cluster = SinkProcessCluster(os.path.join(base, "raftsink"), default_partitions=PARTITIONS)
    cluster.start()
    try:
        asyncio.run(cluster.wait_ready())
        pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
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
        with CpuMeter(pids) as cpu:
            lat = kafka_latency(cluster.bootstrap_servers, "bench-latency", 100, 1000, lat_seconds)
        fig["p50_ms"] = round(lat["p50_ms"], 2)
        fig["p99_ms"] = round(lat["p99_ms"], 2)
        fig["cluster_cpu_pct_at_1k"] = round(cpu.cpu_s / cpu.wall_s * 100, 1)
        print(
            f"  raftsink at 1,000 records/s: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms; "
            f"3 nodes' CPU {cpu.cpu_s:.1f} s in {cpu.wall_s:.1f} s wall "
            f"({cpu.cpu_s / cpu.wall_s * 100:.0f}% of a core)"
        )
    finally:
        cluster.stop()
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
        lat = asyncio.run(nats_latency(urls, 100, 1000, lat_seconds, "benchlat"))
        fig["jetstream_p50_ms"] = round(lat["p50_ms"], 2)
        fig["jetstream_p99_ms"] = round(lat["p99_ms"], 2)
        print(
            f"  JetStream at 1,000 msgs/s: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms"
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(base, ignore_errors=True)
    if fig.get("jetstream_records_per_s_100b"):
        fig["ratio_vs_jetstream_100b"] = round(
            fig["records_per_s_100b"] / fig["jetstream_records_per_s_100b"], 1
        )
    targets = {
        ">= 500k records/s of 100 B": fig["records_per_s_100b"] >= 500_000,
        ">= 10x JetStream": fig.get("ratio_vs_jetstream_100b", 0) >= 10,
        ">= 100 MB/s of 1 KiB": fig["mb_s_1k"] >= 100,
        "p99 <= 5 ms at 1,000/s": fig["p99_ms"] <= 5,
    }
    print_targets(targets)
    print(json.dumps(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
