"""The configuration of a raftsink node: one frozen dataclass per section.

This is the single place where a setting is declared: its type, default and
documentation (the docstring under the field). The TOML file, the RAFTSINK_*
environment variables, the `raftsink serve` flags and docs/operations.md's
table are all derived from these classes by `sink.config.table`.

Sections embed the option classes of the parts they configure instead of
restating them (`kafka` embeds `KafkaLimits` and `SinkOptions`, `raft` embeds
`NodeOptions`, `transport` is `TransportOptions`, `storage` is
`StorageOptions`): a field added there is configurable here at once, and its
default and doc live only there. Metadata on a section field:
    embed=True      flatten that dataclass's fields into this section
    exclude=(...)   its fields set by the node wiring, not by the operator
    parse="peers"   / "addresses": the value syntax of sink.config.values

Invariant: every check that involves one section lives in its __post_init__
and names the key (`kafka.default_partitions must ...`); checks across
sections live in SinkConfig.__post_init__.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from raftlog.runtime import NodeOptions
from raftlog.storage import StorageOptions
from raftlog.transport import TransportOptions
from sink.config.values import ConfigError, Peer, parse_hostport
from sink.groups import GroupOptions
from sink.kafka.limits import KafkaLimits
from sink.lifecycle.producer_expiry import ProducerExpiryOptions
from sink.offsets import OffsetsOptions
from sink.placement import BalancerOptions, host_label, is_host_label
from sink.placement import options as balancer_defaults
from sink.quotas import QuotaOptions
from sink.security.authz_options import AuthorizationOptions
from sink.security.sasl_options import SaslOptions
from sink.security.tls import TlsOptions
from sink.service import SinkOptions
from sink.topics.configs import TopicDefaults

EVENT_LOOPS = ("uvloop", "asyncio")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class NodeSection:
    id: int
    """This node's id (>= 1); must appear in node.peers."""
    data_dir: str
    """Raft log (segments + LMDB index), snapshots and the sink state live here."""
    peers: dict[int, Peer] = field(metadata={"parse": "peers"})
    """Every node of the cluster, this one included: `ID=RAFT/KAFKA/READ_API,...`
    (or `[[peers]]` tables with id, raft, kafka, read_api)."""
    read_api_listen: str = ""
    """Bind address of the read API (gRPC, connectors and `raftsink status`);
    empty: this node's node.peers read_api address."""
    metrics_listen: str = ""
    """HOST:PORT of the Prometheus /metrics endpoint; empty: no endpoint."""
    log_level: str = "WARNING"
    """Python logging level of the node (INFO shows elections, connections and recovery)."""
    event_loop: str = "uvloop"
    """asyncio event loop of the node: "uvloop" (libuv; at 1,000 records/s about 10%
    less CPU per record and a lower produce p99, bench/produce.py) or "asyncio"
    (the standard library's loop)."""
    join: bool = False
    """This node joins a running cluster (`raftsink members add`): it never campaigns
    and counts in no quorum until the leader's log makes it a member; node.peers only
    gives the addresses to reach the others. The live configuration is always the
    log's: node.peers is the initial configuration of a new cluster only."""
    host: str = ""
    """The machine (failure domain) this node runs on, like Kafka's broker.rack: no two
    replicas of a partition group are placed on one host, so nodes running as several
    processes on one machine share a label (`raftsink local --processes-per-host`);
    empty: this node's id, i.e. every node its own host. Labels are compared as text.
    Each node registers its label through the controller's log at start (and again
    after a change); partition-group placement reads every node's from there
    (docs/partition-groups.md, "Hosts")."""
    shutdown_handoff_ms: int = 3000
    """On SIGTERM a leader first hands leadership to its most caught-up voter, waiting
    at most this long, then stops (Kafka clients get NOT_LEADER_OR_FOLLOWER and move);
    0: stop at once (the others elect a leader after an election timeout)."""

    shutdown_drain_ms: int = 2000
    """On SIGTERM, after the hand-off: the Kafka listeners take no new connections or
    requests and each connection closes once the requests it already sent are
    answered (a produce in flight gets its outcome instead of a cut connection, which
    a client without idempotence answers by sending the batch again; a Fetch waiting
    for data answers at once with what there is), waiting at most this long; then the
    rest are cut. Above raft.outcome_wait_ticks' time (1.2 s by
    default), the longest a produce waits for its outcome after a leader change.
    0: cut at once."""

    def __post_init__(self) -> None:
        for name in ("shutdown_handoff_ms", "shutdown_drain_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"node.{name} must be >= 0, got {getattr(self, name)}")
        if self.id < 1:
            raise ConfigError(f"node.id must be >= 1, got {self.id}")
        if not self.data_dir:
            raise ConfigError("node.data_dir must not be empty")
        if self.id not in self.peers:
            raise ConfigError(f"node.peers must include this node (node.id {self.id})")
        for name in ("read_api_listen", "metrics_listen"):
            if getattr(self, name):
                parse_hostport(f"node.{name}", getattr(self, name))
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"node.event_loop must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}"
            )
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"node.log_level: unknown level {self.log_level!r}")
        if not is_host_label(self.host):
            raise ConfigError(
                "node.host must be printable text of at most 255 characters without "
                f"spaces, ',', '=' or '/', got {self.host!r}"
            )

    @property
    def host_label(self) -> str:
        """The host placement uses: node.host, or this node's id as text."""
        return host_label(self.id, self.host)


@dataclass(frozen=True, slots=True)
class KafkaSection:
    listen: str = ""
    """Bind address of the Kafka listener; empty: this node's node.peers kafka
    address (which is also what Metadata advertises)."""
    external_listen: str = ""
    """Bind address of a second, EXTERNAL Kafka listener (e.g. for clients outside
    a container network); empty: none. Metadata on it advertises
    kafka.external_addresses."""
    external_addresses: dict[int, str] = field(
        default_factory=dict, metadata={"parse": "addresses"}
    )
    """node id -> HOST:PORT of every node as external clients see it
    (`1=127.0.0.1:19092,2=...`); required with kafka.external_listen."""
    cluster_id: str = "raftsink"
    """Reported to Kafka clients in Metadata."""
    default_partitions: int = 1
    """Partitions of an auto-created topic."""
    auto_create_topics: bool = True
    """Create unknown topics on Metadata/Produce (like Kafka's auto.create.topics.enable)."""
    limits: KafkaLimits = field(default_factory=KafkaLimits, metadata={"embed": True})
    service: SinkOptions = field(default_factory=SinkOptions, metadata={"embed": True})

    def __post_init__(self) -> None:
        for name in ("listen", "external_listen"):
            if getattr(self, name):
                parse_hostport(f"kafka.{name}", getattr(self, name))
        if not 1 <= self.default_partitions <= self.service.max_create_partitions:
            raise ConfigError(
                "kafka.default_partitions must be 1..kafka.max_create_partitions "
                f"({self.service.max_create_partitions}), got {self.default_partitions}"
            )


@dataclass(frozen=True, slots=True)
class RaftSection:
    listen: str = ""
    """Bind address of the Raft transport (gRPC); empty: this node's node.peers raft address."""
    options: NodeOptions = field(
        default_factory=NodeOptions,
        metadata={
            "embed": True,
            # storage is its own section; snapshots follow the retention section.
            "exclude": ("storage", "snapshot_every_entries", "snapshot_keep_entries"),
        },
    )

    def __post_init__(self) -> None:
        if self.listen:
            parse_hostport("raft.listen", self.listen)


@dataclass(frozen=True, slots=True)
class RetentionSection:
    snapshot_every_entries: int = 2_000
    """Snapshot the sink state (and compact the Raft log below what topic retention,
    the `topics` section and each topic's configs, still keeps) every this many applied
    entries; 0: never, so the Raft log keeps every record whatever the retention."""
    max_entries: int = 0
    """Cluster-wide entry cap on top of topic retention: with snapshots on, compact the
    log down to this many entries even where a topic's retention would keep more, but
    never past data a registered pipeline has not committed; 0: off (topic retention
    alone decides)."""
    hard_max_entries: int = 0
    """Hard retention: the log never holds more than this many entries, even if a
    pipeline has not consumed them (its reader then reports data loss); 0: none."""

    def __post_init__(self) -> None:
        for name in ("snapshot_every_entries", "max_entries", "hard_max_entries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"retention.{name} must be >= 0, got {getattr(self, name)}")
        if self.hard_max_entries and self.hard_max_entries < self.max_entries:
            raise ConfigError(
                "retention.hard_max_entries must be 0 or >= retention.max_entries "
                f"({self.max_entries}), got {self.hard_max_entries}"
            )


_BALANCER_FIELDS = {
    "leader_balance": "enabled",
    "leader_balance_interval_s": "interval_s",
    "leader_balance_return_delay_s": "return_delay_s",
    "leader_balance_max_in_flight": "max_in_flight",
    "leader_balance_mute_s": "mute_s",
    "leader_balance_transfer_timeout_s": "transfer_timeout_s",
}
"""cluster.* key -> sink.placement.BalancerOptions field (whose defaults these are)."""


@dataclass(frozen=True, slots=True)
class ClusterSection:
    """Cluster-wide behaviour of partition groups (docs/partition-groups.md): the leader
    balancer, which moves group leadership back to preferred replicas and off overloaded
    nodes by leadership transfer. Defaults are sink.placement.BalancerOptions'."""

    partition_groups: bool = True
    """Run a Raft group per partition: group 0 is the controller (topics, configs, ids,
    users/ACLs, quotas, consumer groups), each partition's records live in its own data
    group on `replication_factor` nodes (docs/partition-groups.md, "Running with
    partition groups"). Off: one Raft group holds everything (the layout of releases
    before partition groups). Applies to a new data directory only: an existing one
    keeps the layout it was created with, logged at WARNING when this disagrees
    (sink/node/layout.py). Every node of a cluster must agree: a new node added to a
    one-group cluster needs this off."""
    default_replication_factor: int = 0
    """Replicas of a topic created with replication_factor -1 (or auto-created) when
    partition_groups is on; 0: min(3, the distinct hosts of the controller's voters),
    e.g. 2 for four node processes on two machines (node.host)."""
    leader_balance: bool = balancer_defaults.DEFAULT_ENABLED
    """Balance group leaders over the nodes by leadership transfer (never by forcing an
    election), like Redpanda's enable_leader_balancer; off: leaders stay where elections
    put them. Read once partition groups run (a single-group cluster has one leader)."""
    leader_balance_interval_s: float = balancer_defaults.DEFAULT_INTERVAL_S
    """How often the balancer looks at the groups (with jitter)."""
    leader_balance_return_delay_s: float = balancer_defaults.DEFAULT_RETURN_DELAY_S
    """A replica must have been live and caught up this long before leadership moves to
    it, e.g. back to a restarted node."""
    leader_balance_max_in_flight: int = balancer_defaults.DEFAULT_MAX_IN_FLIGHT
    """Leadership transfers the balancer has outstanding at most."""
    leader_balance_mute_s: float = balancer_defaults.DEFAULT_MUTE_S
    """A group whose transfer failed or timed out is left alone this long (Redpanda's
    leader_balancer_mute_timeout)."""
    leader_balance_transfer_timeout_s: float = balancer_defaults.DEFAULT_TRANSFER_TIMEOUT_S
    """A transfer whose target does not lead within this long counts as failed."""

    def __post_init__(self) -> None:
        if self.default_replication_factor < 0:
            raise ConfigError(
                "cluster.default_replication_factor must be >= 0, got "
                f"{self.default_replication_factor}"
            )
        try:
            self.balancer_options()
        except ValueError as exc:
            message = str(exc)
            for key, name in _BALANCER_FIELDS.items():
                message = message.replace(f"BalancerOptions.{name} ", f"cluster.{key} ")
            raise ConfigError(message) from None

    def balancer_options(self) -> BalancerOptions:
        return BalancerOptions(
            **{name: getattr(self, key) for key, name in _BALANCER_FIELDS.items()}
        )


@dataclass(frozen=True, slots=True)
class SinkConfig:
    """A node's whole configuration; build it with `load_config` (file < env < flags)
    or directly (tests). Every section validates itself when constructed."""

    node: NodeSection = field(metadata={"section": True})
    kafka: KafkaSection = field(default_factory=KafkaSection, metadata={"section": True})
    raft: RaftSection = field(default_factory=RaftSection, metadata={"section": True})
    transport: TransportOptions = field(
        default_factory=TransportOptions,
        metadata={"section": True, "exclude": ("limits",)},  # decode limits: transport's own
    )
    storage: StorageOptions = field(default_factory=StorageOptions, metadata={"section": True})
    retention: RetentionSection = field(
        default_factory=RetentionSection, metadata={"section": True}
    )
    cluster: ClusterSection = field(default_factory=ClusterSection, metadata={"section": True})
    quotas: QuotaOptions = field(default_factory=QuotaOptions, metadata={"section": True})
    offsets: OffsetsOptions = field(default_factory=OffsetsOptions, metadata={"section": True})
    topics: TopicDefaults = field(default_factory=TopicDefaults, metadata={"section": True})
    groups: GroupOptions = field(default_factory=GroupOptions, metadata={"section": True})
    producers: ProducerExpiryOptions = field(
        default_factory=ProducerExpiryOptions, metadata={"section": True}
    )
    sasl: SaslOptions = field(default_factory=SaslOptions, metadata={"section": True})
    tls: TlsOptions = field(default_factory=TlsOptions, metadata={"section": True})
    authorization: AuthorizationOptions = field(
        default_factory=AuthorizationOptions, metadata={"section": True}
    )

    def __post_init__(self) -> None:
        if self.kafka.external_listen and set(self.kafka.external_addresses) != set(
            self.node.peers
        ):
            raise ConfigError(
                "kafka.external_addresses must give an address for every node of node.peers "
                "(kafka.external_listen is set)"
            )

    # Shorthands used by the wiring, the launchers and docker/healthcheck.py.

    @property
    def node_id(self) -> int:
        return self.node.id

    @property
    def data_dir(self) -> str:
        return self.node.data_dir

    @property
    def peers(self) -> dict[int, Peer]:
        return self.node.peers

    @property
    def me(self) -> Peer:
        return self.node.peers[self.node.id]

    @property
    def log_level(self) -> str:
        return self.node.log_level

    @property
    def event_loop(self) -> str:
        return self.node.event_loop

    @property
    def host(self) -> str:
        """This node's host label (node.host, default its id): placement's failure domain."""
        return self.node.host_label

    def listen(self, which: str) -> str:
        """Bind address for "raft" / "kafka" / "read_api": explicit, else the peer address."""
        explicit = {
            "raft": self.raft.listen,
            "kafka": self.kafka.listen,
            "read_api": self.node.read_api_listen,
        }[which]
        return explicit or getattr(self.me, which)

    def node_options(self) -> NodeOptions:
        """The Raft runtime's options: the raft section with the storage section and
        the retention section's snapshot period. snapshot_keep_entries is 0 because
        retention (the node wiring's compaction limit) decides what the log keeps."""
        return replace(
            self.raft.options,
            storage=self.storage,
            snapshot_every_entries=self.retention.snapshot_every_entries,
            snapshot_keep_entries=0,
        )
