"""The Kafka load tools of the produce benchmarks (bench/produce.py and its phases,
bench/scale.py, bench/idle_messages.py): kcat's throughput, one confluent-kafka producer
driven open loop (latency from scheduled send times, no coordinated omission) or closed
loop (its maximum), and the records a cluster stored (read API). Also installs the Debian
packages the benchmarks drive (kcat, nats-server)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.common import percentile
from sink.readapi import ReadApiClient

PARTITIONS = 4
"""Default partitions of bench/produce.py's clusters (every mode)."""
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


KCAT_WARMUP = 10_000
"""Records a benchmark writes to a kcat phase's topic before measuring it (not counted):
the topic exists and its leaders are elected before the clock starts."""


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
    with open(path, "wb") as f:
        chunk = _lines(size, 10_000)
        for _ in range(count // 10_000):
            f.write(chunk)
        # On disk before the clock starts: else the kernel writes the file back (1 GB for
        # 1,000,000 records of 1 KiB) during the measured phase, on the disk whose
        # fdatasyncs the nodes wait for.
        f.flush()
        os.fsync(f.fileno())
    elapsed = _kcat_file(bootstrap, topic, path, conf)
    n = (count // 10_000) * 10_000
    return {
        "records": n,
        "seconds": elapsed,
        "records_per_s": n / elapsed,
        "mb_s": n * size / elapsed / MiB,
    }


def _lines(size: int, n: int) -> bytes:
    """n kcat input lines of `size` bytes each (an 8-digit number, then padding)."""
    pad = (b"x" * (size - 8)) if size > 8 else b""
    return b"".join(b"%08d" % (i % 10**8) + pad + b"\n" for i in range(n))


def _kcat_args(bootstrap: str, topic: str, conf: dict[str, str] | None) -> list[str]:
    """kcat -P with the benchmarks' producer settings (idempotent, acks=all, large batches)."""
    args = [
        "kcat", "-P", "-b", bootstrap, "-t", topic,
        "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5",
        "-X", "batch.num.messages=10000", "-X", "batch.size=1000000",
        "-X", "queue.buffering.max.messages=2000000", "-X", "queue.buffering.max.kbytes=2097151",
        "-X", "partitioner=random",
    ]  # fmt: skip
    for k, v in (conf or {}).items():
        args += ["-X", f"{k}={v}"]
    return args


def _kcat_file(bootstrap: str, topic: str, path: str, conf: dict[str, str] | None) -> float:
    """Produce every line of path with kcat (idempotent, acks=all, large batches);
    returns the wall seconds of the kcat process. The file is removed."""
    args = [*_kcat_args(bootstrap, topic, conf), "-l", path]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    if proc.returncode != 0 or "ERROR" in proc.stderr:
        raise RuntimeError(f"kcat failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed


def kcat_paced(
    bootstrap: str,
    topic: str,
    size: int,
    rate: int,
    seconds: float,
    conf: dict[str, str] | None = None,
) -> dict:
    """kcat -P fed on its stdin at `rate` lines of `size` bytes a second for `seconds`
    (chunks of 1,000 lines written on a schedule fixed in advance, so a late chunk is
    followed by the next at once: the offered rate holds over the phase), with
    kcat_throughput's settings; returns when kcat has every record acknowledged. The
    same load for every cluster, whatever its maximum: CPU per record compared at one
    rate, not at each cluster's own saturation."""
    chunk_lines = 1_000
    chunk = _lines(size, chunk_lines)
    chunks = max(1, round(rate * seconds / chunk_lines))
    gap = chunk_lines / rate
    # stderr to a file: a pipe nobody reads while the chunks go out could fill and stall kcat
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(
            _kcat_args(bootstrap, topic, conf),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errf,
        )
        assert proc.stdin is not None
        t0 = time.perf_counter()
        late = 0.0
        try:
            for k in range(chunks):
                wait = t0 + k * gap - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                else:
                    late = max(late, -wait)
                proc.stdin.write(chunk)
            proc.stdin.close()
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        elapsed = time.perf_counter() - t0
        errf.seek(0)
        text = errf.read().decode(errors="replace")
    if proc.returncode != 0 or "ERROR" in text:
        raise RuntimeError(f"kcat failed ({proc.returncode}): {text[-2000:]}")
    n = chunks * chunk_lines
    return {
        "records": n,
        "seconds": elapsed,
        "records_per_s": n / elapsed,
        "offered_per_s": rate,
        "latest_chunk_s": round(late, 3),
    }


def kcat_start_cost(
    bootstrap: str, topic: str, workdir: str, conf: dict[str, str] | None = None
) -> float:
    """Wall seconds of a kcat run that sends one record with kcat_throughput's settings:
    its start, connections, authentication, producer id and close. kcat_throughput's
    rate includes this cost; on a phase of a second or two it is not small."""
    path = os.path.join(workdir, "lines-start.txt")
    with open(path, "wb") as f:
        f.write(b"00000000\n")
    return _kcat_file(bootstrap, topic, path, conf)


class LoadProducer:
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
        self.windows: list[tuple[float, float]] = []
        """Per statistics interval and broker that sent Produce requests in it: librdkafka's
        p99 of its request round trip (rtt: sent to answered, the network and the
        server) and of its queue wait (int_latency: produce() to sent, linger included),
        in ms; reset() clears them."""
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
        for b in self._stats.get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt"):
                self.windows.append((b["rtt"]["p99"] / 1000, b["int_latency"]["p99"] / 1000))
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
        self.windows = []

    def client_figures(self) -> dict[str, float]:
        """Where a record's time went on the client's side, from librdkafka's statistics
        since reset(): the median and the largest per-interval p99 of its request round
        trips (rtt) and of its queue waits (queue: linger and waiting for the broker
        thread; per broker and statistics interval, so a median of p99s, not a p99)."""
        if not self.windows:
            return {}
        rtt = sorted(w[0] for w in self.windows)
        queue = sorted(w[1] for w in self.windows)
        return {
            "client_rtt_p99_ms_median": round(rtt[len(rtt) // 2], 2),
            "client_rtt_p99_ms_max": round(rtt[-1], 2),
            "client_queue_p99_ms_median": round(queue[len(queue) // 2], 2),
            "client_queue_p99_ms_max": round(queue[-1], 2),
        }

    def flush(self, timeout: float = 120) -> None:
        left = self.p.flush(timeout)
        if left:
            raise RuntimeError(f"{left} records not delivered within {timeout} s")

    def close(self) -> None:
        """Flush, stop the poller and let librdkafka's handle go: the handle holds this
        object's callbacks (a cycle only the collector would break), and a handle left
        alive reconnects every second to a cluster already stopped, on the machine the
        next phase measures."""
        self.flush()
        self._stop.set()
        self._poller.join()
        self.p = None


def record_value(i: int, size: int) -> bytes:
    return b"%08d" % (i % 10**8) + b"y" * (size - 8)


def open_loop(prod: LoadProducer, topic: str, size: int, rate: float, seconds: float) -> dict:
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
        **prod.client_figures(),
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


def closed_loop_max(prod: LoadProducer, topic: str, size: int, seconds: float) -> float:
    """The most records/s this producer gets acknowledged (sending as fast as its
    queue takes them for `seconds`, then to the last delivery): the 100% of the
    25/50/75% load points."""
    prod.reset()
    value = record_value(0, size)
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
    samples: list[float] | None = None,
) -> dict:
    """p50/p99/p99.9 at a fixed rate from a fresh producer (open loop; see open_loop).
    samples: also extended with every record's latency (seconds), to pool rounds."""
    prod = LoadProducer(bootstrap, conf)
    try:
        prod.send(topic, record_value(0, size))  # warm-up: the idempotent PID handshake
        prod.flush(30)
        out = open_loop(prod, topic, size, rate, seconds)
        if samples is not None:
            samples.extend(prod.lat)
        return out
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
