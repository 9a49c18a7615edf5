"""A classic group's rebalance steps, shared by JoinGroup, SyncGroup, LeaveGroup and
the clock (Kafka's GroupCoordinator: prepareRebalance, completeAndScheduleNextHeartbeat
...): start a rebalance, end its join phase, drop members, expire sessions, and log a
generation.

The join phase of a rebalance ends when every known member has rejoined and no
pending member is left, or at the rebalance timeout; members that did not rejoin are
removed, static members are kept (KIP-345); an empty group's first rebalance waits
initial_rebalance_delay_ms, extended while members keep coming. Members that send
nothing within their session timeout are evicted (a parked Join/SyncGroup counts as
a heartbeat, except for members new to this rebalance); members that do not SyncGroup
within the rebalance timeout are removed and the group rebalances again.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from sink.groups.group import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
)
from sink.groups.messages import JoinedMember, JoinResponse, SyncResponse
from sink.groups.options import GroupOptions
from sink.groups.outbox import OnCommit, Outbox
from sink.groups.records import GroupRecord, MemberRecord, encode_generation

log = logging.getLogger("sink.groups")


def joined_members(group: Group) -> tuple[JoinedMember, ...]:
    """Every member with its metadata of the chosen protocol (the leader's answer)."""
    return tuple(
        JoinedMember(m.member_id, m.instance_id, m.metadata(group.protocol_name))
        for m in group.members.values()
    )


def current_generation(group: Group, mid: str) -> JoinResponse:
    """The JoinGroup answer of the current generation for member mid."""
    leader = group.leader == mid
    members = joined_members(group) if leader else ()
    return JoinResponse(
        ErrorCode.none,
        group.generation,
        group.protocol_type,
        group.protocol_name,
        group.leader or "",
        mid,
        members,
    )


def group_record(group: Group, assignments: dict[str, bytes]) -> GroupRecord:
    """The log's record of the group's current generation with these assignments."""
    return GroupRecord(
        group.group_id,
        group.protocol_type,
        group.generation,
        group.protocol_name,
        group.leader,
        tuple(
            MemberRecord(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.metadata(group.protocol_name),
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        ),
    )


class Rebalance:
    """The steps, with the counters the metrics read. Effects go to the outbox."""

    def __init__(self, options: GroupOptions, outbox: Outbox) -> None:
        self.options = options
        self.outbox = outbox
        self.rebalances = 0
        """Rebalances started (metrics: group_rebalances)."""
        self.evictions = 0
        """Members removed because their session or rebalance time ran out."""

    # ------------------------------------------------------------ start

    def maybe_prepare(self, now: float, group: Group, reason: str) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self.prepare(now, group, reason)

    def prepare(self, now: float, group: Group, reason: str) -> None:
        self.rebalances += 1
        log.info(
            "groups.rebalance group=%s generation=%d state=%s reason=%s",
            group.group_id,
            group.generation,
            group.state,
            reason,
        )
        if group.is_(COMPLETING_REBALANCE):
            self.reset_sync(group, ErrorCode.rebalance_in_progress)
        timeout = group.rebalance_timeout_ms()
        if group.is_(EMPTY):
            delay = min(self.options.initial_rebalance_delay_ms, timeout)
            group.initial_delay = True
            group.initial_cap = now + timeout
            group.join_deadline = now + delay
        else:
            group.initial_delay = False
            group.join_deadline = now + timeout
        group.state = PREPARING_REBALANCE

    def reset_sync(self, group: Group, err: ErrorCode) -> None:
        """Leave COMPLETING_REBALANCE: parked SyncGroups get err, assignments go."""
        group.storing = None
        group.sync_deadline = None
        group.awaiting_sync.clear()
        for m in group.members.values():
            m.assignment = b""
            if m.sync_token is not None:
                self.outbox.reply(m.sync_token, SyncResponse(err))
                m.sync_token = None

    # ------------------------------------------------------ join phase

    def try_complete_join(self, now: float, group: Group) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
            self.complete_join(now, group)

    def on_join_deadline(self, now: float, group: Group) -> None:
        """The initial delay ends `initial_rebalance_delay_ms` after the LAST new member
        joined (capped at the rebalance timeout). Kafka instead adds a whole delay
        whenever anyone joined during the previous one, so members starting together
        wait two delays (6 s by default); here they wait one."""
        if group.initial_delay:
            quiet = min(
                group.last_join_at + self.options.initial_rebalance_delay_ms, group.initial_cap
            )
            if quiet > now:
                group.join_deadline = quiet
                return
        self.complete_join(now, group)

    def complete_join(self, now: float, group: Group) -> None:
        group.join_deadline = None
        group.initial_delay = False
        for m in list(group.members.values()):
            if m.join_token is None and m.instance_id is None:
                group.remove(m.member_id)  # did not rejoin in time (static ones stay)
        joined = [m for m in group.members.values() if m.join_token is not None]
        if group.members and not joined:
            # Only static members that have not rejoined: wait for them to rejoin or
            # for their sessions to expire.
            group.join_deadline = now + group.rebalance_timeout_ms()
            return
        if group.leader not in group.members or group.members[group.leader].join_token is None:
            group.leader = joined[0].member_id if joined else None
        group.generation += 1
        if not group.members:
            group.state = EMPTY
            group.protocol_name = None
            self.persist(now, group, None)
            return
        group.protocol_name = group.select_protocol()
        group.state = COMPLETING_REBALANCE
        everyone = joined_members(group)
        for m in joined:
            self.outbox.reply(
                m.join_token,  # type: ignore[arg-type]
                JoinResponse(
                    ErrorCode.none,
                    group.generation,
                    group.protocol_type,
                    group.protocol_name,
                    group.leader or "",
                    m.member_id,
                    everyone if m.member_id == group.leader else (),
                ),
            )
            m.join_token = None
            m.is_new = False
            m.deadline = now + m.session_timeout_ms
        group.awaiting_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms()

    # --------------------------------------------------------- members

    def remove_member(self, group: Group, mid: str) -> None:
        m = group.remove(mid)
        if m is not None:
            self.fail_parked(m, ErrorCode.unknown_member_id)

    def member_left(self, now: float, group: Group) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.prepare(now, group, "a member left or expired")
        self.try_complete_join(now, group)

    def fail_parked(self, m: Member, err: ErrorCode) -> None:
        if m.join_token is not None:
            self.outbox.reply(m.join_token, JoinResponse(err, member_id=m.member_id))
            m.join_token = None
        if m.sync_token is not None:
            self.outbox.reply(m.sync_token, SyncResponse(err))
            m.sync_token = None

    def expire(self, now: float, group: Group) -> None:
        """What is due at `now`: sessions, pending member ids, the join phase's end,
        members that did not SyncGroup in time."""
        removed = False
        for m in list(group.members.values()):
            if m.deadline <= now:
                if m.heartbeat_satisfied():
                    m.deadline = now + m.session_timeout_ms
                else:
                    log.info("groups.expired group=%s member=%s", group.group_id, m.member_id)
                    self.evictions += 1
                    self.remove_member(group, m.member_id)
                    removed = True
        expired = [mid for mid, t in group.pending.items() if t <= now]
        for mid in expired:
            del group.pending[mid]
        if removed:
            self.member_left(now, group)
        elif expired:
            self.try_complete_join(now, group)
        if group.join_deadline is not None and group.join_deadline <= now:
            self.on_join_deadline(now, group)
        if group.sync_deadline is not None and group.sync_deadline <= now:
            group.sync_deadline = None
            if group.is_(COMPLETING_REBALANCE) and group.awaiting_sync:
                for mid in list(group.awaiting_sync):
                    self.remove_member(group, mid)
                self.prepare(now, group, "members did not SyncGroup in time")
                self.try_complete_join(now, group)

    # ------------------------------------------------------------- log

    def persist(self, now: float, group: Group, on_commit: OnCommit | None) -> None:
        """Log the group's current generation (assignments as they are now)."""
        assignments = {m.member_id: m.assignment for m in group.members.values()}
        record = group_record(group, assignments)

        def done(now: float, err: ErrorCode) -> None:
            if err == ErrorCode.none:
                group.persisted = True
            if on_commit is not None:
                on_commit(now, err)

        self.outbox.propose(now, encode_generation(record), done)
