"""`raftsink demo --storage`: the storage layer's crash demo (no cluster, no Spark).

A child process appends through the DiskQueue from many concurrent submitters and
reports each durable batch on stdout; the parent kills it with SIGKILL at a random
moment, reopens the log, and checks that every reported entry is there, intact. Several rounds, then a summary.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from raftlog.entry import EntryType, LogEntry
from raftlog.storage import DiskQueue, LogStore, StorageOptions, verify_data_dir

_ROUNDS = 3
_SUBMITTERS = 8


def payload_for(index: int, size: int) -> bytes:
    """Deterministic content of entry index, so the parent can check it."""
    seed = index.to_bytes(8, "little")
    block = zlib.crc32(seed).to_bytes(4, "little") * 16
    return (seed + block * (size // len(block) + 1))[:size]


async def _writer(data_dir: str, entry_size: int) -> None:
    store = LogStore.open(data_dir, StorageOptions(segment_bytes=8 * 1024 * 1024))
    queue = DiskQueue(store)
    term = store.last_term() + 1
    out = sys.stdout

    async def submitter() -> None:
        while True:
            n = random.randint(1, 32)
            start = queue.last_index() + 1
            entries = [
                LogEntry(i, term, EntryType.DATA, payload_for(i, entry_size))
                for i in range(start, start + n)
            ]
            last = await queue.append(entries)
            out.write(f"{last}\n")
            out.flush()
            queue.set_applied(last)
            await queue.wait_for_space()

    await asyncio.gather(*(submitter() for _ in range(_SUBMITTERS)))


def _run_and_kill(data_dir: str, entry_size: int, seconds: float) -> int:
    """Run a writer child for `seconds`, SIGKILL it; the last durable index it reported."""
    child = subprocess.Popen(
        [sys.executable, "-m", "demos.storage_demo", "writer", data_dir, str(entry_size)],
        stdout=subprocess.PIPE,
        text=True,
    )
    reported = 0

    def read_reports() -> None:
        nonlocal reported
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip():
                reported = max(reported, int(line))

    reader = threading.Thread(target=read_reports, daemon=True)
    reader.start()
    exited = threading.Event()
    threading.Thread(target=lambda: (child.wait(), exited.set()), daemon=True).start()
    if exited.wait(seconds):
        raise RuntimeError(f"demo writer exited early with code {child.returncode}")
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join()
    return reported


def storage_demo(data_dir: str | None, seconds: float, seed: int | None) -> int:
    seed = seed if seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    own_dir = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="raftsink-demo-")
    print(f"raftsink storage demo: data in {data_dir}, seed {seed}")
    print(
        f"{_ROUNDS} rounds: a writer appends from {_SUBMITTERS} concurrent submitters, "
        "then is killed with SIGKILL; the log is reopened and checked"
    )
    total_reported = 0
    ok = True
    for rnd in range(1, _ROUNDS + 1):
        entry_size = rng.choice([100, 1024, 16 * 1024])
        reported = _run_and_kill(data_dir, entry_size, seconds * rng.uniform(0.5, 1.0))
        t0 = time.perf_counter()
        store = LogStore.open(data_dir)
        reopen_ms = (time.perf_counter() - t0) * 1000
        try:
            last = store.last_index()
            bad = 0
            if last < reported:
                print(f"  round {rnd}: LOST entries {last + 1}..{reported}")
                ok = False
            checked = 0
            idx = store.first_index()
            while idx <= min(last, reported):
                for e in store.read(idx, 4096, 64 * 1024 * 1024):
                    if e.data != payload_for(e.index, len(e.data)):
                        bad += 1
                    checked += 1
                    idx = e.index + 1
            ok = ok and bad == 0
            print(
                f"  round {rnd}: {entry_size} B entries, killed at durable index {reported}; "
                f"reopened in {reopen_ms:.1f} ms with last index {last}; "
                f"{checked} entries checked, {bad} damaged"
            )
        finally:
            store.close()
        total_reported = reported
    report = verify_data_dir(data_dir)
    print(report.to_text())
    summary = {
        "durable_entries_reported": total_reported,
        "verify_ok": report.ok,
        "rounds": _ROUNDS,
        "seed": seed,
    }
    print(json.dumps(summary))
    if own_dir:
        import shutil

        shutil.rmtree(data_dir, ignore_errors=True)
    return 0 if ok and report.ok else 1


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "writer":
    asyncio.run(_writer(sys.argv[2], int(sys.argv[3])))
