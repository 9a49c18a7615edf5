"""Opening one group's storage: recovery of its log and snapshots, damaged snapshots
set aside, and the discard of storage that nothing on this node can rebuild.

RaftGroup._open runs it in two steps around the state machine's snapshot load:

    GroupStorage.open()    discard a crash interrupted; open the log and snapshots;
                           set aside damaged snapshots or discard the whole storage;
                           drop snapshots ahead of a repaired log; the hard state
                           the core may start from
    (the group: DiskQueue, StateMachine.on_snapshot_load)
    GroupStorage.settle()  the group's identity (a new incarnation after damage),
                           then the discard and repair markers go

Invariant: a discard or repair marker is removed only after the new incarnation is
durable (resolve), so a crash anywhere leaves a state the next start finishes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from raftlog.core.log_reader import Snapshot
from raftlog.entry import HardState
from raftlog.runtime.options import NodeOptions
from raftlog.runtime.snapshots import SnapshotStore
from raftlog.storage import CorruptLogError, LogStore, StorageOptions
from raftlog.storage.identity import GroupIdentity, resolve
from raftlog.storage.repair import why_not_repairable
from raftlog.storage.segments import fsync_dir

if TYPE_CHECKING:  # the host imports the group, which imports this module
    from raftlog.runtime.host import RaftHost

log = logging.getLogger("raftlog.runtime")


DISCARD_MARKER = "DISCARD-{group}"
"""A group's storage is being discarded (its base snapshot was damaged): the durable
record, in the directory of the IDENTITY file, that makes a crash anywhere in the
discard finish it at the next start (GroupStorage.discard states the order)."""


def discard_marker_path(directory: str, group_id: int) -> str:
    return os.path.join(directory, DISCARD_MARKER.format(group=group_id))


def read_discard_marker(directory: str, group_id: int) -> str | None:
    """The reason recorded by write_discard_marker, None without a marker. A marker
    that cannot be read still means "discard" (the conservative reading)."""
    path = discard_marker_path(directory, group_id)
    try:
        with open(path, encoding="utf-8") as f:
            return str(json.load(f)["reason"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return f"unreadable discard marker {path}"


def write_discard_marker(directory: str, group_id: int, reason: str) -> None:
    """Record durably (file and directory fsync'ed) that group_id's storage is discarded."""
    path = discard_marker_path(directory, group_id)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"reason": reason, "at": time.time()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def clear_discard_marker(directory: str, group_id: int) -> None:
    """Durably forget the marker (only once the group's new incarnation is durable)."""
    try:
        os.unlink(discard_marker_path(directory, group_id))
    except FileNotFoundError:
        return
    fsync_dir(directory)


def set_aside_directory(path: str) -> str | None:
    """Rename directory `path` to <path>.damaged-<unix time> (a free name), durably; the
    new path, or None if there is no such directory. Kept for the operator to look at,
    never read again: nothing opens a name with this suffix."""
    if not os.path.isdir(path):
        return None
    stem = f"{path}.damaged-{int(time.time())}"
    new, n = stem, 0
    while os.path.exists(new):
        n += 1
        new = f"{stem}-{n}"
    os.rename(path, new)
    fsync_dir(os.path.dirname(path) or ".")
    return new


@dataclass(slots=True)
class OpenedStorage:
    """What GroupStorage.open() recovered, for the group to start from."""

    store: LogStore
    snapshots: SnapshotStore
    snapshot: Snapshot | None
    """The newest snapshot, whole (None: the state starts empty, at entry 0)."""
    hard_state: HardState
    """The hard state the core starts from: its commit lowered to what the kept log
    holds, and raised to the snapshot's index (a snapshot covers committed entries)."""
    damage: str
    """Why the log lost entries it had made durable ("" if none): a new incarnation."""
    discarded: str
    """What discarding the whole storage did ("" if it was not discarded)."""


class GroupStorage:
    """Where one group's storage lives and how it is opened: log_dir / snapshot_dir
    when given (a single-group node's own layout), else the host's LogEnvironment
    under groups/<group id>/. voters: how many voters the group starts with (a
    joining node counts as 2: the cluster it joins can vouch for its data)."""

    def __init__(
        self,
        host: RaftHost,
        node_id: int,
        group_id: int,
        options: NodeOptions,
        voters: int,
        data_dir: str,
        log_dir: str | None,
        snapshot_dir: str | None,
    ) -> None:
        self.host = host
        self.node_id = node_id
        self.group_id = group_id
        self.options = options
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.snapshot_dir = snapshot_dir
        # The discard marker and IDENTITY live beside the group's directories (outside
        # what a discard sets aside).
        self.identity_dir = data_dir if log_dir is not None else host.data_dir
        self.marker_dir = self.identity_dir or "."
        self.repair_refused = ""
        """Why damaged storage stops this group instead of being repaired ("" if not):
        repair is possible only if the cluster can vouch for what the repair cuts."""
        if options.storage.on_corruption == "repair":
            self.repair_refused = why_not_repairable(options.identity, voters)

    def log_options(self) -> StorageOptions:
        """The storage options this group's log opens with (no repair when refused)."""
        if not self.repair_refused:
            return self.options.storage
        return replace(self.options.storage, on_corruption="stop")

    # ---------------------------------------------------------------- open

    async def open(self) -> OpenedStorage:
        """Open (or create) the log and snapshots and recover them (see the module)."""
        gid = self.group_id
        storage = self.log_options()
        tolerate = self.options.storage.on_corruption == "repair"
        discarded = ""
        pending = await asyncio.to_thread(read_discard_marker, self.marker_dir, gid)
        if pending is not None:  # a discard a crash interrupted: finish it first
            discarded = await asyncio.to_thread(self.discard, pending, None, None)
        store, snap_dir = await asyncio.to_thread(self.open_log, storage)
        snapshots = SnapshotStore(snap_dir, tolerate_damage=tolerate)
        if snapshots.damaged:
            base_lost = await asyncio.to_thread(self.set_aside_damaged_snapshots, store, snapshots)
            if base_lost:
                discarded = await asyncio.to_thread(self.discard, base_lost, store, snapshots)
                store, snap_dir = await asyncio.to_thread(self.open_log, storage)
                snapshots = SnapshotStore(snap_dir, tolerate_damage=tolerate)
        damage = ""
        if store.repair is not None:
            damage = "damaged storage repaired: " + store.repair.describe()
            dropped = await asyncio.to_thread(snapshots.drop_above, store.last_index())
            if dropped:
                damage += f"; snapshots {dropped} (ahead of the kept log) dropped"
        snap = snapshots.load()
        applied = snap.meta.index if snap is not None else 0
        hs = store.hard_state()
        floor = max(store.last_index(), store.snapshot_meta().index)
        if store.repair is not None:
            # the kept log is all this node vouches for (snapshots above it were dropped)
            floor = store.last_index()
        if hs.commit > floor:
            # recovery cut entries this node had made durable and knew committed (a
            # synced tail lost or truncated): it must not vote as if it held them
            damage = damage or f"the log ends at {floor} below its commit checkpoint {hs.commit}"
            log.warning("raft.log_damaged node=%d group=%d: %s", self.node_id, gid, damage)
            hs = HardState(hs.term, hs.vote, floor)
        if hs.commit < applied:
            # The commit field is a checkpoint written every commit_checkpoint_s, not with
            # each commit; a snapshot covers applied, hence committed, entries. A kill -9
            # between a snapshot and the next checkpoint left applied above it, and the
            # core refused to start (RaftSafetyError "applied > committed", seen in chaos).
            hs = HardState(hs.term, hs.vote, applied)
        return OpenedStorage(store, snapshots, snap, hs, damage, discarded)

    async def settle(self, opened: OpenedStorage) -> GroupIdentity | None:
        """The group's identity (None with identity off); a new incarnation after damage
        or a discard. Only once that is durable do the discard and repair markers go."""
        store, gid = opened.store, self.group_id
        identity: GroupIdentity | None = None
        if self.options.identity:
            ident_file = self.host.identity_file(
                self.identity_dir or self.data_dir, self.options.cluster_id
            )
            identity = await asyncio.to_thread(
                resolve, ident_file, gid, store, opened.damage or opened.discarded
            )
        if opened.discarded:
            # the new incarnation is durable (resolve, given damage): the discard is done
            await asyncio.to_thread(clear_discard_marker, self.marker_dir, gid)
            log.warning(
                "raft.storage_discarded node=%d group=%d incarnation=%d: %s. This node is a "
                "replacement now: it neither votes nor counts toward a quorum until the "
                "leader has sent it a snapshot, caught it up and admitted it again; see "
                "docs/operations.md ('A node that repairs its storage')",
                self.node_id,
                gid,
                identity.incarnation if identity else 0,
                opened.discarded,
            )
        if store.repair is not None:
            # the new incarnation is durable (resolve): the repair needs no marker now
            await asyncio.to_thread(store.clear_repair_marker)
            log.warning(
                "raft.repair_waiting node=%d group=%d incarnation=%d: %s. This node neither "
                "votes nor counts toward a quorum until the leader has caught it up and "
                "admitted it again; it waits for a leader elected by intact voters. If none "
                "is ever elected (a majority of the voters damaged or gone), the cluster "
                "cannot vouch for the lost entries: restore from a backup, or see "
                "docs/operations.md ('A node that repairs its storage')",
                self.node_id,
                gid,
                identity.incarnation if identity else 0,
                opened.damage,
            )
        return identity

    def open_log(self, storage: StorageOptions) -> tuple[LogStore, str]:
        """Open (or create) this group's log; returns it and its snapshot directory."""
        if self.log_dir is not None:
            return LogStore.open(self.log_dir, storage), self._own_snapshot_dir()
        host = self.host
        snap_dir = os.path.join(host._group_dir(self.group_id), "snapshots")
        return host._open_group_log(self.group_id, storage), snap_dir

    def _own_snapshot_dir(self) -> str:
        return self.snapshot_dir or os.path.join(self.data_dir, "snapshots")

    # ------------------------------------------------------------- damage

    def set_aside_damaged_snapshots(self, store: LogStore, snapshots: SnapshotStore) -> str:
        """Damaged snapshot files this group can do without are set aside: the state
        is rebuilt from the newest intact snapshot and the log, which holds every
        entry above the log's base (first index - 1); returns "".

        The base snapshot itself (what the log was compacted to, and what followers
        are sent) cannot be rebuilt from anything this node holds. If the cluster can
        vouch for the data (repair allowed), returns why: the caller discards the
        group's whole storage (discard). Otherwise the node stops as before
        (CorruptLogError), and the operator moves the directory aside."""
        base = store.first_index() - 1
        if base > 0 and snapshots.meta_at(base) is None:
            path, why = snapshots.damaged[0]
            what = (
                f"{why}; the log was compacted to entry {base} and no intact snapshot "
                "holds the state there, so nothing on this node can rebuild it"
            )
            if self.repair_refused:
                raise CorruptLogError(
                    path, 0, f"{what}; it cannot be repaired: {self.repair_refused}"
                )
            return f"base snapshot damaged: {what}"
        whats = [f"{os.path.basename(p)} ({why})" for p, why in snapshots.damaged]
        moved = snapshots.set_aside_damaged()
        log.warning(
            "raft.snapshot_damaged node=%d group=%d: %s set aside as %s; the state is "
            "rebuilt from %s and the log (entries %d..%d), nothing is lost",
            self.node_id,
            self.group_id,
            ", ".join(whats),
            ", ".join(moved),
            f"snapshot {snapshots.indexes()[-1]}" if snapshots.indexes() else "entry 1",
            store.first_index(),
            store.last_index(),
        )
        return ""

    def discard(self, reason: str, store: LogStore | None, snapshots: SnapshotStore | None) -> str:
        """Treat ALL of this group's storage as lost (a wiped disk for this group only):
        the base snapshot is damaged and nothing here can rebuild that state. The
        files are set aside, not deleted (<dir>.damaged-<unix time>, for the operator);
        the group then opens blank storage and runs under a new incarnation as a
        replacement, which the leader sends a snapshot, catches up and re-admits.
        store / snapshots: the open ones to close first (None: nothing is open yet).
        Returns what was done (for resolve's reason and the warning).

        Order; each step is durable before the next, and a crash at any point leaves
        a state the next start handles safely:
          1. the discard marker (DISCARD-<group>, beside IDENTITY) is written. A crash
             before it changed nothing: the next start finds the damage again;
          2. the damaged snapshot files get .damaged, then the log directory and the
             snapshot directory (a RaftHost group: its groups/<id>/ directory, then its
             keys in the shared index) are renamed aside;
          3. (open) blank storage is opened, and (settle) resolve(damage=...) makes a
             NEW incarnation and writes IDENTITY and the index stamp durably;
          4. (settle) the marker is removed.
        A crash between 1 and 4 leaves the marker: the next start repeats 2 (renaming
        whatever is there, a blank log of an earlier try included; the host's key
        deletion is idempotent) before it opens anything, and then 3. So the group
        never runs on half-discarded storage (a log without its base snapshot, or
        snapshots without their log), and never under its old incarnation with less
        than it acknowledged: the old stamp went with the old index, and resolve with
        damage never returns a known incarnation. After 4 the storage is known (stamp
        = IDENTITY) but blank, under an incarnation the membership does not record:
        a replacement, which neither votes nor counts until admitted."""
        gid = self.group_id
        if self.repair_refused or self.options.storage.on_corruption != "repair":
            why = self.repair_refused or "storage.on_corruption is not 'repair'"
            raise CorruptLogError(
                discard_marker_path(self.marker_dir, gid),
                0,
                f"this group's storage must be discarded ({reason}) but cannot be "
                f"repaired: {why}. Restore the data directory from a backup, or move it "
                "aside and start the node empty with node identity on",
            )
        write_discard_marker(self.marker_dir, gid, reason)  # 1
        if snapshots is not None:
            snapshots.set_aside_damaged()
        if store is not None:
            store.close()
        moved: list[str | None] = []  # 2
        if self.log_dir is not None:
            moved = [
                set_aside_directory(self.log_dir),
                set_aside_directory(self._own_snapshot_dir()),
            ]
        else:
            moved = [set_aside_directory(self.host._group_dir(gid))]
            if self.host.env is not None:
                self.host.env.delete_group(gid)
        kept = ", ".join(m for m in moved if m) or "nothing left to move"
        return f"{reason}; this group's storage is discarded: set aside as {kept}"
