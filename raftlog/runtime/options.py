"""RaftNode configuration: typed, validated once, every default documented."""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.storage import StorageOptions


@dataclass(frozen=True, slots=True)
class NodeOptions:
    tick_ms: int = 30
    """One logical tick of the core's clock."""
    election_ticks: int = 10
    """Election timeout T: followers campaign after [T, 2T) ticks without a leader
    (300-600 ms by default); a leader steps down after T ticks without a quorum."""
    heartbeat_ticks: int = 3
    """A leader sends heartbeats every this many ticks (3: 90 ms, etcd's 100 ms; still
    3 or more rounds per election timeout). 1 (every tick) sends 3x the idle messages
    (each a gRPC message per peer, coalesced over the host's groups, about 370 us of
    CPU here). With beats and answers held to the host's beat tick, a leader's last
    plain beat is often answered after it quiesced; that late answer does not wake
    it (only a follower's flagged refusal of the quiesce beat does), so idle groups
    stay quiesced (docs/raft-runtime.md, "Beats every third tick", "Quiescence")."""
    beats_yield_to_appends: bool = True
    """A heartbeat round leaves out the followers an AppendEntries went to since the
    previous round (raftlog.core.RaftConfig.beats_yield_to_appends): a busy group's
    appends stand in for its beats, so under load beats travel only for idle
    groups (docs/raft-runtime.md, "Beats yield to appends")."""
    max_pending_proposals: int = 200_000
    """Back-pressure: apply() raises BusyError beyond this many uncommitted proposals."""
    proposal_timeout_s: float = 10.0
    """apply()/read_index() fail with a timeout error after this long."""
    outcome_wait_ticks: int = 40
    """A leader that loses leadership keeps its proposals already in the log waiting
    up to this many ticks (40: 1.2 s, four election timeouts) for their outcome: a
    later leader commits them (success; a leadership transfer usually does) or
    replaces them (failed). Past it, or when a snapshot covers them, they fail as
    outcome unknown (Kafka: NOT_LEADER_OR_FOLLOWER, the client retries)."""
    max_append_bytes: int = 1 << 20
    """Entry bytes per AppendEntries message (at least one entry is sent)."""
    max_inflight_msgs: int = 256
    """Pipelined AppendEntries per follower before waiting for acknowledgements."""
    max_inflight_bytes: int = 32 << 20
    """Bytes of pipelined AppendEntries per follower."""
    snapshot_every_entries: int = 0
    """Take a snapshot once this many entries were applied since the last (0: never)."""
    snapshot_keep_entries: int = 10_000
    """Entries kept in the log behind a snapshot, for followers slightly behind."""
    commit_checkpoint_s: float = 1.0
    """How often the commit index checkpoint is persisted when it moved."""
    pre_vote: bool = True
    """Pre-election before a term bump (Raft thesis 9.6): a node that was cut off
    cannot disrupt a healthy leader when it comes back."""
    check_quorum: bool = True
    """A leader steps down after election_ticks without a quorum, and followers
    ignore votes while they hear from a live leader (leader lease)."""
    max_committed_bytes: int = 16 << 20
    """Committed entry bytes handed to the apply loop per Raft loop turn."""
    snapshot_chunk_bytes: int = 1 << 20
    """Snapshot bytes per InstallSnapshot message to a lagging follower."""
    identity: bool = True
    """Node identity (docs/raft-core.md, "Node identity"): the group's storage gets
    an incarnation (raftlog/storage/identity.py), messages carry it, and storage
    the membership does not know never votes until admitted. Off: plain Raft,
    which assumes disks never forget (tests of the protocol alone)."""
    quiesce_ticks: int = 6
    """Quiescence (docs/raft-runtime.md, "Quiescence"): a leader idle this many
    ticks whose followers hold its whole log stops heartbeating the group, and
    the followers stop their election timers; the host then watches the
    leader's process (node beats) instead. 0: never quiesce. Takes effect on a
    host of many groups (raftsink with partition groups: RaftHost with
    HostOptions.quiesce on); a RaftNode (one group, `cluster.partition_groups = false`)
    never quiesces. Default 6 since the 1,000-group idle target is met with it
    in every run (bench/scale.py part 2; the simulator checks it: raftlog/sim,
    quiesce_ticks; docs/raft-runtime.md, "Quiescence", "Measured again")."""
    cluster_id: str = ""
    """The cluster this node belongs to ("": take the data directory's, or make
    one). A data directory of another cluster is refused at start-up."""
    storage: StorageOptions = field(default_factory=StorageOptions)

    def __post_init__(self) -> None:
        # Each message names its field: sink.config maps NodeOptions.<field> to
        # the configuration key the operator set.
        for name in (
            "tick_ms",
            "heartbeat_ticks",
            "max_pending_proposals",
            "max_append_bytes",
            "max_inflight_msgs",
            "max_inflight_bytes",
            "max_committed_bytes",
            "snapshot_chunk_bytes",
            "outcome_wait_ticks",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"NodeOptions.{name} must be positive, got {value}")
        for name in ("proposal_timeout_s", "commit_checkpoint_s"):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"NodeOptions.{name} must be positive, got {value}")
        if self.election_ticks <= 1:
            raise ValueError(f"NodeOptions.election_ticks must be > 1, got {self.election_ticks}")
        if self.heartbeat_ticks >= self.election_ticks:
            raise ValueError(
                f"NodeOptions.heartbeat_ticks must be below election_ticks ({self.election_ticks})"
                f", got {self.heartbeat_ticks}"
            )
        if self.cluster_id and not (
            len(self.cluster_id) <= 64
            and all(ch.isalnum() or ch in "-_." for ch in self.cluster_id)
        ):
            raise ValueError(
                "NodeOptions.cluster_id must be at most 64 letters, digits, '-', '_' or '.', "
                f"got {self.cluster_id!r}"
            )
        for name in ("snapshot_every_entries", "snapshot_keep_entries", "quiesce_ticks"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"NodeOptions.{name} must be >= 0, got {value}")


NODE_BEATS_PER_SILENCE = 4
"""At least this many node beats fit in the silence limit (one late beat must never
look like a dead peer): HostOptions.node_beat_every shortens the interval to fit."""


@dataclass(frozen=True, slots=True)
class HostOptions:
    """What a RaftHost shares among its groups (one per process)."""

    tick_ms: int = 30
    """The one tick of every hosted group (each group's NodeOptions.tick_ms must match)."""
    housekeeping_s: float = 0.25
    """Period of the proposal/read timeout sweep and commit checkpoints of all groups
    (timeouts fire up to this late; each period wakes the process: about 100 us of
    CPU here, plus a call per group)."""
    coalesce_heartbeats: bool = True
    """Send every group's heartbeats (and responses) to a peer as one message per
    loop iteration instead of one message per group."""
    defer_beat_answers: bool = True
    """Heartbeat answers without a ReadIndex context wait for this host's next beat
    tick (beat_ticks) and leave with its own heartbeats, one message per peer per
    beat round instead of two
    (every peer's beats arrive at its own tick phase). A gRPC message costs about
    370 us of CPU here, so with a dozen groups per host this halves the idle
    messages; the answer is at most beat_ticks ticks later, inside the CheckQuorum
    window (election_ticks). Answers that confirm a read leave at once."""
    beat_ticks: int = 1
    """Heartbeats and heartbeat answers without a ReadIndex context leave on every
    beat_ticks-th tick of this host only (held until then), so each peer gets one
    message per beat_ticks ticks carrying every group's beats and answers, whatever
    the phases of the groups' own heartbeat counters. A RaftNode's host sets it to
    its heartbeat_ticks; the beats' interval stays heartbeat_ticks (a constant
    delay of under beat_ticks ticks per group). Beats confirming a read leave at once."""
    idle_wakes_on_beat_ticks: bool = True
    """While no hosted group is ticking (every one quiesced, or none hosted) the tick
    loop wakes on beat ticks only and runs the ticks in between there, back to back
    (node liveness counts them; node beats and held answers go on beat ticks
    anyway): an idle process wakes a third as often at beat_ticks 3 (a wake-up costs
    about 100 us of CPU here). A group that wakes meanwhile starts ticking at the
    next beat tick (its timers start up to beat_ticks - 1 ticks late: only later,
    never sooner). False: the loop wakes on every tick."""
    quiesce: bool = True
    """Quiescence and node liveness (docs/raft-runtime.md, "Quiescence"): idle
    groups stop heartbeating and are not ticked (NodeOptions.quiesce_ticks); the
    host sends every peer a node beat (a Beats, empty if no group beats) every
    node_beat_ticks with its start nonce and wakes the groups led by a peer
    that fell silent (liveness_silence_ms), whose stream broke (a killed
    process), or that restarted. Needs
    coalesce_heartbeats (off there: groups never quiesce). Off: every group is
    ticked and heartbeats every heartbeat interval, as before."""
    node_beat_ticks: int = 6
    """Node beats go to a peer every this many beat ticks (node_beat_ticks x
    beat_ticks ticks; when no group's Beats went there meanwhile). Detection needs a
    handful of them per silence limit, not one per tick: at a RaftNode's
    beat_ticks 3 and tick_ms 30 that is every 540 ms, 5-8 per silence limit (3 s,
    randomized up to 1.5x). Every node beats every peer it shares a group with,
    and the controller group spans all voters, so the idle messages grow with the
    square of the node count: 7 node processes sent 236 a second at 2 (session 16),
    a third of that at 6. Shortened where fewer than NODE_BEATS_PER_SILENCE would fit
    in the silence limit (node_beat_every)."""
    liveness_silence_ms: int = 3000
    """Node liveness: a peer silent this long (randomized up to 1.5x, counted in
    ticks this host's loop ran, never fewer than the groups' election timeout)
    counts as down and the quiesced groups it leads campaign. Well above the
    election timeout: on a loaded box a starved, live process falls silent for
    a second or more, and every false "down" wakes all its groups into
    elections (CockroachDB's node liveness expires after 9 s). A killed
    process is seen sooner, by its broken stream (liveness_broken_ticks)."""
    liveness_broken_ticks: int = 0
    """A peer whose send stream broke and has not come back (the transport's
    evidence: a killed process resets its connections at once) and that was
    silent this many ticks counts as down (0: the groups' election timeout T).
    A live but starved peer keeps its connections, so this never mistakes it."""
    campaigns_per_tick: int = 8
    """At most this many groups start a (pre-)campaign per tick on this host; the
    others' ticks wait their turn (0: no limit). Hundreds of groups woken or
    started together then elect over a few ticks instead of in one storm."""
    storage: StorageOptions = field(default_factory=StorageOptions)
    """Options of the data directory's LogEnvironment (groups opened there)."""

    def node_beat_every(self) -> int:
        """Ticks between node beats: node_beat_ticks x beat_ticks, shortened (in whole
        beat ticks, never below one) so NODE_BEATS_PER_SILENCE fit in the silence limit."""
        silence_ticks = max(1, self.liveness_silence_ms // self.tick_ms)
        fit = silence_ticks // NODE_BEATS_PER_SILENCE // self.beat_ticks * self.beat_ticks
        return max(self.beat_ticks, min(self.node_beat_ticks * self.beat_ticks, fit))

    def __post_init__(self) -> None:
        if self.tick_ms <= 0:
            raise ValueError(f"HostOptions.tick_ms must be positive, got {self.tick_ms}")
        for name in ("node_beat_ticks", "beat_ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"HostOptions.{name} must be >= 1, got {getattr(self, name)}")
        if self.liveness_silence_ms <= 0:
            raise ValueError(
                f"HostOptions.liveness_silence_ms must be positive, got {self.liveness_silence_ms}"
            )
        for name in ("liveness_broken_ticks", "campaigns_per_tick"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"HostOptions.{name} must be >= 0, got {value}")
        if self.housekeeping_s <= 0:
            raise ValueError(
                f"HostOptions.housekeeping_s must be positive, got {self.housekeeping_s}"
            )
