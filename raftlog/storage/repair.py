"""Damaged storage is repaired, not fatal (issue 12): the durable damage marker and
what a repair did.

A node that finds damage inside its synced log (a bad CRC before the last sync, a
missing or short segment, an index pointing at nothing) keeps the intact prefix of
its log, cuts the rest, and runs as a *replacement* (a new incarnation, see
identity.py): it neither votes nor counts toward any quorum until the leader has
caught it up and admitted it again. docs/storage.md ("Repairing damaged storage")
argues why that is safe.

The marker (`REPAIR`, JSON, in the log's directory) is the durable record that
damage was found and from which entry on the log is not trusted:
  * written (durably) BEFORE recovery cuts anything, and by a read that finds a
    damaged entry while the node runs (the store then refuses further use, the
    node restarts and recovery repairs);
  * removed only by the runtime, AFTER the group's new incarnation is durable
    (`LogStore.clear_repair_marker`).
So a crash anywhere in between repeats the repair (idempotent: it only cuts from
the marker's entry on) and the node can never come back as its old, vouched-for
self with a log shorter than what it acknowledged.

Invariant: a marker's `damaged_from` only decreases (a second finding keeps the
lower entry): cutting more is always safe, cutting less never is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from raftlog.storage.segments import fsync_dir

MARKER = "REPAIR"

MODES = ("repair", "stop")
"""StorageOptions.on_corruption values."""


@dataclass(frozen=True, slots=True)
class Repair:
    """What recovery did about damage (LogStore.repair; None when nothing was damaged)."""

    reason: str
    """The first damage found: file, byte offset, what is wrong."""
    kept_first: int
    kept_last: int
    """The intact prefix kept: entries [kept_first, kept_last] (empty if last < first)."""
    damaged_from: int
    """The first entry not kept; it and everything after come from the peers."""
    dropped_last: int
    """The last entry the damaged log held before the cut (best known; for the report)."""

    def describe(self) -> str:
        kept = (
            f"kept entries {self.kept_first}..{self.kept_last}"
            if self.kept_last >= self.kept_first
            else "kept no entries"
        )
        return (
            f"{self.reason}; {kept}, cut entries {self.damaged_from}.."
            f"{max(self.dropped_last, self.damaged_from)} (fetched from the leader)"
        )


def marker_path(log_dir: str) -> str:
    return os.path.join(log_dir, MARKER)


def read_marker(log_dir: str) -> tuple[int, str] | None:
    """(damaged_from, reason) of the log in log_dir, None without a marker. A marker
    that cannot be read is damage from entry 1 (the conservative reading)."""
    path = marker_path(log_dir)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return int(data["damaged_from"]), str(data.get("reason", ""))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return 1, f"unreadable repair marker {path}"


def write_marker(log_dir: str, damaged_from: int, reason: str) -> int:
    """Record durably that entries >= damaged_from are not trusted (keeping a lower
    entry already recorded). Returns the entry the marker now names."""
    old = read_marker(log_dir)
    if old is not None and old[0] <= damaged_from:
        return old[0]
    path = marker_path(log_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"damaged_from": damaged_from, "reason": reason}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(log_dir)
    return damaged_from


def clear_marker(log_dir: str) -> None:
    """Durably forget the marker (after the new incarnation is durable)."""
    try:
        os.unlink(marker_path(log_dir))
    except FileNotFoundError:
        return
    fsync_dir(log_dir)


def why_not_repairable(identity: bool, voters: int) -> str:
    """Why damaged storage of a node with these settings must stop it instead of being
    repaired ("" if repair is possible): repair relies on the cluster vouching for
    the data, i.e. on node identity (a replacement never votes) and on other voters
    that hold what this node lost."""
    if not identity:
        return (
            "node identity is off (raft.identity): a repaired node could vote with a log "
            "shorter than what it acknowledged"
        )
    if voters < 2:
        return "this is a single-node cluster: no other node can vouch for the lost entries"
    return ""
