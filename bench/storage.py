"""Storage benchmark: LogStore + DiskQueue against raw write+fdatasync.

For entry sizes 100 B, 1 KiB, 64 KiB and 1 MiB, several concurrent submitters
append through the DiskQueue (group commit, fsync on). In the same run, a raw
loop does os.write + os.fdatasync with the same bytes per sync that the queue
achieved, on the same file system, into files rolled at the same 64 MiB as the
segments; ratio = storage MB/s / raw MB/s. The disk
here is shared and noisy (the same raw loop varies 1.5x from one second to
the next), so storage and raw runs alternate in rounds and medians are
compared. Then
sequential and random reads, and the time from opening a large log (2 GiB in
full mode) until it serves a read, after a clean close and after a crash.

    python bench/storage.py [--quick] [--dir DIR]

The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine, print_targets

from raftlog.entry import EntryType, LogEntry
from raftlog.storage import DiskQueue, LogStore, StorageOptions

KiB, MiB, GiB = 1024, 1024 * 1024, 1024 * 1024 * 1024
SIZES = [100, KiB, 64 * KiB, MiB]
SUBMITTERS = 8


def fs_of(path: str) -> str:
    try:
        out = subprocess.run(
            ["df", "-T", path], capture_output=True, text=True, check=True
        ).stdout.splitlines()[-1]
        return out.split()[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


async def storage_append(directory: str, size: int, seconds: float) -> dict:
    store = LogStore.open(directory, StorageOptions())
    q = DiskQueue(store)
    # Distinct payloads, at least 64 MiB of them: reusing one object would
    # keep the kernel's copy source in CPU cache and flatter the storage.
    pool = [os.urandom(size) for _ in range(max(64, min(200_000, (64 * MiB) // size)))]
    window = max(2, min(128, (4 * MiB) // size))
    deadline = time.perf_counter() + seconds
    latencies: list[float] = []

    async def submitter() -> None:
        inflight: collections.deque = collections.deque()
        while time.perf_counter() < deadline:
            i = q.last_index() + 1
            data = pool[i % len(pool)]
            inflight.append((time.perf_counter(), q.append([LogEntry(i, 1, EntryType.DATA, data)])))
            if len(inflight) >= window:
                t0, fut = inflight.popleft()
                await fut
                latencies.append(time.perf_counter() - t0)
                q.set_applied(q.durable_index)
        for t0, fut in inflight:
            await fut
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
    elapsed = time.perf_counter() - t0
    n = store.stats.appended_entries
    batches = max(1, q.stats.batches)
    result = {
        "entries": n,
        "entries_per_s": n / elapsed,
        "mb_s": n * size / elapsed / MiB,
        "fsyncs": store.stats.syncs,
        "avg_batch_entries": n / batches,
        "avg_batch_bytes": n * size / batches,
        "p50_ms": sorted(latencies)[len(latencies) // 2] * 1000 if latencies else 0.0,
    }
    await q.close()
    return result


def settle() -> None:
    """Flush earlier deletions before a timed run: on a file system mounted
    with `discard`, freeing a deleted run's blocks otherwise lands in the
    journal commits that the next run's fdatasyncs wait for."""
    os.sync()


def median_by(runs: list[dict], key: str) -> dict:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def raw_append(directory: str, batch_bytes: int, seconds: float, file_bytes: int) -> dict:
    """os.write + os.fdatasync of batch_bytes at a time, starting a new file
    every file_bytes like the storage's segments do (a file that only grows
    syncs measurably slower on ext4, which would flatter the storage)."""
    buf = os.urandom(max(1, int(batch_bytes)))
    raw_dir = os.path.join(directory, f"raw-{time.monotonic_ns()}")
    os.makedirs(raw_dir)
    total = syncs = 0
    fd, in_file, k = -1, 0, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    try:
        while time.perf_counter() < deadline:
            if fd < 0 or in_file >= file_bytes:
                if fd >= 0:
                    os.close(fd)
                fd = os.open(
                    os.path.join(raw_dir, f"{k}.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                )
                k += 1
                in_file = 0
            n = os.write(fd, buf)
            os.fdatasync(fd)
            total += n
            in_file += n
            syncs += 1
    finally:
        if fd >= 0:
            os.close(fd)
        shutil.rmtree(raw_dir, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    return {"mb_s": total / elapsed / MiB, "syncs_per_s": syncs / elapsed}


def build_log(directory: str, total_bytes: int, entry_size: int) -> int:
    """Write a log of about total_bytes in big batches; returns its last index."""
    store = LogStore.open(directory, StorageOptions())
    data = os.urandom(entry_size)
    per_batch = max(1, (8 * MiB) // entry_size)
    idx = 1
    written = 0
    step = total_bytes // 10
    mark = step
    while written < total_bytes:
        store.append([LogEntry(i, 1, EntryType.DATA, data) for i in range(idx, idx + per_batch)])
        idx += per_batch
        written += per_batch * entry_size
        if written >= mark:
            print(f"  building log: {written / GiB:.2f} GiB", file=sys.stderr)
            mark += step
    store.close()
    return idx - 1


def reads(directory: str, last: int, seconds: float) -> dict:
    store = LogStore.open(directory)
    # Sequential: the whole log (or as much as time allows) in 16 MiB reads.
    t0 = time.perf_counter()
    idx, n, nbytes = 1, 0, 0
    while idx <= last and time.perf_counter() - t0 < seconds:
        got = store.read(idx, 100_000, 16 * MiB)
        n += len(got)
        nbytes += sum(len(e.data) for e in got)
        idx = got[-1].index + 1
    seq_elapsed = time.perf_counter() - t0
    # Random: single-entry reads at uniformly random indexes.
    rng = random.Random(1)
    picks = [rng.randint(1, last) for _ in range(200_000)]
    t0 = time.perf_counter()
    k = 0
    for i in picks:
        store.entry(i)
        k += 1
        if k % 10_000 == 0 and time.perf_counter() - t0 > seconds:
            break
    rand_elapsed = time.perf_counter() - t0
    store.close()
    return {
        "seq_entries_per_s": n / seq_elapsed,
        "seq_mb_s": nbytes / seq_elapsed / MiB,
        "random_reads_per_s": k / rand_elapsed,
    }


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def reopen(directory: str, last: int, crashed: bool) -> float:
    if crashed:
        # A crash leaves up to one checkpoint interval unindexed: reproduce it
        # by appending that much and dropping the store without closing.
        store = LogStore.open(directory)
        data = os.urandom(KiB)
        base = store.last_index() + 1
        n = store.options.index_checkpoint_entries - 1
        store.append([LogEntry(i, 1, EntryType.DATA, data) for i in range(base, base + n)])
        store._release()
    drop_caches()
    t0 = time.perf_counter()
    store = LogStore.open(directory)
    store.entry(store.last_index())
    store.entry(max(1, last // 2))
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 60 s)")
    ap.add_argument("--dir", default=None, help="directory on the file system to test")
    args = ap.parse_args()
    seconds = 3.0 if args.quick else 15.0
    rounds = 3 if args.quick else 5
    big = 512 * MiB if args.quick else 2 * GiB
    base = tempfile.mkdtemp(prefix="rs-bench-", dir=args.dir)
    print(f"machine: {machine()}")
    print(f"directory: {base} ({fs_of(base)}); mode: {'quick' if args.quick else 'full'}")
    figures: dict = {"mode": "quick" if args.quick else "full"}
    try:
        print(
            f"\nappend: {SUBMITTERS} submitters, fsync per batch, {rounds} alternating "
            f"storage/raw rounds of {seconds / rounds:.1f} s per size (medians)"
        )
        print(
            f"{'entry':>8} {'entries/s':>11} {'MB/s':>8} {'batch':>8} {'raw MB/s':>9} {'ratio':>6}"
        )
        for size in SIZES:
            runs, raws = [], []
            for rnd in range(rounds):
                d = os.path.join(base, f"append-{size}-{rnd}")
                settle()
                runs.append(asyncio.run(storage_append(d, size, seconds / rounds)))
                shutil.rmtree(d, ignore_errors=True)
                settle()
                raws.append(
                    raw_append(
                        base,
                        runs[-1]["avg_batch_bytes"],
                        seconds / rounds,
                        StorageOptions().segment_bytes,
                    )
                )
            st = median_by(runs, "mb_s")
            raw = median_by(raws, "mb_s")
            ratio = st["mb_s"] / raw["mb_s"] if raw["mb_s"] else 0.0
            label = f"{size // KiB} KiB" if size >= KiB else f"{size} B"
            print(
                f"{label:>8} {st['entries_per_s']:>11.0f} {st['mb_s']:>8.1f} "
                f"{st['avg_batch_entries']:>8.1f} {raw['mb_s']:>9.1f} {ratio:>6.2f}"
            )
            key = {100: "100b", KiB: "1k", 64 * KiB: "64k", MiB: "1m"}[size]
            figures[f"append_entries_per_s_{key}"] = round(st["entries_per_s"])
            figures[f"append_mb_s_{key}"] = round(st["mb_s"], 1)
            figures[f"raw_mb_s_{key}"] = round(raw["mb_s"], 1)
            figures[f"ratio_{key}"] = round(ratio, 3)
        figures["append_mb_s"] = figures["append_mb_s_64k"]
        figures["raw_mb_s"] = figures["raw_mb_s_64k"]
        figures["ratio"] = figures["ratio_64k"]

        print(f"\nreads and reopen: building a {big / GiB:.1f} GiB log of 1 KiB entries")
        d = os.path.join(base, "big")
        last = build_log(d, big, KiB)
        r = reads(d, last, seconds)
        print(
            f"sequential: {r['seq_entries_per_s']:.0f} entries/s ({r['seq_mb_s']:.0f} MB/s); "
            f"random: {r['random_reads_per_s']:.0f} reads/s"
        )
        figures["seq_entries_per_s"] = round(r["seq_entries_per_s"])
        figures["seq_mb_s"] = round(r["seq_mb_s"], 1)
        figures["random_reads_per_s"] = round(r["random_reads_per_s"])
        clean = reopen(d, last, crashed=False)
        crashed = reopen(d, last, crashed=True)
        cold = drop_caches()
        print(
            f"open {big / GiB:.1f} GiB log until it serves: {clean * 1000:.0f} ms after a clean close, "
            f"{crashed * 1000:.0f} ms after a crash (page cache {'dropped' if cold else 'warm: could not drop'})"
        )
        figures["reopen_log_gib"] = round(big / GiB, 2)
        figures["reopen_clean_s"] = round(clean, 3)
        figures["reopen_2gb_s"] = round(max(clean, crashed), 3)
        targets = {
            "ratio >= 0.7": figures["ratio"] >= 0.7,
            "reopen <= 1 s": figures["reopen_2gb_s"] <= 1.0,
            "random reads >= 100k/s": figures["random_reads_per_s"] >= 100_000,
        }
        print_targets(targets)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
