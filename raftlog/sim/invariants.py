"""Safety invariants checked by the simulator after every event.

Each check is incremental so it can run after every step:

  * election safety: at most one leader per term (`leaders`).
  * log matching: every (index, term) ever seen in any log maps to one entry
    content and one predecessor term (`entries`). By induction on the index this
    implies "same index and term => identical prefix" for every pair of logs.
    Entries only enter a log through the core's unstable buffer, so checking
    that buffer after every event covers every log.
  * leader completeness: when a node becomes leader, every entry known
    committed is in its log with the committed term (or under its snapshot).
  * state-machine safety: every node applies the same entry at each index
    (`applied`), and snapshots carry the same state digest (`digests`).
  * commit monotonicity: a live node's commit index never decreases; after a
    restart it is at most the highest commit index ever observed.
  * read linearizability: a ReadIndex answer is >= every commit index observed
    before the read was requested.
  * I1 group isolation (with several groups, one Checker per group): every DATA
    entry written, sent or applied in group g carries g's tag, i.e. was proposed
    in g. This catches entries crossing groups (e.g. a transport cache keyed
    without the group id).
"""

from __future__ import annotations

from raftlog.core import RawNode, Role
from raftlog.entry import EntryType, LogEntry


class InvariantViolation(AssertionError):
    pass


class Checker:
    def __init__(self, group: int | None = None, tag: bytes = b"") -> None:
        self.group = group
        """The group checked (None: the only one; failures then name no group)."""
        self.tag = tag
        """Prefix of every DATA payload proposed in this group (b"": I1 off)."""
        self.leaders: dict[int, int] = {}
        self.entries: dict[tuple[int, int], tuple[int, bytes, int]] = {}
        self.committed: dict[int, int] = {}  # index -> term
        self.max_commit = 0
        self.applied: dict[int, LogEntry] = {}
        self.digests: dict[int, bytes] = {}
        self.last_commit: dict[int, int] = {}
        self.last_role: dict[int, Role] = {}
        self.read_floor: dict[bytes, int] = {}

    def fail(self, msg: str) -> None:
        raise InvariantViolation(msg if self.group is None else f"group {self.group}: {msg}")

    def _check_isolation(self, where: str, e: LogEntry) -> None:
        """I1: a DATA entry of this group's log was proposed in this group."""
        if e.type is EntryType.DATA and e.data and not e.data.startswith(self.tag):
            self.fail(
                f"group isolation: {where} has {e.data!r} at ({e.index}, {e.term}), "
                f"not proposed in this group (tag {self.tag!r})"
            )

    # per-event check of one node --------------------------------------------
    def check_node(self, nid: int, node: RawNode) -> None:
        log = node.log
        # election safety
        if node.role is Role.LEADER:
            other = self.leaders.setdefault(node.term, nid)
            if other != nid:
                self.fail(f"election safety: {other} and {nid} both lead term {node.term}")
            if self.last_role.get(nid) is not Role.LEADER:
                self._check_leader_completeness(nid, node)
        self.last_role[nid] = node.role
        u = log.unstable
        if u.snapshot is not None:
            self._check_committed_term(nid, u.snapshot.meta.index, u.snapshot.meta.term)
        # commit monotonicity and agreement
        c = log.committed
        old = self.last_commit.get(nid, 0)
        if c < old:
            self.fail(f"commit index of node {nid} went back from {old} to {c}")
        if c > old:
            self._record_commits(nid, node, old, c)
            self.last_commit[nid] = c

    def check_entries(self, where: str, entries: list[LogEntry], prev_term: int | None) -> None:
        """Log matching for entries that became visible: written to storage or sent.

        (Entries still only in a node's memory may vanish in a crash and their
        (index, term) be reused legitimately: nobody else ever saw them.)
        """
        pt = prev_term if prev_term is not None else -1
        for e in entries:
            if self.tag:
                self._check_isolation(where, e)
            key = (e.index, e.term)
            val = (int(e.type), e.data, pt)
            seen = self.entries.setdefault(key, val)
            if seen != val and not (seen[:2] == val[:2] and -1 in (seen[2], val[2])):
                self.fail(f"log matching: {where} has {key} = {val}, elsewhere {seen}")
            pt = e.term

    def _record_commits(self, nid: int, node: RawNode, lo: int, hi: int) -> None:
        first = node.log.first_index()
        for i in range(max(lo + 1, first), hi + 1):
            t = node.log.term_at(i)
            if t is None:
                self.fail(f"node {nid} committed {i} but has no entry there")
            self._check_committed_term(nid, i, t)  # type: ignore[arg-type]
        self.max_commit = max(self.max_commit, hi)

    def _check_committed_term(self, nid: int, index: int, term: int) -> None:
        if index == 0:
            return
        seen = self.committed.setdefault(index, term)
        if seen != term:
            self.fail(
                f"node {nid} has term {term} at committed index {index}, committed term is {seen}"
            )

    def _check_leader_completeness(self, nid: int, node: RawNode) -> None:
        log = node.log
        snap_index = log.first_index() - 1
        for i, t in self.committed.items():
            if i < snap_index:
                continue  # under the leader's snapshot
            mine = log.term_at(i)
            if mine != t:
                self.fail(
                    f"leader completeness: leader {nid} of term {node.term} has term {mine} "
                    f"at index {i}, committed in term {t}"
                )

    # restarts ----------------------------------------------------------------
    def on_restart(self, nid: int, node: RawNode) -> None:
        c = node.log.committed
        if c > self.max_commit:
            self.fail(f"node {nid} restarted with commit {c} > any commit ever seen")
        self.last_commit[nid] = c
        self.last_role[nid] = node.role
        first = node.log.first_index()
        for i in range(first, c + 1):
            t = node.log.term_at(i)
            if t is None or self.committed.get(i, t) != t:
                self.fail(f"node {nid} restarted with a wrong committed entry at {i}")

    def on_crash(self, nid: int) -> None:
        self.last_role.pop(nid, None)

    def on_storage_loss(self, nid: int) -> None:
        """The node's storage forgot (part of) its log and state: its own commit
        index may restart lower. Everything else (what was committed, what each
        index holds) stays checked against the whole cluster's history."""
        self.last_commit.pop(nid, None)

    # state machine -------------------------------------------------------------
    def on_apply(self, nid: int, e: LogEntry, digest: bytes) -> None:
        if self.tag:
            self._check_isolation(f"node {nid} applied", e)
        seen = self.applied.setdefault(e.index, e)
        if seen != e:
            self.fail(f"state-machine safety: node {nid} applied {e} at {e.index}, others {seen}")
        self.on_digest(nid, e.index, digest)

    def on_digest(self, nid: int, index: int, digest: bytes) -> None:
        seen = self.digests.setdefault(index, digest)
        if seen != digest:
            self.fail(f"state-machine safety: node {nid} state digest differs at {index}")

    # reads ---------------------------------------------------------------------
    def on_read_request(self, ctx: bytes) -> None:
        self.read_floor[ctx] = self.max_commit

    def on_read_state(self, nid: int, index: int, ctx: bytes) -> None:
        floor = self.read_floor.get(ctx)
        if floor is None:
            self.fail(f"node {nid} got a ReadState for unknown context {ctx!r}")
        if index < floor:  # type: ignore[operator]
            self.fail(
                f"read linearizability: node {nid} read index {index} for {ctx!r} < "
                f"commit {floor} observed before the request"
            )
