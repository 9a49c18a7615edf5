"""One classic consumer group in memory: its members, state and timers (pure data
plus the rules that need no coordinator: protocol support and selection).

States (Kafka's GroupMetadata): EMPTY -> PREPARING_REBALANCE -> COMPLETING_REBALANCE
-> STABLE, and DEAD once deleted. Invariants:
- generation only rises; it is bumped when a rebalance's join phase completes;
- members keep join order (a dict), the leader is a member (or None when empty);
- static: instance id -> member id of every static member, one member per instance;
- a member has at most one parked JoinGroup (join_token) and one parked SyncGroup
  (sync_token); a parked request is always answered exactly once (reply, error on
  removal, or NOT_COORDINATOR when the coordinator unloads).
Times are milliseconds on the driver's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: int | None = None
    sync_token: int | None = None
    deadline: float = 0.0
    """Heartbeat expiry; not enforced while a request of an old member is parked."""
    is_new: bool = False
    """Joined in the current rebalance: expires even while its JoinGroup is parked
    (after the new member join timeout), so a vanished joiner cannot pin the group."""

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def heartbeat_satisfied(self) -> bool:
        """A parked JoinGroup/SyncGroup counts as a heartbeat (except for new members)."""
        return not self.is_new and (self.join_token is not None or self.sync_token is not None)


@dataclass(slots=True)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED -> expiry (session timeout)."""
    static: dict[str, str] = field(default_factory=dict)
    join_deadline: float | None = None
    """When the join phase of PREPARING_REBALANCE ends (rebalance timeout or delay)."""
    initial_delay: bool = False
    """The join phase is the initial delay of an Empty group (ends only by time)."""
    initial_cap: float = 0.0
    """The initial delay never runs past this (its start + the rebalance timeout)."""
    last_join_at: float = 0.0
    """When the last new member joined (the initial delay waits a delay after it)."""
    sync_deadline: float | None = None
    """When members that have not sent SyncGroup in COMPLETING_REBALANCE are removed."""
    awaiting_sync: set[str] = field(default_factory=set)
    storing: int | None = None
    """Proposal of the leader's assignment, while it is not yet committed."""
    persisted: bool = False
    """The log holds a generation of this group (it survives a failover)."""
    heap_at: float | None = None
    """Earliest time this group is queued in the coordinator's timer heap."""

    # ------------------------------------------------------------ queries

    def is_(self, state: str) -> bool:
        return self.state == state

    def size(self) -> int:
        return len(self.members) + len(self.pending)

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order."""
        members = list(self.members.values())
        if not members:
            return []
        rest = [{n for n, _ in m.protocols} for m in members[1:]]
        return [n for n, _ in members[0].protocols if all(n in s for s in rest)]

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty type and list;
        otherwise the type must match and one protocol be supported by every member."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        candidates = set(self.candidate_protocols())
        return any(n in candidates for n, _ in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins, ties go
        to the earlier candidate (deterministic, unlike Kafka's map order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol every member supports")
        votes = dict.fromkeys(candidates, 0)
        for m in self.members.values():
            for n, _ in m.protocols:
                if n in votes:
                    votes[n] += 1
                    break
        return max(candidates, key=lambda n: (votes[n], -candidates.index(n)))

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_token is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member's instance id now belongs to another member id."""
        if instance_id is None:
            return False
        current = self.static.get(instance_id)
        return current is not None and current != member_id

    def next_deadline(self) -> float | None:
        times = [m.deadline for m in self.members.values()]
        times += self.pending.values()
        if self.join_deadline is not None:
            times.append(self.join_deadline)
        if self.sync_deadline is not None:
            times.append(self.sync_deadline)
        return min(times, default=None)

    # ------------------------------------------------------------ changes

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if self.leader is None:
            self.leader = member.member_id
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        m = self.members.pop(member_id, None)
        if m is None:
            return None
        if m.instance_id is not None and self.static.get(m.instance_id) == member_id:
            del self.static[m.instance_id]
        self.awaiting_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return m

    def replace_member_id(self, old: str, new: str) -> Member:
        """A static member rejoined under a new member id: same place, same assignment."""
        items = [(new if k == old else k, m) for k, m in self.members.items()]
        self.members = dict(items)
        m = self.members[new]
        m.member_id = new
        if m.instance_id is not None:
            self.static[m.instance_id] = new
        if self.leader == old:
            self.leader = new
        if old in self.awaiting_sync:
            self.awaiting_sync.discard(old)
            self.awaiting_sync.add(new)
        return m
