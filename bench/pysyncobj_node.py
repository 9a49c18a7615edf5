"""One PySyncObj node for bench/raft.py's side-by-side comparison.

PySyncObj does NOT fsync (its journal is an mmap that is never flushed), so
its figures are an upper bound for it. The node that becomes leader runs the
load and prints one JSON line; the others just serve.

    python bench/pysyncobj_node.py SELF PARTNER,PARTNER DATA_DIR SIZE SECONDS MODE ARG
      MODE=window ARG=in-flight count | MODE=rate ARG=entries/s
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from pysyncobj import SyncObj, SyncObjConf, replicated


class Log(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self.count = 0

    @replicated
    def add(self, data: bytes) -> int:
        self.count += 1
        return self.count


def main() -> None:
    self_addr, partners, data_dir, size, seconds, mode, arg = sys.argv[1:8]
    conf = SyncObjConf(journalFile=os.path.join(data_dir, "journal"), commandsQueueSize=200_000)
    node = Log(self_addr, partners.split(","), conf)
    deadline = time.monotonic() + 60
    while node._getLeader() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # let the cluster settle after the first election
    if not node._isLeader():
        time.sleep(float(seconds) + 30)
        return
    payload = os.urandom(int(size))
    lat: list[float] = []
    done = 0
    lock = threading.Lock()
    stop_at = time.monotonic() + float(seconds)
    if mode == "window":
        slots = threading.Semaphore(int(arg))

        def cb(result, err, t0=0.0):
            nonlocal done
            with lock:
                if err == 0:
                    done += 1
                    lat.append(time.monotonic() - t0)
            slots.release()

        start = time.monotonic()
        while time.monotonic() < stop_at:
            slots.acquire()
            t0 = time.monotonic()
            node.add(payload, callback=lambda r, e, t0=t0: cb(r, e, t0))
    else:
        rate = float(arg)
        start = time.monotonic()
        k = 0
        while time.monotonic() < stop_at:
            due = start + k / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t0 = time.monotonic()

            def cb(result, err, t0=t0):
                nonlocal done
                with lock:
                    if err == 0:
                        done += 1
                        lat.append(time.monotonic() - t0)

            node.add(payload, callback=cb)
            k += 1
    elapsed = time.monotonic() - start
    time.sleep(1.0)  # late callbacks
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * (len(lat) - 1)))] * 1000 if lat else 0.0  # noqa: E731
    print(
        json.dumps({"entries_per_s": done / elapsed, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}),
        flush=True,
    )
    os._exit(0)


if __name__ == "__main__":
    main()
