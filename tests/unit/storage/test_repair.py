"""Damaged storage is repaired, not fatal (issue 12; raftlog/storage/repair.py): recovery
keeps the intact prefix, cuts the rest, says so (`LogStore.repair`), and keeps a
durable marker until the runtime forgets it; `verify` reports the same plan without
changing anything. The runtime's side (a new incarnation, no vote until re-admitted)
is tests/unit/runtime/test_repair_runtime.py."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from raftlog.storage import (
    CorruptLogError,
    DataDirLockedError,
    LogStore,
    StorageOptions,
    schedule_repair,
    verify_data_dir,
)
from raftlog.storage.repair import MARKER, read_marker, why_not_repairable, write_marker
from raftlog.storage.segments import FILE_HEADER_SIZE, FRAME_HEADER_SIZE
from tests.helpers.storage import entries

TAIL = StorageOptions(index_checkpoint_entries=10**6, index_checkpoint_bytes=1 << 30)
SEGS = StorageOptions(segment_bytes=4096)


def crash(store: LogStore) -> None:
    store._release()


def frame_start(k: int, size: int = 100) -> int:
    return FILE_HEADER_SIZE + k * (FRAME_HEADER_SIZE + size)


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def seg_files(d: str) -> list[str]:
    seg_dir = os.path.join(d, "segments")
    return [os.path.join(seg_dir, n) for n in sorted(os.listdir(seg_dir))]


def tree_digest(d: str) -> str:
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(d)):
        for name in sorted(files):
            if name == "LOCK":
                continue
            path = os.path.join(root, name)
            h.update(path.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def three_synced_batches(d: str) -> None:
    s = LogStore.open(d, TAIL)
    for b in range(3):
        s.append(entries(b * 10 + 1, 10))
    crash(s)


def many_segments(d: str, n: int = 200) -> None:
    s = LogStore.open(d, SEGS)
    for b in range(n // 10):
        s.append(entries(b * 10 + 1, 10))
    s.close()


def check_prefix(s: LogStore, last: int) -> None:
    assert s.last_index() == last
    if last:
        got = s.read(1, last, 1 << 30)
        assert [e.index for e in got] == list(range(1, last + 1))
        assert got == entries(1, last)


def test_a_bad_crc_before_a_later_sync_keeps_the_prefix(tmp_path):
    d = str(tmp_path / "flip")
    three_synced_batches(d)
    flip(seg_files(d)[0], frame_start(14) + FRAME_HEADER_SIZE + 3)  # entry 15
    before = verify_data_dir(d)
    assert before.repair_plan() == {"kept": [1, 14], "fetched_from": 15, "cut_up_to": 30}
    s = LogStore.open(d, TAIL)
    assert s.repair is not None
    assert (s.repair.kept_first, s.repair.kept_last, s.repair.damaged_from) == (1, 14, 15)
    assert s.repair.dropped_last == 30
    assert "CRC-32C mismatch" in s.repair.reason
    check_prefix(s, 14)
    assert read_marker(d) is not None  # kept until the runtime's new incarnation is durable
    s.append(entries(15, 3, term=2))  # the leader's entries follow the kept prefix
    s.clear_repair_marker()
    s.close()
    s = LogStore.open(d, TAIL)
    assert s.repair is None and s.last_index() == 17 and s.term_at(15) == 2
    s.close()
    assert verify_data_dir(d).ok


def test_a_torn_tail_is_still_cut_without_a_repair(tmp_path):
    d = str(tmp_path / "torn")
    three_synced_batches(d)
    os.truncate(seg_files(d)[0], frame_start(25) + 7)
    s = LogStore.open(d, TAIL)
    assert s.repair is None and s.last_index() == 25
    assert not os.path.exists(os.path.join(d, MARKER))
    s.close()


@pytest.mark.parametrize("how", ["delete", "shorten", "garble-header"])
def test_a_missing_or_short_sealed_segment_keeps_the_entries_before_it(tmp_path, how):
    d = str(tmp_path / how)
    many_segments(d)
    files = seg_files(d)
    assert len(files) > 4
    victim = files[2]
    victim_first = int(os.path.basename(victim)[:20])
    if how == "delete":
        os.unlink(victim)
        kept = victim_first - 1
    elif how == "shorten":
        os.truncate(victim, frame_start(1) + 5)  # one whole frame stays
        kept = victim_first
    else:
        flip(victim, 2)
        kept = victim_first - 1
    plan = verify_data_dir(d).repair_plan()
    assert plan is not None and plan["kept"] == [1, kept], plan
    s = LogStore.open(d, SEGS)
    assert s.repair is not None and s.repair.kept_last == kept
    assert s.repair.dropped_last >= 200
    check_prefix(s, kept)
    # nothing after the cut survives on disk: the next append continues the prefix
    s.append(entries(kept + 1, 30, term=2))
    s.clear_repair_marker()
    s.close()
    s = LogStore.open(d, SEGS)
    assert s.repair is None and s.last_index() == kept + 30 and s.term_at(kept + 1) == 2
    s.close()
    assert verify_data_dir(d).ok


def test_a_deleted_index_keeps_a_log_that_starts_at_one(tmp_path):
    """The files hold every entry: nothing to cut (the lost vote record makes the node
    a replacement through identity.resolve, not through a repair)."""
    d = str(tmp_path / "ix")
    many_segments(d)
    shutil.rmtree(os.path.join(d, "index"))
    s = LogStore.open(d, SEGS)
    assert s.repair is None
    check_prefix(s, 200)
    s.close()


def test_a_deleted_index_of_a_compacted_log_keeps_nothing(tmp_path):
    """Without the index nobody knows where the log starts or the term before it."""
    d = str(tmp_path / "ixc")
    many_segments(d)
    s = LogStore.open(d, SEGS)
    s.truncate_prefix(60)
    s.close()
    shutil.rmtree(os.path.join(d, "index"))
    assert verify_data_dir(d).repair_plan()["kept"] == [1, 0]
    s = LogStore.open(d, SEGS)
    assert s.repair is not None and s.last_index() == 0 and s.first_index() == 1
    assert seg_files(d) == []
    s.close()


def test_damage_found_by_a_read_is_repaired_by_the_next_open(tmp_path):
    d = str(tmp_path / "read")
    s = LogStore.open(d, StorageOptions(index_checkpoint_entries=5))
    s.append(entries(1, 20))
    s.close()
    flip(seg_files(d)[0], frame_start(7) + FRAME_HEADER_SIZE + 50)  # entry 8, indexed
    s = LogStore.open(d)  # no full scan at open: found on read
    assert s.repair is None
    with pytest.raises(CorruptLogError):
        s.read(6, 5, 1 << 30)
    assert read_marker(d)[0] == 6  # conservatively from the read's first entry
    with pytest.raises(Exception, match="failed earlier"):
        s.append(entries(21, 1))  # the store refuses further use: the node restarts
    crash(s)
    plan = verify_data_dir(d).repair_plan()
    assert plan is not None and plan["fetched_from"] == 6
    s = LogStore.open(d)
    assert s.repair is not None and s.repair.kept_last == 5
    check_prefix(s, 5)
    s.close()


def test_a_crash_before_the_marker_is_cleared_repeats_the_repair(tmp_path):
    d = str(tmp_path / "again")
    three_synced_batches(d)
    flip(seg_files(d)[0], frame_start(14) + FRAME_HEADER_SIZE + 3)
    s = LogStore.open(d, TAIL)
    assert s.repair is not None
    crash(s)  # before the runtime made its new incarnation durable
    s = LogStore.open(d, TAIL)
    assert s.repair is not None and s.repair.kept_last == 14  # still a replacement
    check_prefix(s, 14)
    s.close()


def test_a_marker_only_moves_down(tmp_path):
    d = str(tmp_path)
    assert write_marker(d, 50, "first") == 50
    assert write_marker(d, 70, "later, higher") == 50
    assert write_marker(d, 20, "lower") == 20
    assert read_marker(d) == (20, "lower")
    with open(os.path.join(d, MARKER), "w") as f:
        f.write("{garbage")
    assert read_marker(d)[0] == 1  # unreadable: nothing is trusted


def test_stop_mode_keeps_todays_behaviour(tmp_path):
    d = str(tmp_path / "stop")
    three_synced_batches(d)
    flip(seg_files(d)[0], frame_start(14) + FRAME_HEADER_SIZE + 3)
    digest = tree_digest(d)
    stop = StorageOptions(
        index_checkpoint_entries=10**6, index_checkpoint_bytes=1 << 30, on_corruption="stop"
    )
    with pytest.raises(CorruptLogError, match="synced"):
        LogStore.open(d, stop)
    assert tree_digest(d) == digest  # nothing cut, no marker
    write_marker(d, 3, "a read found it")
    d2 = str(tmp_path / "stop2")
    three_synced_batches(d2)
    write_marker(d2, 3, "a read found it")
    with pytest.raises(CorruptLogError, match="from 3 on"):
        LogStore.open(d2, stop)
    with pytest.raises(ValueError, match="on_corruption"):
        StorageOptions(on_corruption="ignore")


def test_verify_reports_the_plan_and_changes_nothing(tmp_path):
    d = str(tmp_path / "v")
    many_segments(d)
    files = seg_files(d)
    os.unlink(files[3])
    first_gone = int(os.path.basename(files[3])[:20])
    digest = tree_digest(d)
    report = verify_data_dir(d)
    assert tree_digest(d) == digest
    assert not report.ok
    assert report.repair_plan() == {
        "kept": [1, first_gone - 1],
        "fetched_from": first_gone,
        "cut_up_to": 200,
    }
    text = report.to_text()
    assert f"keeps entries 1..{first_gone - 1}" in text
    assert f"cuts entries {first_gone}..200" in text and "replacement" in text
    healthy = str(tmp_path / "ok")
    many_segments(healthy)
    ok = verify_data_dir(healthy)
    assert ok.ok and ok.repair_plan() is None and ok.repair() == "nothing to repair"


def test_repair_needs_identity_and_another_voter():
    assert why_not_repairable(True, 3) == ""
    assert "single-node" in why_not_repairable(True, 1)
    assert "identity" in why_not_repairable(False, 3)


def test_verify_repair_schedules_what_a_read_would_find(tmp_path):
    """Damage inside the indexed log is not scanned at open: `raftsink verify --repair`
    records the marker verify's plan names, and the next open repairs from it."""
    d = str(tmp_path / "sched")
    s = LogStore.open(d, StorageOptions(index_checkpoint_entries=5))
    s.append(entries(1, 20))
    s.close()
    flip(seg_files(d)[0], frame_start(11) + FRAME_HEADER_SIZE + 50)  # entry 12, indexed
    s = LogStore.open(d)
    assert s.repair is None  # an open alone does not find it
    s.close()
    report = verify_data_dir(d)
    assert report.repair_plan()["fetched_from"] == 12
    held = LogStore.open(d)
    with pytest.raises(DataDirLockedError):
        schedule_repair(d, report)  # never behind a running node's back
    held.close()
    assert read_marker(d) is None
    assert schedule_repair(d, report) == 12
    assert read_marker(d)[0] == 12
    s = LogStore.open(d)
    assert s.repair is not None and s.repair.kept_last == 11
    check_prefix(s, 11)
    s.close()
    healthy = str(tmp_path / "ok")
    many_segments(healthy)
    assert schedule_repair(healthy, verify_data_dir(healthy)) is None
    assert read_marker(healthy) is None
