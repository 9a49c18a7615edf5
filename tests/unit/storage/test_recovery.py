"""Crash recovery: torn tails are cut, corruption stops the node loudly."""

from __future__ import annotations

import os
import random

import pytest

from raftlog.storage import CorruptLogError, LogStore, StorageOptions, verify_data_dir
from raftlog.storage.segments import FILE_HEADER_SIZE, FRAME_HEADER_SIZE
from sink.cli import main as cli_main
from tests.helpers.storage import entries, payload

# Large checkpoint thresholds: everything stays in the scanned tail.
TAIL = StorageOptions(index_checkpoint_entries=10**6, index_checkpoint_bytes=1 << 30)
# Today's behaviour kept as an option: damage stops the node (tests/unit/storage/
# test_repair.py covers the default, which repairs).
STOP_TAIL = StorageOptions(
    index_checkpoint_entries=10**6, index_checkpoint_bytes=1 << 30, on_corruption="stop"
)
STOP = StorageOptions(on_corruption="stop")


def crash(store: LogStore) -> None:
    """Drop the store as a SIGKILL would: no closing checkpoint, no cleanup."""
    store._release()


def only_segment(directory: str) -> str:
    seg_dir = os.path.join(directory, "segments")
    names = sorted(os.listdir(seg_dir))
    return os.path.join(seg_dir, names[-1])


def frame_start(k: int, size: int = 100) -> int:
    """Byte offset of the k-th frame (0-based) when all payloads have `size` bytes."""
    return FILE_HEADER_SIZE + k * (FRAME_HEADER_SIZE + size)


def write_batches(directory: str, batches: int, per_batch: int) -> None:
    s = LogStore.open(directory, TAIL)
    for b in range(batches):
        s.append(entries(b * per_batch + 1, per_batch))
    crash(s)


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def test_cut_at_every_byte_of_the_last_frames(tmp_path):
    n = 6
    whole = frame_start(n)
    for cut in range(frame_start(n - 2), whole + 1):
        d = str(tmp_path / f"c{cut}")
        write_batches(d, n, 1)
        path = only_segment(d)
        os.truncate(path, cut)
        s = LogStore.open(d, TAIL)
        intact = (cut - FILE_HEADER_SIZE) // (FRAME_HEADER_SIZE + 100)
        assert s.last_index() == intact, f"cut at byte {cut}"
        assert os.path.getsize(path) == frame_start(intact)
        got = s.read(1, 100, 10**9)
        assert [e.data for e in got] == [payload(i, 1, 100) for i in range(1, intact + 1)]
        # The log keeps working and the repair is durable.
        s.append(entries(intact + 1, 1, term=2))
        s.close()
        s = LogStore.open(d, TAIL)
        assert s.last_index() == intact + 1 and s.term_at(intact + 1) == 2
        s.close()


def test_random_cuts_and_flips_in_the_last_batch(tmp_path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    for r in range(20):
        d = str(tmp_path / f"r{r}")
        # 4 batches of 5; damage lands in the last batch only (never synced to
        # completion, as far as recovery can tell): it must be cut, not fatal.
        write_batches(d, 4, 5)
        path = only_segment(d)
        lo, hi = frame_start(15), frame_start(20)
        if rng.random() < 0.5:
            os.truncate(path, rng.randrange(lo, hi))
        else:
            for _ in range(rng.randint(1, 3)):
                flip(path, rng.randrange(lo, hi))
        s = LogStore.open(d, TAIL)
        last = s.last_index()
        assert 15 <= last < 20, f"seed={seed} round={r}"
        assert [e.index for e in s.read(1, 100, 10**9)] == list(range(1, last + 1))
        s.close()
        assert verify_data_dir(d).ok


def test_damage_in_the_last_batch_with_valid_frames_after_it_is_torn(tmp_path):
    d = str(tmp_path / "l")
    write_batches(d, 2, 10)
    flip(only_segment(d), frame_start(14) + FRAME_HEADER_SIZE + 3)  # payload of entry 15
    s = LogStore.open(d, TAIL)
    assert s.last_index() == 14
    assert s.stats.torn_tail_bytes_cut == frame_start(20) - frame_start(14)
    s.close()


def test_damage_before_a_later_synced_batch_is_corruption(tmp_path):
    d = str(tmp_path / "m")
    write_batches(d, 3, 10)
    path = only_segment(d)
    flip(path, frame_start(14) + FRAME_HEADER_SIZE + 3)  # entry 15, batch 2 of 3
    with pytest.raises(CorruptLogError) as err:
        LogStore.open(d, STOP_TAIL)
    assert err.value.path == path
    assert err.value.offset == frame_start(14)
    assert "CRC-32C mismatch" in str(err.value) and "synced" in str(err.value)
    report = verify_data_dir(d)
    assert not report.ok and path in report.problems[0]
    # The damaged file was not touched.
    assert os.path.getsize(path) == frame_start(30)


def test_corrupt_indexed_entry_is_a_read_error(tmp_path):
    d = str(tmp_path / "ix")
    s = LogStore.open(d, StorageOptions(index_checkpoint_entries=5))
    s.append(entries(1, 20))
    s.close()
    path = only_segment(d)
    flip(path, frame_start(3) + FRAME_HEADER_SIZE + 50)  # entry 4, long since indexed
    s = LogStore.open(d)  # no full scan at open: the damage is found on read
    assert s.read(5, 3, 10**9)[0].index == 5
    with pytest.raises(CorruptLogError) as err:
        s.read(1, 10, 10**9)
    assert err.value.path == path and err.value.offset == frame_start(3)
    s.close()
    assert cli_main(["verify", "-q", d]) == 1


def test_missing_sealed_segment_stops_open(tmp_path):
    d = str(tmp_path / "gone")
    s = LogStore.open(d, StorageOptions(segment_bytes=4096))
    for b in range(10):
        s.append(entries(b * 10 + 1, 10))
    s.close()
    seg_dir = os.path.join(d, "segments")
    victim = sorted(os.listdir(seg_dir))[1]
    os.unlink(os.path.join(seg_dir, victim))
    with pytest.raises(CorruptLogError, match="sealed segment file is missing"):
        LogStore.open(d, STOP)


def test_shortened_sealed_segment_stops_open(tmp_path):
    d = str(tmp_path / "short")
    s = LogStore.open(d, StorageOptions(segment_bytes=4096))
    for b in range(10):
        s.append(entries(b * 10 + 1, 10))
    s.close()
    seg_dir = os.path.join(d, "segments")
    victim = os.path.join(seg_dir, sorted(os.listdir(seg_dir))[0])
    os.truncate(victim, os.path.getsize(victim) - 10)
    with pytest.raises(CorruptLogError, match="shorter than its indexed end"):
        LogStore.open(d, STOP)


def test_interrupted_suffix_truncation_is_redone(tmp_path, monkeypatch):
    d = str(tmp_path / "intent")
    s = LogStore.open(d, TAIL)
    s.append(entries(1, 30))

    def die(_intent):
        raise OSError("simulated crash after the intent was recorded")

    monkeypatch.setattr(s, "_cut_files", die)
    with pytest.raises(OSError):
        s.truncate_suffix(11)
    crash(s)
    monkeypatch.undo()
    s = LogStore.open(d, TAIL)
    assert s.last_index() == 10
    s.append(entries(11, 1, term=3))
    s.close()
    s = LogStore.open(d, TAIL)
    assert (s.last_index(), s.term_at(11)) == (11, 3)
    s.close()


def test_torn_segment_creation_is_removed(tmp_path):
    d = str(tmp_path / "torn-create")
    write_batches(d, 1, 5)
    with open(os.path.join(d, "segments", f"{6:020d}.seg"), "wb") as f:
        f.write(b"RSLOG")  # crash in the middle of writing the file header
    s = LogStore.open(d, TAIL)
    assert s.last_index() == 5
    s.append(entries(6, 1))
    s.close()


def test_failed_store_refuses_further_writes(tmp_path, monkeypatch):
    s = LogStore.open(str(tmp_path / "f"), TAIL)
    s.append(entries(1, 2))

    def enospc(*_a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", enospc)
    with pytest.raises(OSError):
        s.append(entries(3, 1))
    monkeypatch.undo()
    with pytest.raises(Exception, match="failed earlier"):
        s.append(entries(3, 1))
    crash(s)
    s = LogStore.open(str(tmp_path / "f"), TAIL)
    assert s.last_index() == 2
    s.close()


def test_verify_reports_and_cli_exit_codes(tmp_path, capsys):
    d = str(tmp_path / "v")
    write_batches(d, 3, 4)
    assert cli_main(["verify", "-q", d]) == 0
    assert "result: OK" in capsys.readouterr().out
    os.truncate(only_segment(d), frame_start(12) - 7)
    assert cli_main(["verify", "-q", d]) == 0  # a torn tail is a note, not a problem
    assert "would be cut on open" in capsys.readouterr().out
    s = LogStore.open(d)
    assert cli_main(["verify", "-q", d]) == 2  # refuses while the log is open
    s.close()
    assert cli_main(["verify", "-q", str(tmp_path / "nothing")]) == 1
