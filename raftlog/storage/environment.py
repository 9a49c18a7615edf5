"""LogEnvironment: the group logs of one data directory, sharing one LMDB index.

Layout under root:
    LOCK                      flock held while the environment is open (one process)
    index/                    one LMDB environment holding every group's index,
                              keys prefixed by the group id (index.py)
    groups/<group id>/segments/  each group's segment files (format of LogStore)

Why: a LogStore opened on its own maps its own LMDB environment of
lmdb_map_bytes (64 GiB) of address space, so ~2,000 logs exhaust a process's
128 TiB; here the map is reserved once per data directory. Each group log also
skips its per-directory LOCK (the root's lock covers it), so a group costs no
file descriptor until it has a segment open.

Map growth: the shared map starts at lmdb_map_bytes and doubles when a write
does not fit (index.IndexEnv.write), so no group fails for a full map.

Older layouts (compatibility, not migration; nothing is rewritten):
- a groups/<id>/ directory with its own index/ (written by LogStore.open: one
  LMDB environment per log) is opened as it is, in its own environment and
  with its own LOCK; its keys live in that directory, so deleting the group is
  removing the directory. New groups always go to the shared index.
- a root laid out as ONE log (LogStore.open's segments/ and index/ with
  unprefixed keys, the single-group node's data directory) is refused:
  reading it as a shared index would take its keys for group prefixes.

Invariants: a group log is open at most once per environment; the environment
closes every log still open before its LMDB environment.
"""

from __future__ import annotations

import fcntl
import os
import threading

import lmdb

from raftlog.storage.errors import DataDirLockedError, StorageClosedError, StorageError
from raftlog.storage.index import IndexEnv, group_prefix
from raftlog.storage.log_store import LogStore
from raftlog.storage.options import StorageOptions

_MAX_GROUP_ID = 2**63 - 1


class LogEnvironment:
    """Opens and tracks the group logs of one data directory. Open with LogEnvironment.open."""

    def __init__(self, root: str, options: StorageOptions) -> None:
        self.root = root
        self.options = options
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._index: IndexEnv | None = None
        self._logs: dict[int, LogStore] = {}
        self._closed = False

    @classmethod
    def open(cls, root: str, options: StorageOptions | None = None) -> LogEnvironment:
        """Open (or create) the data directory root. DataDirLockedError if it is in use."""
        env = cls(root, options or StorageOptions())
        if os.path.isdir(os.path.join(root, "segments")):
            raise StorageError(
                f"{root} holds a single log (LogStore layout: segments/ and an unprefixed "
                "index/), not a group environment: open it with LogStore.open"
            )
        os.makedirs(os.path.join(root, "groups"), exist_ok=True)
        fd = os.open(os.path.join(root, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLockedError(f"data directory {root} is in use") from None
        env._lock_fd = fd
        try:
            env._index = IndexEnv(os.path.join(root, "index"), env.options.lmdb_map_bytes)
        except BaseException:
            env.close()
            raise
        return env

    def group_directory(self, group_id: int) -> str:
        return os.path.join(self.root, "groups", str(group_id))

    def _has_own_environment(self, group_id: int) -> bool:
        """groups/<id>/ was written by LogStore.open, with its own LMDB environment."""
        return os.path.exists(os.path.join(self.group_directory(group_id), "index", "data.mdb"))

    def own_environment_groups(self) -> list[int]:
        """Ids of the group logs on disk in their own LMDB environment (older layout)."""
        root = os.path.join(self.root, "groups")
        ids = sorted(int(n) for n in os.listdir(root) if n.isdigit())
        return [g for g in ids if self._has_own_environment(g)]

    @property
    def map_resizes(self) -> int:
        """Times the shared LMDB map was grown since open."""
        return self._index.resizes if self._index is not None else 0

    def open_log(self, group_id: int, options: StorageOptions | None = None) -> LogStore:
        """Open (or create) group_id's log, recovering it like LogStore.open.

        options: this log's options if not the environment's (e.g. on_corruption
        "stop" for a group whose cluster cannot vouch for a repair). StorageError if
        that group's log is already open here (close it first).
        """
        if not isinstance(group_id, int) or not 0 <= group_id <= _MAX_GROUP_ID:
            raise ValueError(f"group id must be an integer in [0, 2**63), got {group_id!r}")
        with self._lock:
            if self._closed or self._index is None:
                raise StorageClosedError(f"log environment {self.root} is closed")
            current = self._logs.get(group_id)
            if current is not None and not current.closed:
                raise StorageError(f"log of group {group_id} is already open in {self.root}")
            opts = options or self.options
            if self._has_own_environment(group_id):
                log = LogStore.open(self.group_directory(group_id), opts)
            else:
                log = LogStore.open(
                    self.group_directory(group_id),
                    opts,
                    shared_index=self._index,
                    group_id=group_id,
                )
            self._logs[group_id] = log
            return log

    def delete_group(self, group_id: int) -> None:
        """Forget group_id's log: every index key under its prefix, durably (a log in
        its own environment keeps its keys in groups/<id>/: removing it removes them).

        The group's log must be closed; the caller removes groups/<id>/ after
        this returns (a crash in between leaves only files, which a reopened
        empty log of that id would find: so remove the files before reusing
        the id). Idempotent.
        """
        prefix = group_prefix(group_id)
        with self._lock:
            if self._closed or self._index is None:
                raise StorageClosedError(f"log environment {self.root} is closed")
            current = self._logs.get(group_id)
            if current is not None and not current.closed:
                raise StorageError(f"log of group {group_id} is open; close it first")
            self._logs.pop(group_id, None)
            ix = self._index

            def forget(txn: lmdb.Transaction) -> None:
                for db in (ix.entries, ix.segments, ix.meta, ix.configs):
                    cur = txn.cursor(db=db)
                    if cur.set_range(prefix):
                        while cur.key()[: len(prefix)] == prefix and cur.delete():
                            pass

            ix.write(forget, durable=True)

    def open_groups(self) -> list[int]:
        """Ids of the group logs open now, ascending."""
        with self._lock:
            return sorted(g for g, log in self._logs.items() if not log.closed)

    def close(self) -> None:
        """Close every log still open, then the index and the lock. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs, self._logs = list(self._logs.values()), {}
        try:
            for log in logs:
                log.close()
        finally:
            if self._index is not None:
                self._index.close()
                self._index = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> LogEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
