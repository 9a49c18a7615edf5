"""Node identity on disk: which cluster a data directory belongs to, and which
incarnation of a node's storage each Raft group's log is.

Raft assumes a node never forgets what it wrote or voted. A replaced disk, a
container recreated without its volume or a deleted index do forget, and a node
that then votes or acknowledges as if it remembered can lose committed entries
(docs/raft-core.md, "Node identity"). So every group's storage carries an
*incarnation*: a random 63-bit id made when that storage is created, which the
cluster's membership records. Storage the membership does not know is a
replacement and never votes until the leader has caught it up and admitted it.

Layout:
  IDENTITY (JSON, in the data directory, or a single-group node's log directory):
      {"cluster_id", "node_id", "incarnation", "groups": {"<gid>": {"legacy": bool}}}
  each group's LMDB index: meta key "identity" = the incarnation the group uses.

Invariants:
  * A group's storage is used under an incarnation only if the index stamp AND
    the IDENTITY file vouch for it; any disagreement (index lost or rebuilt,
    file lost, a group directory deleted) gives the group a NEW incarnation, so
    it can never vote with a vote record it may have lost.
  * Losing a write of this module is always conservative: a lost stamp or a lost
    listing of a new group makes its next start a replacement. So creating a
    group costs no fsync (a host creating many groups at once would otherwise
    pay three syncs each before it answers any of them); the stamp becomes
    durable with the group's first hard state (same LMDB environment), before
    any vote. Only a tombstone (a group deleted on purpose) is forced durable:
    losing it would let a recreated group reuse the host's incarnation.
  * A group storage the host never had gets the host's incarnation (so the
    heartbeats of every group of a process share one sender identity and stay
    coalesced); a group the host had before whose storage is gone gets a fresh
    random one.
  * Rolling upgrade: a data directory from before incarnations (no IDENTITY, no
    stamp, but Raft state present) adopts one and is marked `legacy`: it votes
    as before until the leader records its incarnation.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass

from raftlog.storage.errors import StorageError
from raftlog.storage.segments import fsync_dir

log = logging.getLogger("raftlog.identity")

FILE_NAME = "IDENTITY"
_VERSION = 1


class IdentityError(StorageError):
    """The data directory cannot be used by this node (another cluster's, another
    node's, or an unreadable IDENTITY file). The message says what to do."""


@dataclass(frozen=True, slots=True)
class GroupIdentity:
    """The identity a group's storage runs under."""

    cluster_id: str
    incarnation: int
    legacy: bool
    """Adopted at this or an earlier start from storage that predates incarnations."""
    new: bool
    """The incarnation was made at this start (new, replaced or unvouched storage)."""
    reason: str
    """Why (for the start-up log line and `status`)."""


def new_incarnation() -> int:
    """A random non-zero 63-bit id (fits the transport's u63 checks)."""
    while True:
        inc = secrets.randbits(63)
        if inc:
            return inc


class IdentityFile:
    """The IDENTITY file of one data directory (read once, rewritten durably)."""

    def __init__(self, directory: str, node_id: int, cluster_id: str = "") -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self.existed = os.path.exists(self.path)
        data = self._read() if self.existed else {}
        self.node_id = node_id
        found_node = data.get("node_id")
        if found_node is not None and found_node != node_id:
            raise IdentityError(
                f"{directory} holds the data of node {found_node}, not node {node_id}: "
                f"start node {found_node} on it, or give node {node_id} its own data directory"
            )
        found_cluster = data.get("cluster_id", "")
        if cluster_id and found_cluster and cluster_id != found_cluster:
            raise IdentityError(
                f"{directory} belongs to cluster {found_cluster!r}, not {cluster_id!r}: "
                "point the node at this cluster's data directory, or move this one away "
                "to start the node empty (it then joins as a replacement)"
            )
        self.cluster_id = found_cluster or cluster_id or secrets.token_hex(8)
        self.incarnation = int(data.get("incarnation") or 0) or new_incarnation()
        self.groups: dict[int, dict] = {int(k): v for k, v in data.get("groups", {}).items()}
        if not self.existed or found_cluster != self.cluster_id:
            self.save(durable=True)

    def _read(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise IdentityError(
                f"cannot read {self.path}: {exc}; move it away to start this node as a "
                "replacement (its storage is then treated as new)"
            ) from None
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            raise IdentityError(f"{self.path}: not a version {_VERSION} identity file")
        inc = data.get("incarnation")
        if not isinstance(inc, int) or not 0 < inc < 2**63:
            raise IdentityError(f"{self.path}: bad incarnation {inc!r}")
        return data

    def save(self, durable: bool = False) -> None:
        """Write the file atomically (tmp, rename); durable=True also fsyncs the file
        and its directory before returning."""
        os.makedirs(self.directory, exist_ok=True)
        body = {
            "version": _VERSION,
            "cluster_id": self.cluster_id,
            "node_id": self.node_id,
            "incarnation": self.incarnation,
            "groups": {str(k): v for k, v in sorted(self.groups.items())},
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if durable:
            fsync_dir(self.directory)

    def forget_group(self, group_id: int) -> None:
        """The group's storage was deleted on purpose: a later replica of it gets a
        fresh random incarnation (never the host's, which the group's membership
        may still record)."""
        if group_id in self.groups:
            self.groups[group_id] = {"deleted": True}
            self.save(durable=True)


class _Store:
    """What resolve() needs of a LogStore (a Protocol in spirit; tests pass fakes)."""

    def identity_stamp(self) -> int: ...
    def stamp_identity(self, incarnation: int, durable: bool = True) -> None: ...
    def is_blank(self) -> bool: ...


def resolve(ident: IdentityFile, group_id: int, store: _Store, damage: str = "") -> GroupIdentity:
    """The incarnation group `group_id` runs under, stamping it durably first.

    `damage`: the caller found that the storage forgot something it had made
    durable (e.g. recovery cut entries below the commit checkpoint); the storage
    then runs as a replacement under a new incarnation, keeping what is intact.
    See the module docstring for the other rules."""
    stamp = store.identity_stamp()
    known = ident.groups.get(group_id)
    legacy = bool(known and known.get("legacy"))
    if damage:
        known = {"incarnation": -1}  # fall through to "new incarnation" below
    if known is not None and stamp and stamp == known.get("incarnation"):
        return GroupIdentity(ident.cluster_id, stamp, legacy, False, "known storage")
    if known is None and not stamp:
        if store.is_blank():
            inc, legacy, reason = ident.incarnation, False, "new storage"
        elif not ident.existed:
            inc, legacy, reason = ident.incarnation, True, "storage from before incarnations"
        else:
            inc, legacy = new_incarnation(), False
            reason = "storage unknown to this data directory's IDENTITY"
    else:
        inc, legacy = new_incarnation(), False
        if damage:
            reason = damage
        elif known is None:
            reason = "IDENTITY does not list this group's storage"
        elif not stamp:
            reason = "the group's index lost its identity stamp (index deleted or rebuilt)"
        else:
            reason = f"the index stamp {stamp} differs from IDENTITY's {known.get('incarnation')}"
        log.warning(
            "identity.replaced group=%d: %s; new incarnation %d: this node votes in the "
            "group only after the leader has caught it up and admitted it",
            group_id,
            reason,
            inc,
        )
    ident.groups[group_id] = {"incarnation": inc, "legacy": legacy}
    # Damage: durable before the caller forgets the repair marker (repair.py), so no
    # crash can bring the repaired log back under its old, vouched-for incarnation.
    ident.save(durable=bool(damage))
    store.stamp_identity(inc, durable=bool(damage))
    return GroupIdentity(ident.cluster_id, inc, legacy, True, reason)
