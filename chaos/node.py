"""`python -m chaos.node serve ...`: `raftsink serve` with a disk-stall hook.

The campaign starts its nodes through this wrapper instead of `sink.cli` so it
can slow down a node's disk without touching raftlog: before handing over to
the normal command line, os.fsync and os.fdatasync are wrapped. While the file
named by RAFTSINK_CHAOS_DISK_STALL_FILE exists, every fsync/fdatasync first
waits: if the file holds a number, that many seconds (a slow disk); if it holds
"stall", until the file is removed (a stuck disk). The storage's writer thread
syncs, so the node keeps serving and answering Raft, but nothing it writes
becomes durable (no acknowledgement can count on it) until the stall ends.
Without the variable the wrapper changes nothing.
"""

from __future__ import annotations

import os
import sys
import time

STALL_ENV = "RAFTSINK_CHAOS_DISK_STALL_FILE"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _wait(path: str) -> None:
    text = _read(path)
    if text is None:
        return
    if text == "stall":
        while _read(path) == "stall":
            time.sleep(0.02)
        return
    try:
        delay = float(text)
    except ValueError:
        return
    if delay > 0:
        time.sleep(min(delay, 60.0))


def install_disk_stall_hook(path: str) -> None:
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd):
        _wait(path)
        return real_fsync(fd)

    def fdatasync(fd):
        _wait(path)
        return real_fdatasync(fd)

    os.fsync = fsync
    os.fdatasync = fdatasync


def main(argv: list[str]) -> int:
    path = os.environ.get(STALL_ENV)
    if path:
        install_disk_stall_hook(path)
    from sink.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
