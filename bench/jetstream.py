"""The NATS JetStream peer of bench/produce.py: 3 nats-server processes (replicas=3,
file storage), nats-py publish_async throughput and open-loop latency, and the phase
that adds the `jetstream_*` figures to the benchmark's JSON. NOTE: nats-server 2.9 does
not fsync per message (acks once a quorum has it in the page cache)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request

from bench.common import CpuMeter, percentile
from bench.kafka_load import MiB
from raftlog.process_cluster import free_ports


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
