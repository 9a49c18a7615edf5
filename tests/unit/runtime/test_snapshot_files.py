"""Snapshot files: round trip, and damaged files are a clear CorruptLogError."""

from __future__ import annotations

import os

import pytest

from raftlog.core.log_reader import Snapshot
from raftlog.entry import SnapshotMeta
from raftlog.runtime import SnapshotStore
from raftlog.storage import CorruptLogError


def saved(tmp_path) -> str:
    store = SnapshotStore(str(tmp_path))
    store.save(Snapshot(SnapshotMeta(10, 2, b"members"), b"state" * 100))
    (name,) = [n for n in os.listdir(tmp_path) if n.endswith(".snap")]
    return os.path.join(tmp_path, name)


def test_round_trip_and_chunks(tmp_path):
    saved(tmp_path)
    store = SnapshotStore(str(tmp_path))
    snap = store.load()
    assert snap.meta == SnapshotMeta(10, 2, b"members") and snap.data == b"state" * 100
    assert store.chunk(490, 100) == (b"state" * 2, True)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda b: b"NOTASNAP" + b[8:], "bad magic"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC-32C mismatch"),
        (lambda b: b[:-10], "wrong length"),
        (lambda b: b[:20], "cut short"),
    ],
)
def test_damaged_snapshot_is_reported(tmp_path, damage, match):
    path = saved(tmp_path)
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(damage(raw))
    with pytest.raises(CorruptLogError, match=match) as err:
        SnapshotStore(str(tmp_path))
    assert err.value.path == path


def test_leftover_temp_file_is_removed(tmp_path):
    saved(tmp_path)
    open(os.path.join(tmp_path, "snapshot-x.snap.tmp"), "wb").close()
    SnapshotStore(str(tmp_path))
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))
