"""`raftsink demo` and `raftsink chaos` come from the raftsink.commands entry-point group
(the tools live outside the server package); a tool whose extra is missing says which
extra to install before doing anything, and a broken tool does not break `raftsink`."""

from __future__ import annotations

import importlib.metadata

import pytest

from sink import cli


def test_tool_commands_are_discovered_through_entry_points():
    names = {ep.name for ep in importlib.metadata.entry_points(group=cli.COMMAND_GROUP)}
    assert {"demo", "chaos"} <= names
    parser = cli.build_parser()
    args = parser.parse_args(["chaos", "--seconds", "3", "--seed", "5"])
    assert args.seconds == 3 and args.seed == 5 and args.func.__module__ == "chaos.command"
    args = parser.parse_args(["demo", "--storage"])
    assert args.storage and args.func.__module__ == "demos.command"


@pytest.mark.parametrize(
    ("argv", "extra", "module"),
    [
        (["chaos", "--seconds", "1"], "chaos", "chaos.command"),
        (["demo", "--records", "10"], "demo", "demos.command"),
    ],
)
def test_missing_extra_is_named_before_any_work(monkeypatch, tmp_path, capsys, argv, extra, module):
    command = importlib.import_module(module)
    monkeypatch.setattr(command, "REQUIRES", ("no_such_module_raftsink_test",))
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"pip install 'raftsink[{extra}]'" in err
    assert "no_such_module_raftsink_test" in err
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_a_broken_tool_entry_point_does_not_break_the_cli(monkeypatch, capsys):
    class Broken:
        name = "broken"

        def load(self):
            raise ImportError("no module named broken_tool")

    real = importlib.metadata.entry_points

    def entry_points(group: str):
        return [*real(group=group), Broken()] if group == cli.COMMAND_GROUP else real(group=group)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    args = cli.build_parser().parse_args(["verify", "/nonexistent"])
    assert args.command == "verify"
    assert "command 'broken' unavailable" in capsys.readouterr().err


def test_verify_repair_schedules_the_repair_of_a_damaged_node(tmp_path, capsys):
    """`raftsink verify DIR --repair` on a stopped node's directory (DIR/log): it prints
    the report and the scheduled repair, and exits 1 (damage found); without damage it
    schedules nothing and exits 0."""
    from raftlog.storage import LogStore, StorageOptions
    from raftlog.storage.repair import read_marker
    from raftlog.storage.segments import FILE_HEADER_SIZE, FRAME_HEADER_SIZE
    from tests.helpers.storage import entries

    log_dir = tmp_path / "node" / "log"
    s = LogStore.open(str(log_dir), StorageOptions(index_checkpoint_entries=5))
    s.append(entries(1, 20))
    s.close()
    seg = sorted((log_dir / "segments").iterdir())[0]
    with open(seg, "r+b") as f:
        f.seek(FILE_HEADER_SIZE + 9 * (FRAME_HEADER_SIZE + 100) + FRAME_HEADER_SIZE + 7)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))  # entry 10
    assert cli.main(["verify", "-q", str(tmp_path / "node"), "--repair"]) == 1
    out = capsys.readouterr().out
    assert "keeps entries 1..9" in out
    assert "repair scheduled: the next start repairs from entry 10" in out
    assert read_marker(str(log_dir))[0] == 10
    assert cli.main(["verify", "-q", str(tmp_path / "node")]) == 1  # plain verify: read-only
    assert read_marker(str(log_dir))[0] == 10
    capsys.readouterr()
    healthy = tmp_path / "healthy" / "log"
    s = LogStore.open(str(healthy))
    s.append(entries(1, 5))
    s.close()
    assert cli.main(["verify", "-q", str(healthy.parent), "--repair"]) == 0
    assert "nothing damaged to schedule" in capsys.readouterr().out
    assert read_marker(str(healthy)) is None


def test_verify_reports_damaged_snapshots_and_what_the_next_start_does(tmp_path, capsys):
    """`raftsink verify` checks the snapshot files beside the log (read-only): a damaged
    snapshot is a problem (exit 1); the report says whether it is the log's base (the
    next start rebuilds the node's storage from the leader as a replacement) or one
    the node can do without (set aside, nothing lost)."""
    from raftlog.core.log_reader import Snapshot
    from raftlog.entry import SnapshotMeta
    from raftlog.runtime import SnapshotStore
    from raftlog.storage import LogStore
    from tests.helpers.storage import entries

    node = tmp_path / "node"
    s = LogStore.open(str(node / "log"))
    s.append(entries(1, 20))
    s.truncate_prefix(10)  # the log now starts after its base snapshot, entry 10
    s.close()
    snaps = SnapshotStore(str(node / "snapshots"))
    for index in (5, 10):
        snaps.save(Snapshot(SnapshotMeta(index, 1, b""), b"state-%d" % index))
    files = sorted(p.name for p in (node / "snapshots").iterdir())

    def damage(index: int) -> None:
        path = next((node / "snapshots").glob(f"snapshot-{index:020d}-*.snap"))
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0x5A
        path.write_bytes(bytes(raw))

    assert cli.main(["verify", "-q", str(node)]) == 0
    assert "snapshots: 2 intact (entries 5..10)" in capsys.readouterr().out
    damage(5)
    assert cli.main(["verify", "-q", str(node)]) == 1
    out = capsys.readouterr().out
    assert "snapshot-00000000000000000005-1.snap is damaged" in out
    assert "not the log's base" in out and "nothing is lost" in out
    damage(10)
    assert cli.main(["verify", "-q", str(node)]) == 1
    out = capsys.readouterr().out
    assert "the base snapshot (entry 10" in out and "rebuilds it from the leader" in out
    assert sorted(p.name for p in (node / "snapshots").iterdir()) == files  # read-only
