"""raftlog.storage.identity: which incarnation a group's storage runs under."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from raftlog.entry import HardState
from raftlog.storage import LogStore
from raftlog.storage.identity import FILE_NAME, IdentityError, IdentityFile, resolve


def _open(path: str) -> LogStore:
    return LogStore.open(os.path.join(path, "log"))


def test_new_storage_gets_the_host_incarnation_and_keeps_it(tmp_path):
    d = str(tmp_path)
    with _open(d) as store:
        ident = IdentityFile(d, node_id=1, cluster_id="c1")
        g = resolve(ident, 0, store)
        assert g.new and not g.legacy and g.incarnation == ident.incarnation
        assert g.cluster_id == "c1" and store.identity_stamp() == g.incarnation
    with _open(d) as store:
        again = resolve(IdentityFile(d, node_id=1), 0, store)
        assert not again.new and again.incarnation == g.incarnation
        assert again.cluster_id == "c1"


def test_a_deleted_index_gives_a_new_incarnation(tmp_path):
    d = str(tmp_path)
    with _open(d) as store:
        first = resolve(IdentityFile(d, 1), 0, store).incarnation
        store.save_hard_state(HardState(3, 2, 0))

    shutil.rmtree(os.path.join(d, "log", "index"))
    with _open(d) as store:
        g = resolve(IdentityFile(d, 1), 0, store)
        assert g.new and g.incarnation != first and "index" in g.reason


def test_a_wiped_directory_gets_a_new_incarnation(tmp_path):
    d = str(tmp_path / "data")
    with _open(d) as store:
        first = resolve(IdentityFile(d, 1), 0, store).incarnation

    shutil.rmtree(d)
    with _open(d) as store:
        g = resolve(IdentityFile(d, 1), 0, store)
        assert g.new and g.incarnation != first and not g.legacy


def test_storage_from_before_incarnations_adopts_one_as_legacy(tmp_path):
    d = str(tmp_path)
    with _open(d) as store:
        store.save_hard_state(HardState(4, 1, 0))  # an old node: no IDENTITY, no stamp
    with _open(d) as store:
        g = resolve(IdentityFile(d, 1), 0, store)
        assert g.legacy and g.new
    with _open(d) as store:
        g2 = resolve(IdentityFile(d, 1), 0, store)
        assert g2.legacy and not g2.new and g2.incarnation == g.incarnation


def test_another_clusters_or_nodes_directory_is_refused(tmp_path):
    d = str(tmp_path)
    IdentityFile(d, node_id=1, cluster_id="prod")
    with pytest.raises(IdentityError, match="belongs to cluster 'prod', not 'test'"):
        IdentityFile(d, node_id=1, cluster_id="test")
    with pytest.raises(IdentityError, match="holds the data of node 1, not node 2"):
        IdentityFile(d, node_id=2)
    IdentityFile(d, node_id=1)  # no cluster id configured: the directory's is taken


def test_an_unreadable_identity_file_is_refused_with_what_to_do(tmp_path):
    d = str(tmp_path)
    with open(os.path.join(d, FILE_NAME), "w") as f:
        f.write("{not json")
    with pytest.raises(IdentityError, match="move it away"):
        IdentityFile(d, 1)
    with open(os.path.join(d, FILE_NAME), "w") as f:
        json.dump({"version": 1, "incarnation": -5}, f)
    with pytest.raises(IdentityError, match="bad incarnation"):
        IdentityFile(d, 1)


def test_a_group_deleted_on_purpose_comes_back_with_a_fresh_incarnation(tmp_path):
    d = str(tmp_path)
    ident = IdentityFile(d, 1)
    with _open(os.path.join(d, "g7")) as store:
        first = resolve(ident, 7, store).incarnation
    assert first == ident.incarnation
    ident.forget_group(7)

    shutil.rmtree(os.path.join(d, "g7"))
    with _open(os.path.join(d, "g7")) as store:
        g = resolve(ident, 7, store)
        assert g.incarnation not in (first, 0)


def test_verify_reports_what_repair_would_do(tmp_path):
    from raftlog.entry import EntryType, LogEntry
    from raftlog.storage import verify_data_dir

    d = str(tmp_path)
    with _open(d) as store:
        resolve(IdentityFile(d, 1), 0, store)
        store.append([LogEntry(i, 1, EntryType.DATA, b"x" * 100) for i in range(1, 50)])
        store.save_hard_state(HardState(1, 1, 49))
    report = verify_data_dir(os.path.join(d, "log"))
    assert report.ok and report.repair() == "nothing to repair"
    assert report.identity_stamp and report.identity_stamp == report.identity_file
    seg_dir = os.path.join(d, "log", "segments")
    seg = os.path.join(seg_dir, os.listdir(seg_dir)[0])
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) // 3)
        f.write(b"\xff\xfe")
    report = verify_data_dir(os.path.join(d, "log"))
    assert not report.ok
    # issue 12: damage is repaired (the intact prefix kept, the rest from the peers)
    assert report.repair_plan() == {"kept": [1, 16], "fetched_from": 17, "cut_up_to": 49}
    assert "keeps entries 1..16" in report.repair() and "replacement" in report.repair()
    assert "repair: keeps entries 1..16" in report.to_text()
