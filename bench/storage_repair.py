"""Open time of a healthy log vs a repair (issue 12): a sealed segment in the middle of a
256 MiB log is deleted; the repair scans the kept prefix frame by frame, cuts the rest,
and recovery rescans the prefix to rebuild the index. Last line: JSON.

    python bench/storage_repair.py
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from raftlog.entry import EntryType, LogEntry
from raftlog.storage import LogStore, StorageOptions

ENTRIES = 64 * 1024
PAYLOAD = 4096


def main() -> None:
    d = tempfile.mkdtemp(prefix="repair-bench-")
    opts = StorageOptions(segment_bytes=32 << 20)
    try:
        s = LogStore.open(d, opts)
        data = os.urandom(PAYLOAD)
        for b in range(0, ENTRIES, 512):
            s.append([LogEntry(i, 1, EntryType.DATA, data) for i in range(b + 1, b + 513)])
        s.close()
        t = time.perf_counter()
        LogStore.open(d, opts).close()
        healthy = time.perf_counter() - t
        seg_dir = os.path.join(d, "segments")
        segs = sorted(os.listdir(seg_dir))
        os.unlink(os.path.join(seg_dir, segs[len(segs) // 2 + 1]))
        t = time.perf_counter()
        s = LogStore.open(d, opts)
        repair = time.perf_counter() - t
        assert s.repair is not None
        kept = s.repair.kept_last
        s.close()
    finally:
        shutil.rmtree(d)
    kept_mib = kept * PAYLOAD / (1 << 20)
    print(
        f"log {ENTRIES * PAYLOAD >> 20} MiB in {len(segs)} segments: healthy open "
        f"{healthy * 1000:.1f} ms; repair open {repair * 1000:.0f} ms, kept {kept} of "
        f"{ENTRIES} entries ({kept_mib:.0f} MiB)"
    )
    print(
        json.dumps(
            {
                "healthy_open_ms": round(healthy * 1000, 1),
                "repair_open_ms": round(repair * 1000),
                "kept_mib": round(kept_mib),
                "repair_ms_per_kept_mib": round(repair * 1000 / kept_mib, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
