"""Errors raised by raftlog.storage. Each names what is wrong and where."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every storage error."""


class CorruptLogError(StorageError):
    """Data on disk that is not a torn tail: the node must stop, never skip it.

    path/offset locate the first bad byte range (offset is a byte position in
    the file), so an operator can inspect it with `raftsink verify`.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"corrupt log data in {path} at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.marked = False
        """The store recorded this damage in its repair marker (repair.py): a restart
        with on_corruption "repair" repairs it."""


class LogRangeError(StorageError, IndexError):
    """An index outside [first_index, last_index] was asked for."""


class DataDirLockedError(StorageError):
    """Another process already holds the data directory."""


class StorageClosedError(StorageError):
    """The store or its disk queue was closed (or failed) before the operation ran."""
