"""Durable Raft log storage: segment files, an LMDB index, a batched disk queue.

Public surface:
    LogStore        synchronous log on disk (open, append, read, truncate, recover)
    DiskQueue       asyncio front: group commit, in-memory tail (one group's log)
    DiskWriter      the writer thread: one round and one fsync round for many DiskQueues
    LogEnvironment  the group logs of one data directory sharing one LMDB index
    StorageOptions  typed configuration with documented defaults
    DiskGuard       the free-space reserve of the volumes a node writes (DiskLevel)
    verify_data_dir read-only integrity check of a data directory
    schedule_repair make the next start repair what verify found (REPAIR marker)
"""

from raftlog.storage.disk_guard import DiskGuard, DiskLevel, reserve_for
from raftlog.storage.disk_queue import DiskQueue
from raftlog.storage.disk_writer import DiskWriter, WriterStats
from raftlog.storage.environment import LogEnvironment
from raftlog.storage.errors import (
    CorruptLogError,
    DataDirLockedError,
    LogRangeError,
    StorageClosedError,
    StorageError,
)
from raftlog.storage.log_store import LogStore, StoreStats
from raftlog.storage.options import StorageOptions
from raftlog.storage.verify import VerifyReport, schedule_repair, verify_data_dir

__all__ = [
    "CorruptLogError",
    "DataDirLockedError",
    "DiskGuard",
    "DiskLevel",
    "DiskQueue",
    "DiskWriter",
    "LogEnvironment",
    "LogRangeError",
    "LogStore",
    "StorageClosedError",
    "StorageError",
    "StorageOptions",
    "StoreStats",
    "VerifyReport",
    "WriterStats",
    "reserve_for",
    "schedule_repair",
    "verify_data_dir",
]
