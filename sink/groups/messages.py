"""The coordinator's inputs and outputs, independent of Kafka wire versions.

Handlers (sink.kafka.handlers.*_group) turn each version's request into one of these
and the answer back into the version's response; the coordinator never sees kio.
Effects are what a call asks its driver to do: send a reply to a parked request, or
propose a command to the log and report back with `committed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    """"" for a member joining the first time."""
    instance_id: str | None
    """group.instance.id of a static member (v5+), else None."""
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    """(name, metadata) in the member's order of preference."""
    session_timeout_ms: int
    rebalance_timeout_ms: int
    """v0 has none: the session timeout (what Kafka does; -1 looped rebalances)."""
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False
    """v4+: an unknown member first gets MEMBER_ID_REQUIRED and its id (KIP-394)."""
    supports_skip_assignment: bool = False
    """v9+: a restarted static leader may be told to skip the assignment (KIP-814)."""


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    """The members and their metadata: to the leader only."""
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()
    """(member id, assignment): sent by the leader only."""


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error: ErrorCode
    """Top-level: set when the whole request failed (unknown group, not coordinator)."""
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()
    """(member id, instance id, error) per member asked to leave."""


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the parked request `token` with `response`."""

    token: int
    response: object


@dataclass(frozen=True, slots=True)
class Propose:
    """Propose `data` to the log; call coordinator.committed(proposal, error) once
    it is committed and applied (error none) or failed."""

    proposal: int
    data: bytes


Effect = Reply | Propose
