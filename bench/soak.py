"""Soak: a 3-node cluster under steady produce with short retention; memory, files,
disk and latency must stay flat.

    python bench/soak.py [--minutes 30] [--retention-minutes 3] [--size 100]

1. Starts 3 `raftsink serve` processes (SinkProcessCluster) and a topic `soak`
   (--partitions, default 3) with retention.ms = --retention-minutes.
2. Measures the cluster's maximum produce rate (--probe-s seconds of a librdkafka
   producer, acks=all, sending as fast as it can; acknowledged records per second).
3. Produces at --load (default 50%) of that rate, paced every 10 ms, for --minutes,
   while a sampler records every --sample-s (15 s) each node's RSS (/proc/PID/status
   VmRSS), open files (/proc/PID/fd) and data directory size (allocated blocks), and
   the produce latency (produce() to delivery report) p99 of the interval.
4. Prints one line per sample and, last, one JSON line: rss_max_mb,
   rss_growth_mb_per_hour and disk_growth_mb_per_hour (least-squares slope over the
   last 2/3 of the samples, the worst node), disk_floor_growth_mb_per_hour (the same
   slope over the least size per minute, polled every second: the directory is a
   sawtooth of whole segments, and a slope over part of a tooth is not growth;
   informational, with disk_floor_growth_within_5pct),
   disk_parts_growth_mb_per_hour_node1 (segments / LMDB index / snapshots),
   disk_max_mb, retained_mb (the data a retention window holds at the offered load),
   fds_max, p99_ms_max_interval, p99_ms_median_interval, stalls_total (each node's gen-2 gc ms, gc pauses >= 50 ms and
   event-loop lags >= 100 ms over the soak; per sample, the worst node's in "stalls":
   raftlog.runtime.stall_watch), the machine's CPU wait (PSI), IO wait and steal in
   the worst and the median interval (per sample: "machine"), informational
   p99_ms_max_interval_low_steal (the worst interval with under 5 % hypervisor steal) and
   p99_steal_correlation, and the targets (issue 14): RSS <= 300 MB per node, growth
   <= 20 MB/hour, disk growth <= 5% of the retained volume per hour, worst interval
   p99 <= 3x the median interval's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import loadavg, machine, percentile, print_targets
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sink.process_cluster import SinkProcessCluster

TOPIC = "soak"
DISK_POLL_S = 1.0
"""How often the sampler reads the data directories' sizes between samples (their least
size per sample is the floor series' input)."""
FLOOR_WINDOW_S = 60.0
"""The floor series takes the least size per window this long: several retention checks
(--topics-retention-check-ms 5000), so at least one cut."""
MAX_DEBT_S = 0.1
"""The paced producer makes up at most this much lost time (see Load.run_paced)."""
MB = 1e6


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def dir_mb(path: str) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # compacted away meanwhile
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total / MB


def machine_counters() -> dict[str, float]:
    """The machine's own stall counters, cumulative: CPU and IO pressure (PSI, us some /
    full: time some / every runnable task waited for a CPU / for IO) and CPU time
    stolen by the hypervisor (/proc/stat, jiffies), with the total to make a share of."""
    out: dict[str, float] = {}
    for kind in ("cpu", "io"):
        with contextlib.suppress(OSError), open(f"/proc/pressure/{kind}") as f:  # no PSI: none
            for line in f:
                name, *fields = line.split()
                out[f"{kind}_{name}_us"] = float(fields[-1].split("=")[1])
    with open("/proc/stat") as f:
        jiffies = [float(x) for x in f.readline().split()[1:]]
    out["steal_jiffies"], out["all_jiffies"] = jiffies[7], sum(jiffies)
    return out


def machine_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """Over one interval: % of the time some task waited for a CPU (cpu_some_pct), every
    task waited for IO (io_full_pct), and the share of CPU time stolen (steal_pct). What
    says whether a slow interval was the machine's or the nodes' (their own stall counters
    are in "stalls")."""
    out = {}
    for key, name in (("cpu_some_us", "cpu_some_pct"), ("io_full_us", "io_full_pct")):
        if key in after and key in before:
            out[name] = round((after[key] - before[key]) / 1e4 / max(seconds, 1e-9), 1)
    total = after["all_jiffies"] - before["all_jiffies"]
    out["steal_pct"] = (
        round(100 * (after["steal_jiffies"] - before["steal_jiffies"]) / total, 1) if total else 0.0
    )
    return out


STEAL_QUIET_PCT = 5.0
"""An interval with less hypervisor steal than this is "quiet" (the median interval's
steal on the shared VM was about 4 %)."""


def correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's r of two series (None when either is constant or too short)."""
    if len(xs) < 3:
        return None
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return round(sxy / (sxx * syy) ** 0.5, 2) if sxx and syy else None


def parts_mb(path: str) -> dict[str, float]:
    """The data directory by part, to see what grows: Raft log segments, the LMDB
    index, snapshots, anything else."""
    out = {"segments": 0.0, "index": 0.0, "snapshots": 0.0, "other": 0.0}
    for root, _dirs, files in os.walk(path):
        rel = os.path.relpath(root, path).split(os.sep)
        part = next((p for p in ("segments", "index", "snapshots") if p in rel), "other")
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                out[part] += os.lstat(os.path.join(root, name)).st_blocks * 512 / MB
    return {k: round(v, 1) for k, v in out.items()}


def floor_series(
    ts: list[float], minima: list[float], per_window: int
) -> tuple[list[float], list[float]]:
    """The sawtooth's floor: the least size in each window of `per_window` samples,
    each sample's own least size polled every DISK_POLL_S.

    The data directory grows with the produce rate and drops by whole segments when
    retention cuts the log. A least-squares slope over a window that is not a whole
    number of teeth reads part of a tooth as growth; the slope of the floors measures
    what stays behind. A window spans several retention checks, so it holds at least
    one cut, and polling every second sees the bottom of that cut (one reading every
    15 s caught whichever part of a tooth it fell on: session 22 read 44-66 MB/h of
    "floor growth" while the ten-minute means stayed flat)."""
    out_t, out_y = [], []
    for k in range(0, len(minima) - per_window + 1, per_window):
        window = range(k, k + per_window)
        j = min(window, key=lambda i: minima[i])
        out_t.append(ts[j])
        out_y.append(minima[j])
    return out_t, out_y


STALL_KEYS = ("gc_pause_seconds_gen2", "gc_pauses_over_50ms", "loop_lags_over_100ms")


def stall_counters(cluster: SinkProcessCluster) -> dict[int, dict[str, float]]:
    """Each node's stall counters (raftlog.runtime.stall_watch, in `raftsink status`)."""

    async def read() -> dict[int, dict[str, float]]:
        out = {}
        for i in cluster.nodes:
            st = await cluster.status(i) or {}
            out[i] = {k: float(st.get("stalls", {}).get(k, 0)) for k in STALL_KEYS}
        return out

    return asyncio.run(read())


def stall_delta(
    before: dict[int, dict[str, float]], after: dict[int, dict[str, float]]
) -> dict[str, float]:
    """Over the interval, the worst node's: gen-2 gc ms, gc pauses >= 50 ms, loop lags
    >= 100 ms (who held the loop when p99 rose)."""
    return {
        key: round(
            max(after[i][key] - before.get(i, {}).get(key, 0.0) for i in after)
            * (1000 if key.startswith("gc_pause_seconds") else 1),
            1,
        )
        for key in STALL_KEYS
    }


def slope_per_hour(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over ts (seconds), per hour."""
    if len(ts) < 2:
        return 0.0
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den * 3600


class Load:
    """A producer thread at a fixed rate; delivery latencies collected per interval."""

    def __init__(self, bootstrap: str, size: int, partitions: int) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        self.value = b"v" * size
        self.partitions = partitions
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.acked = 0
        self.errors = 0
        self.stop = threading.Event()

    def _report(self, sent: float):
        def cb(err, _msg) -> None:
            with self.lock:
                if err is not None:
                    self.errors += 1
                else:
                    self.acked += 1
                    self.latencies.append((time.monotonic() - sent) * 1000)

        return cb

    def take_latencies(self) -> list[float]:
        with self.lock:
            out, self.latencies = self.latencies, []
        return out

    def run_paced(self, rate: float) -> None:
        """`rate` records a second, paced every 10 ms by the clock: what is owed grows
        with the time that passed, not with loop turns, so a turn that overran (sending
        a tick's records, delivery callbacks, the GIL shared with the sampler) is made
        up in the next one. Counting turns instead lost every overrun tick: the offered
        rate fell short by about 10 % whatever the load (session 15: 0.878 of 98,145/s
        and 0.910 of 81,749/s). The debt is capped at MAX_DEBT_S of records, so a stall
        (of this process or the machine) never turns into a burst the cluster did not
        see before; what was dropped shows in achieved_ratio."""
        tick = 0.01
        cap = rate * MAX_DEBT_S
        owed = 0.0
        last = time.monotonic()
        nxt = last
        i = 0
        while not self.stop.is_set():
            now = time.monotonic()
            owed = min(owed + rate * (now - last), cap)
            last = now
            cb = self._report(now)  # one callback per turn: every record in it was due now
            while owed >= 1:
                try:
                    self.producer.produce(
                        TOPIC, self.value, partition=i % self.partitions, on_delivery=cb
                    )
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                owed -= 1
                i += 1
            self.producer.poll(0)
            nxt += tick
            delay = nxt - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            else:
                nxt = time.monotonic()
        self.producer.flush(60)

    def probe(self, seconds: float) -> float:
        """Acknowledged records per second sending as fast as the queue allows."""
        start_acked = self.acked
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            try:
                self.producer.produce(
                    TOPIC,
                    self.value,
                    partition=i % self.partitions,
                    on_delivery=self._report(time.monotonic()),
                )
                i += 1
            except BufferError:
                self.producer.poll(0.01)
            if i % 1000 == 0:
                self.producer.poll(0)
        self.producer.flush(120)
        elapsed = time.monotonic() - t0
        self.take_latencies()
        return (self.acked - start_acked) / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--retention-minutes", type=float, default=3)
    ap.add_argument("--size", type=int, default=100, help="record value bytes")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--load", type=float, default=0.5, help="fraction of the measured maximum")
    ap.add_argument("--probe-s", type=float, default=20)
    ap.add_argument("--sample-s", type=float, default=15)
    ap.add_argument("--segment-mb", type=int, default=8, help="storage.segment_bytes in MiB")
    ap.add_argument("--dir", default=None, help="base directory (default: a temporary one)")
    args = ap.parse_args()
    print(machine(), flush=True)
    load_start = loadavg()
    base = args.dir or tempfile.mkdtemp(prefix="topic-config-soak-")
    cluster = SinkProcessCluster(
        base,
        extra_args=[
            "--topics-retention-check-ms",
            "5000",
            # Compaction frees whole segment files: a segment of a few MB per node
            # keeps the sawtooth small next to a few minutes of retained data.
            "--storage-segment-bytes",
            str(args.segment_mb << 20),
        ],
    )
    cluster.start()
    try:
        asyncio.run(cluster.wait_ready())
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        retention_ms = int(args.retention_minutes * 60_000)
        fut = admin.create_topics(
            [NewTopic(TOPIC, args.partitions, config={"retention.ms": str(retention_ms)})]
        )[TOPIC]
        fut.result(60)
        load = Load(cluster.bootstrap_servers, args.size, args.partitions)
        max_rate = load.probe(args.probe_s)
        rate = max_rate * args.load
        layout = "partition groups" if cluster.partition_groups else "one Raft group"
        print(
            f"{layout}; max produce rate {max_rate:.0f} records/s; soak at {rate:.0f} records/s",
            flush=True,
        )
        pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
        acked_before = load.acked
        thread = threading.Thread(target=load.run_paced, args=(rate,), daemon=True)
        thread.start()
        samples = []
        stalls = first_stalls = stall_counters(cluster)
        machine_now = machine_counters()
        t0 = last = time.monotonic()
        end = t0 + args.minutes * 60
        nxt = t0
        while True:
            nxt += args.sample_s
            disk_min = {i: dir_mb(n.data_dir) for i, n in cluster.nodes.items()}
            while (left := nxt - time.monotonic()) > 0:
                time.sleep(min(left, DISK_POLL_S))
                for i, n in cluster.nodes.items():
                    disk_min[i] = min(disk_min[i], dir_mb(n.data_dir))
            lat = load.take_latencies()
            exited = cluster.exited()
            if exited:
                raise RuntimeError(f"node(s) exited during the soak: {exited}")
            stalls_now = stall_counters(cluster)
            machine_before, machine_now = machine_now, machine_counters()
            now = time.monotonic()
            machine_interval = machine_delta(machine_before, machine_now, now - last)
            last = now
            s = {
                "t": round(time.monotonic() - t0, 1),
                "rss_mb": {i: round(rss_mb(p), 1) for i, p in pids.items()},
                "fds": {i: open_files(p) for i, p in pids.items()},
                "disk_mb": {i: round(dir_mb(n.data_dir), 1) for i, n in cluster.nodes.items()},
                "disk_min_mb": {i: round(v, 1) for i, v in disk_min.items()},
                "disk_parts_mb": parts_mb(cluster.nodes[1].data_dir),
                "p99_ms": round(percentile(lat, 0.99), 2) if lat else None,
                "acked": len(lat),
                "load": loadavg(),
                "stalls": stall_delta(stalls, stalls_now),
                "machine": machine_interval,
            }
            stalls = stalls_now
            samples.append(s)
            print(json.dumps(s), flush=True)
            if time.monotonic() >= end:
                break
        soak_s = time.monotonic() - t0
        load.stop.set()
        thread.join(120)
        achieved = (load.acked - acked_before) / soak_s
    finally:
        cluster.stop()
        if args.dir is None:  # a temporary one: about 2 GB per node after 30 minutes
            shutil.rmtree(base, ignore_errors=True)
    tail = samples[len(samples) // 3 :]
    ts = [s["t"] for s in tail]
    nodes = list(samples[0]["rss_mb"])
    rss_growth = max(slope_per_hour(ts, [s["rss_mb"][i] for s in tail]) for i in nodes)
    disk_growth = max(slope_per_hour(ts, [s["disk_mb"][i] for s in tail]) for i in nodes)
    floor_growth = max(
        slope_per_hour(
            *floor_series(
                ts,
                [s["disk_min_mb"][i] for s in tail],
                max(1, round(FLOOR_WINDOW_S / args.sample_s)),
            )
        )
        for i in nodes
    )
    part_growth = {
        part: round(slope_per_hour(ts, [s["disk_parts_mb"][part] for s in tail]), 1)
        for part in tail[0]["disk_parts_mb"]
    }
    p99s = [s["p99_ms"] for s in samples if s["p99_ms"] is not None]
    worst = max(
        (s for s in samples if s["p99_ms"] is not None), key=lambda s: s["p99_ms"], default=None
    )
    # What one retention window holds at the rate achieved (per node: every node has it all).
    retained_mb = achieved * args.size * args.retention_minutes * 60 / MB
    out = {
        "partition_groups": cluster.partition_groups,
        "minutes": args.minutes,
        "retention_minutes": args.retention_minutes,
        "record_bytes": args.size,
        "max_rate": round(max_rate),
        "rate": round(rate),
        "achieved_rate": round(achieved),
        "acked": load.acked,
        "errors": load.errors,
        "rss_max_mb": max(max(s["rss_mb"].values()) for s in samples),
        "rss_growth_mb_per_hour": round(rss_growth, 1),
        "disk_max_mb": max(max(s["disk_mb"].values()) for s in samples),
        "disk_growth_mb_per_hour": round(disk_growth, 1),
        "disk_floor_growth_mb_per_hour": round(floor_growth, 1),
        "disk_parts_growth_mb_per_hour_node1": part_growth,
        "retained_mb": round(retained_mb, 1),
        "fds_max": max(max(s["fds"].values()) for s in samples),
        "p99_ms_max_interval": max(p99s) if p99s else None,
        "p99_ms_median_interval": statistics.median(p99s) if p99s else None,
        "stalls_total": {i: stall_delta({i: first_stalls[i]}, {i: stalls[i]}) for i in stalls},
        # The machine in the worst p99 interval against its median interval: a worst
        # interval whose CPU wait or steal stands out, with no node stall, was the machine.
        "machine_worst_interval": worst["machine"] if worst else None,
        # Informational, not a target: the tail without the intervals in which the
        # hypervisor took more than STEAL_QUIET_PCT of the CPU (on the shared VM the
        # per-interval p99 followed the steal: correlation 0.88 over a 30-minute soak).
        "p99_ms_max_interval_low_steal": max(
            (
                s["p99_ms"]
                for s in samples
                if s["p99_ms"] is not None and s["machine"].get("steal_pct", 0.0) < STEAL_QUIET_PCT
            ),
            default=None,
        ),
        "p99_steal_correlation": correlation(
            [s["p99_ms"] for s in samples if s["p99_ms"] is not None],
            [s["machine"].get("steal_pct", 0.0) for s in samples if s["p99_ms"] is not None],
        ),
        "machine_median_interval": {
            k: statistics.median(s["machine"].get(k, 0.0) for s in samples)
            for k in samples[0]["machine"]
        },
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    # A soak at a rate the cluster cannot keep up with measures a queue, not the server:
    # the producer falls behind, latency grows with the backlog and, past librdkafka's
    # message timeout (300 s), deliveries fail. Seen on the shared machine when its load
    # rose after the probe (load average 15 -> 60): such a run does not count.
    out["achieved_ratio"] = round(achieved / rate, 3) if rate else 0.0
    targets = {
        "run valid: achieved >= 90% of the offered rate": out["achieved_ratio"] >= 0.9,
        "rss <= 300 MB per node": out["rss_max_mb"] <= 300,
        "rss growth <= 20 MB/hour": out["rss_growth_mb_per_hour"] <= 20,
        "disk growth <= 5% of retained volume per hour": out["disk_growth_mb_per_hour"]
        <= 0.05 * max(retained_mb, 1.0),
        "worst interval p99 <= 3x median": bool(p99s)
        and out["p99_ms_max_interval"] <= 3 * out["p99_ms_median_interval"],
    }
    # Informational, not a target (the is the whole-sample slope above): the same
    # 5% on the floors (floor_series). The floor itself moves by +-35 MB with where the
    # retention cuts fall (snapshot cut points), so its slope over 20 minutes read -25 to
    # +66 MB/h in the soaks of sessions 22-23 whose five-minute means stayed flat
    # (docs/storage.md).
    out["disk_floor_growth_within_5pct"] = out["disk_floor_growth_mb_per_hour"] <= 0.05 * max(
        retained_mb, 1.0
    )
    print_targets(targets)
    out["targets_met"] = all(targets.values())
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
