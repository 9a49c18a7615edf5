"""Shared builders for storage tests."""

from __future__ import annotations

import hashlib

from raftlog.entry import EntryType, LogEntry
from raftlog.storage import StorageOptions

SMALL = StorageOptions(segment_bytes=4096, index_checkpoint_entries=8, index_checkpoint_bytes=2048)


def payload(index: int, term: int, size: int) -> bytes:
    seed = hashlib.blake2b(f"{index}/{term}".encode(), digest_size=16).digest()
    return (seed * (size // 16 + 1))[:size]


def entries(start: int, n: int, term: int = 1, size: int = 100) -> list[LogEntry]:
    return [
        LogEntry(i, term, EntryType.DATA, payload(i, term, size)) for i in range(start, start + n)
    ]
