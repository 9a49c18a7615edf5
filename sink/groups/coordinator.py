"""GroupCoordinator: the classic group protocol as a sans-I/O state machine (h11 style).

Inputs: requests (each with a token its driver chose), clock ticks, and the outcome
of proposals. Outputs: effects, Reply(token, response) to answer a request (at once
or later: JoinGroup and SyncGroup park until their rebalance step completes) and
Propose(proposal, data) to write a group command to the log. No asyncio, no clock
of its own: `now` is milliseconds of the driver's monotonic clock.

Semantics follow Kafka's GroupCoordinator/GroupMetadata (classic protocol):
- two-step join (v4+): an unknown member gets MEMBER_ID_REQUIRED and a pending id
  that expires after its session timeout (Redpanda #3300: pending members that
  never came back pinned groups in PreparingRebalance);
- the join phase of a rebalance ends when every known member has rejoined and no
  pending member is left, or at the rebalance timeout (the largest of the members';
  JoinGroup v0 uses the session timeout, never "none"); members that did not rejoin
  are removed, static members are kept (KIP-345); an empty group's first rebalance
  waits initial_rebalance_delay_ms, extended while members keep coming;
- the leader's SyncGroup assignment is proposed to the log; SyncGroup is answered to
  the leader and the members only after that generation is committed, so a
  generation a member acts on is one a new coordinator will load;
- members that send nothing within their session timeout are evicted (a parked
  Join/SyncGroup counts as a heartbeat, except for members new to this rebalance,
  which expire after new_member_join_timeout_ms); members that do not SyncGroup
  within the rebalance timeout are removed and the group rebalances again;
- static membership: a known group.instance.id joining with an unknown member id
  takes over the old member's id and fences the old incarnation
  (FENCED_INSTANCE_ID); with unchanged metadata of the chosen protocol a Stable
  group does not rebalance (the new id is logged, then answered).
After a leader change, load() rebuilds the groups from the applied records with a
fresh session timeout for every member: a failover does not force a rebalance.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from sink.groups.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
)
from sink.groups.membership import NO_OFFSETS, OffsetHolders
from sink.groups.messages import (
    DescribedGroup,
    DescribedMember,
    Effect,
    HeartbeatRequest,
    JoinedMember,
    JoinRequest,
    JoinResponse,
    LeaveResponse,
    ListedGroup,
    Propose,
    Reply,
    SyncRequest,
    SyncResponse,
)
from sink.groups.options import GroupOptions
from sink.groups.records import GroupRecord, MemberRecord, encode_delete, encode_generation

OnCommit = Callable[[float, ErrorCode], None]

log = logging.getLogger("sink.groups")


def _uuid_member_id(client_id: str) -> str:
    """Kafka's form: client id, dash, a random UUID."""
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class GroupCoordinator:
    """Every group this node coordinates. Not loaded (load() not called since the
    last unload()): every group request answers COORDINATOR_LOAD_IN_PROGRESS."""

    def __init__(
        self,
        options: GroupOptions | None = None,
        new_member_id: Callable[[str], str] = _uuid_member_id,
        offset_holders: Callable[[], OffsetHolders] = lambda: NO_OFFSETS,
    ) -> None:
        """offset_holders() -> the applied committed-offsets table (read each time: a
        snapshot load replaces it)."""
        self.options = options or GroupOptions()
        self._offset_holders = offset_holders
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self.loaded = False
        self._out: list[Effect] = []
        self._proposals: dict[int, OnCommit] = {}
        self._next_proposal = itertools.count(1)
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self.rebalances = 0
        """Rebalances started (metrics: group_rebalances)."""
        self.evictions = 0
        """Members removed because their session or rebalance time ran out."""

    # ------------------------------------------------------------ load / unload

    def load(self, records: Iterable[GroupRecord], now: float) -> None:
        """Become the coordinator of the applied groups; members get a fresh session."""
        self.groups, self._heap = {}, []
        for r in records:
            g = Group(
                r.group_id,
                generation=r.generation,
                protocol_type=r.protocol_type,
                protocol_name=r.protocol_name,
                persisted=True,
            )
            for mr in r.members:
                g.add(
                    Member(
                        mr.member_id,
                        mr.instance_id,
                        mr.client_id,
                        mr.client_host,
                        mr.session_timeout_ms,
                        mr.rebalance_timeout_ms,
                        r.protocol_type or "",
                        ((r.protocol_name or "", mr.subscription),),
                        assignment=mr.assignment,
                        deadline=now + mr.session_timeout_ms,
                    )
                )
            if r.leader in g.members:
                g.leader = r.leader
            g.state = STABLE if g.members else EMPTY
            self.groups[g.group_id] = g
            self._schedule(g)
        self.loaded = True

    def unload(self) -> list[Effect]:
        """Stop coordinating (leadership lost): every parked request is answered
        NOT_COORDINATOR (the client finds the new coordinator); outstanding
        proposals are forgotten."""
        out = self._begin()
        for g in self.groups.values():
            for m in g.members.values():
                self._fail_parked(m, ErrorCode.not_coordinator)
        self.groups, self._heap, self._proposals = {}, [], {}
        self.loaded = False
        return out

    # ------------------------------------------------------------------ join

    def join(self, now: float, token: int, req: JoinRequest) -> list[Effect]:
        out = self._begin()
        err = self._join_precheck(req)
        if err != ErrorCode.none:
            self._reply(token, JoinResponse(err, member_id=req.member_id))
            return out
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                self._reply(
                    token, JoinResponse(ErrorCode.unknown_member_id, member_id=req.member_id)
                )
                return out
            group = self.groups[req.group_id] = Group(req.group_id)
        if req.member_id:
            self._known_join(now, token, group, req)
        else:
            self._unknown_join(now, token, group, req)
        self._forget_if_unused(group)
        self._schedule(group)
        return out

    def _join_precheck(self, req: JoinRequest) -> ErrorCode:
        o = self.options
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if not req.group_id:
            return ErrorCode.invalid_group_id
        if not o.min_session_timeout_ms <= req.session_timeout_ms <= o.max_session_timeout_ms:
            return ErrorCode.invalid_session_timeout
        if sum(len(meta) for _, meta in req.protocols) > o.max_member_metadata_bytes:
            return ErrorCode.invalid_request
        return ErrorCode.none

    def _unknown_join(self, now: float, token: int, group: Group, req: JoinRequest) -> None:
        if group.is_(DEAD):
            self._reply(token, JoinResponse(ErrorCode.coordinator_not_available))
            return
        if not group.supports(req.protocol_type, req.protocols):
            self._reply(token, JoinResponse(ErrorCode.inconsistent_group_protocol))
            return
        new_id = self._new_member_id(req.client_id)
        if req.instance_id is not None:
            old = group.static.get(req.instance_id)
            if old is not None and old in group.members:
                self._static_rejoin(now, token, group, old, new_id, req)
                return
        if group.size() >= self.options.max_size:
            self._reply(token, JoinResponse(ErrorCode.group_max_size_reached))
            return
        if req.instance_id is None and req.require_known_member_id:
            group.pending[new_id] = now + req.session_timeout_ms
            self._reply(token, JoinResponse(ErrorCode.member_id_required, member_id=new_id))
            return
        self._add_member_and_rebalance(now, token, group, new_id, req)

    def _known_join(self, now: float, token: int, group: Group, req: JoinRequest) -> None:
        mid = req.member_id
        if group.is_(DEAD):
            self._reply(token, JoinResponse(ErrorCode.coordinator_not_available, member_id=mid))
            return
        if not group.supports(req.protocol_type, req.protocols):
            self._reply(token, JoinResponse(ErrorCode.inconsistent_group_protocol, member_id=mid))
            return
        if mid in group.pending:
            del group.pending[mid]
            self._add_member_and_rebalance(now, token, group, mid, req)
            return
        if group.is_fenced(mid, req.instance_id):
            self._reply(token, JoinResponse(ErrorCode.fenced_instance_id, member_id=mid))
            return
        m = group.members.get(mid)
        if m is None:
            self._reply(token, JoinResponse(ErrorCode.unknown_member_id, member_id=mid))
            return
        if (group.is_(COMPLETING_REBALANCE) and m.matches(req.protocols)) or (
            group.is_(STABLE) and group.leader != mid and m.matches(req.protocols)
        ):
            m.deadline = now + m.session_timeout_ms
            self._reply(token, self._current_generation(group, mid))
        else:
            self._update_member_and_rebalance(now, token, group, m, req)

    def _static_rejoin(
        self, now: float, token: int, group: Group, old: str, new: str, req: JoinRequest
    ) -> None:
        """A known group.instance.id with an unknown member id: a restarted static
        member. It replaces (fences) the old incarnation under the new id."""
        m = group.members[old]
        self._fail_parked(m, ErrorCode.fenced_instance_id)
        old_leader = group.leader
        group.replace_member_id(old, new)
        m.session_timeout_ms, m.rebalance_timeout_ms = (
            req.session_timeout_ms,
            self._rebalance_ms(req),
        )
        m.client_id, m.client_host = req.client_id, req.client_host
        m.deadline = now + m.session_timeout_ms
        m.protocols = req.protocols
        if group.is_(STABLE) and group.select_protocol() == group.protocol_name:
            # KIP-345 (as Kafka): the chosen protocol stays, so no rebalance. The new
            # member id is logged first, so a coordinator that takes over knows it; the
            # member is answered once that is committed, with the OLD leader id so a
            # restarted leader does not run a trivial assignment no one would receive
            # (v9+: it gets the members and skip_assignment instead).
            generation = group.generation

            def done(now2: float, err: ErrorCode) -> None:
                if err != ErrorCode.none:
                    self._reply(token, JoinResponse(err, member_id=new))
                elif new not in group.members or group.generation != generation:
                    self._reply(token, JoinResponse(ErrorCode.unknown_member_id, member_id=new))
                elif group.leader == new and req.supports_skip_assignment:
                    r = self._current_generation(group, new)
                    self._reply(token, replace(r, skip_assignment=True))
                else:
                    r = self._current_generation(group, new)
                    leader = old if old_leader == old else (group.leader or "")
                    self._reply(token, replace(r, leader=leader, members=()))

            self._persist(now, group, done)
            return
        log.info(
            "groups.static_rejoin group=%s instance=%s state=%s: rebalance",
            group.group_id,
            req.instance_id,
            group.state,
        )
        self._update_member_and_rebalance(now, token, group, m, req)

    def _rebalance_ms(self, req: JoinRequest) -> int:
        # JoinGroup v0 has no rebalance timeout (the handler passes the session
        # timeout); a non-positive one would complete rebalances at once and loop.
        return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms

    def _add_member_and_rebalance(
        self, now: float, token: int, group: Group, mid: str, req: JoinRequest
    ) -> None:
        if not group.members:
            group.protocol_type = req.protocol_type
        m = Member(
            mid,
            req.instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            self._rebalance_ms(req),
            req.protocol_type,
            req.protocols,
            join_token=token,
            deadline=now + self.options.new_member_join_timeout_ms,
            is_new=True,
        )
        if req.instance_id is not None:
            prev = group.static.get(req.instance_id)
            if prev is not None and prev not in group.members:
                del group.static[req.instance_id]
        group.add(m)
        group.last_join_at = now
        self._maybe_prepare_rebalance(now, group, f"new member {mid}")
        self._try_complete_join(now, group)

    def _update_member_and_rebalance(
        self, now: float, token: int, group: Group, m: Member, req: JoinRequest
    ) -> None:
        if m.join_token is not None and m.join_token != token:
            # A second JoinGroup from the same member (its client retried on another
            # connection): the older one is answered, so no request stays parked.
            self._reply(m.join_token, JoinResponse(ErrorCode.rebalance_in_progress))
        m.protocols = req.protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = (
            req.session_timeout_ms,
            self._rebalance_ms(req),
        )
        m.join_token = token
        self._maybe_prepare_rebalance(now, group, f"member {m.member_id} rejoined")
        self._try_complete_join(now, group)

    def _current_generation(self, group: Group, mid: str) -> JoinResponse:
        leader = group.leader == mid
        members = self._joined_members(group) if leader else ()
        return JoinResponse(
            ErrorCode.none,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            mid,
            members,
        )

    def _joined_members(self, group: Group) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        )

    # ------------------------------------------------------------- rebalance

    def _maybe_prepare_rebalance(self, now: float, group: Group, reason: str) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(now, group, reason)

    def _prepare_rebalance(self, now: float, group: Group, reason: str) -> None:
        self.rebalances += 1
        log.info(
            "groups.rebalance group=%s generation=%d state=%s reason=%s",
            group.group_id,
            group.generation,
            group.state,
            reason,
        )
        if group.is_(COMPLETING_REBALANCE):
            self._reset_sync(group, ErrorCode.rebalance_in_progress)
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

    def _reset_sync(self, group: Group, err: ErrorCode) -> None:
        """Leave COMPLETING_REBALANCE: parked SyncGroups get err, assignments go."""
        group.storing = None
        group.sync_deadline = None
        group.awaiting_sync.clear()
        for m in group.members.values():
            m.assignment = b""
            if m.sync_token is not None:
                self._reply(m.sync_token, SyncResponse(err))
                m.sync_token = None

    def _try_complete_join(self, now: float, group: Group) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
            self._complete_join(now, group)

    def _on_join_deadline(self, now: float, group: Group) -> None:
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
        self._complete_join(now, group)

    def _complete_join(self, now: float, group: Group) -> None:
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
            self._persist(now, group, None)
            return
        group.protocol_name = group.select_protocol()
        group.state = COMPLETING_REBALANCE
        everyone = self._joined_members(group)
        for m in joined:
            self._reply(
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

    # ------------------------------------------------------------------ sync

    def sync(self, now: float, token: int, req: SyncRequest) -> list[Effect]:
        out = self._begin()
        group = self.groups.get(req.group_id)
        err = self._member_check(group, req.member_id, req.instance_id, req.generation_id)
        if err == ErrorCode.none and group is not None:
            if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
                req.protocol_name is not None and req.protocol_name != group.protocol_name
            ):
                err = ErrorCode.inconsistent_group_protocol
            elif group.is_(EMPTY):
                err = ErrorCode.unknown_member_id
            elif group.is_(PREPARING_REBALANCE):
                err = ErrorCode.rebalance_in_progress
        if err != ErrorCode.none or group is None:
            self._reply(token, SyncResponse(err))
            return out
        m = group.members[req.member_id]
        m.deadline = now + m.session_timeout_ms
        if group.is_(STABLE):
            self._reply(token, self._sync_answer(group, m))
            return out
        # COMPLETING_REBALANCE: park until the leader's assignment is committed.
        if m.sync_token is not None:
            self._reply(m.sync_token, SyncResponse(ErrorCode.rebalance_in_progress))
        m.sync_token = token
        group.awaiting_sync.discard(m.member_id)
        if m.member_id == group.leader and group.storing is None:
            self._store_assignment(now, group, req)
        self._schedule(group)
        return out

    def _sync_answer(self, group: Group, m: Member) -> SyncResponse:
        return SyncResponse(ErrorCode.none, group.protocol_type, group.protocol_name, m.assignment)

    def _store_assignment(self, now: float, group: Group, req: SyncRequest) -> None:
        assignments = {mid: a for mid, a in req.assignments if mid in group.members}
        data = encode_generation(self._record(group, assignments))
        if len(data) > self.options.max_group_record_bytes or any(
            len(a) > self.options.max_member_metadata_bytes for a in assignments.values()
        ):
            self._reset_sync(group, ErrorCode.invalid_request)
            self._prepare_rebalance(now, group, "assignment too large")
            return
        generation = group.generation

        def done(now2: float, err: ErrorCode) -> None:
            if group.storing != proposal or group.generation != generation:
                return  # superseded by a rebalance, which answered the parked syncs
            group.storing = None
            if err != ErrorCode.none:
                self._reset_sync(group, err)
                self._prepare_rebalance(now2, group, f"storing the assignment failed: {err.name}")
                self._schedule(group)
                return
            group.persisted = True
            group.state = STABLE
            group.sync_deadline = None
            group.awaiting_sync.clear()
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
                if m.sync_token is not None:
                    self._reply(m.sync_token, self._sync_answer(group, m))
                    m.sync_token = None
                    m.deadline = now2 + m.session_timeout_ms
            self._schedule(group)

        proposal = self._propose(now, data, done)
        group.storing = proposal

    # ------------------------------------------------------------- heartbeat

    def heartbeat(self, now: float, token: int, req: HeartbeatRequest) -> list[Effect]:
        out = self._begin()
        group = self.groups.get(req.group_id)
        err = self._member_check(group, req.member_id, req.instance_id, req.generation_id)
        if err == ErrorCode.none and group is not None:
            if group.is_(EMPTY):
                err = ErrorCode.unknown_member_id
            else:
                m = group.members[req.member_id]
                m.deadline = now + m.session_timeout_ms
                if group.is_(PREPARING_REBALANCE):
                    err = ErrorCode.rebalance_in_progress
        self._reply(token, err)
        return out

    def _member_check(
        self, group: Group | None, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    # ----------------------------------------------------------------- leave

    def leave(
        self, now: float, token: int, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> list[Effect]:
        """Members (member id, instance id) leave; a static member may leave by
        instance id alone (member id "")."""
        out = self._begin()
        members = list(members)
        group = self.groups.get(group_id)
        top = ErrorCode.none
        if not self.loaded:
            top = ErrorCode.coordinator_load_in_progress
        elif group is None:
            top = ErrorCode.unknown_member_id
        elif group.is_(DEAD):
            top = ErrorCode.coordinator_not_available
        if top != ErrorCode.none or group is None:
            self._reply(token, LeaveResponse(top, tuple((m, i, top) for m, i in members)))
            return out
        results = []
        left = False
        for mid, iid in members:
            err = ErrorCode.none
            if iid is not None:
                current = group.static.get(iid)
                if current is None or current not in group.members:
                    err = ErrorCode.unknown_member_id
                elif mid and mid != current:
                    err = ErrorCode.fenced_instance_id
                else:
                    self._remove_member(group, current)
                    left = True
            elif mid in group.pending:
                del group.pending[mid]
                left = True
            elif mid not in group.members:
                err = ErrorCode.unknown_member_id
            else:
                self._remove_member(group, mid)
                left = True
            results.append((mid, iid, err))
        if left:
            self._member_left(now, group)
        self._schedule(group)
        self._reply(token, LeaveResponse(ErrorCode.none, tuple(results)))
        return out

    def _remove_member(self, group: Group, mid: str) -> None:
        m = group.remove(mid)
        if m is not None:
            self._fail_parked(m, ErrorCode.unknown_member_id)

    def _member_left(self, now: float, group: Group) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(now, group, "a member left or expired")
        self._try_complete_join(now, group)

    def _fail_parked(self, m: Member, err: ErrorCode) -> None:
        if m.join_token is not None:
            self._reply(m.join_token, JoinResponse(err, member_id=m.member_id))
            m.join_token = None
        if m.sync_token is not None:
            self._reply(m.sync_token, SyncResponse(err))
            m.sync_token = None

    # ---------------------------------------------------------- admin APIs

    def delete(self, now: float, token: int, group_ids: Iterable[str]) -> list[Effect]:
        """DeleteGroups: Empty groups only; answered (list of (group, error)) once the
        deletion is committed."""
        out = self._begin()
        results: dict[str, ErrorCode] = {}
        doomed: list[Group] = []
        # Groups that only hold committed offsets are Empty groups to Kafka: deleted
        # (their offsets with them, in the same entry), never GROUP_ID_NOT_FOUND.
        offsets_only: list[str] = []
        holders = self._offset_holders()
        for gid in group_ids:
            g = self.groups.get(gid)
            if not self.loaded:
                results[gid] = ErrorCode.coordinator_load_in_progress
            elif not gid:
                results[gid] = ErrorCode.invalid_group_id
            elif g is None and holders.has_group(gid):
                results[gid] = ErrorCode.none
                offsets_only.append(gid)
            elif g is None or g.is_(DEAD):
                results[gid] = ErrorCode.group_id_not_found
            elif not g.is_(EMPTY):
                results[gid] = ErrorCode.non_empty_group
            else:
                g.state = DEAD  # joins now get COORDINATOR_NOT_AVAILABLE until it is gone
                results[gid] = ErrorCode.none
                doomed.append(g)
        if not doomed and not offsets_only:
            self._reply(token, list(results.items()))
            return out

        def done(now2: float, err: ErrorCode) -> None:
            for g in doomed:
                if err == ErrorCode.none:
                    if self.groups.get(g.group_id) is g:
                        del self.groups[g.group_id]
                else:
                    g.state = EMPTY
                    results[g.group_id] = err
            if err != ErrorCode.none:
                for gid in offsets_only:
                    results[gid] = err
            self._reply(token, list(results.items()))

        self._propose(now, encode_delete([g.group_id for g in doomed] + offsets_only), done)
        return out

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        out = []
        for gid in group_ids:
            g = self.groups.get(gid)
            if not self.loaded:
                out.append(DescribedGroup(gid, ErrorCode.coordinator_load_in_progress, "", "", ""))
            elif g is None:
                # Only committed offsets: Kafka's Empty group without a protocol type.
                state = EMPTY if self._offset_holders().has_group(gid) else DEAD
                out.append(DescribedGroup(gid, ErrorCode.none, state, "", ""))
            else:
                stable = g.is_(STABLE)
                members = tuple(
                    DescribedMember(
                        m.member_id,
                        m.instance_id,
                        m.client_id,
                        m.client_host,
                        m.metadata(g.protocol_name) if stable else b"",
                        m.assignment if stable else b"",
                    )
                    for m in g.members.values()
                )
                out.append(
                    DescribedGroup(
                        gid,
                        ErrorCode.none,
                        g.state,
                        g.protocol_type or "",
                        (g.protocol_name or "") if stable else "",
                        members,
                    )
                )
        return out

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        """Kafka matches state and type filters case-insensitively; empty: all."""
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress, []
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        if want_types and "classic" not in want_types:
            return ErrorCode.none, []
        listed = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state)
            for g in self.groups.values()
            if not g.is_(DEAD) and (not want_states or g.state.lower() in want_states)
        ]
        # Groups that only commit offsets (assign() consumers, admin tools) are Empty
        # groups with protocol type "" to Kafka (GroupMetadataManager loads them so):
        # `kafka-consumer-groups --list` shows them.
        if not want_states or EMPTY.lower() in want_states:
            listed.extend(
                ListedGroup(gid, "", EMPTY)
                for gid in self._offset_holders().groups()
                if gid not in self.groups
            )
        return ErrorCode.none, listed

    # ------------------------------------------------------ offsets' questions

    def check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """May this OffsetCommit be stored? Kafka's rules: a group unknown to the
        coordinator, or an Empty one, takes commits with generation < 0 (the group
        only stores offsets: assign() consumers, admin tools); otherwise the member
        and generation must be current, and not while the group completes a rebalance."""
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
        if g.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if g.is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if generation < 0 and g.is_(EMPTY):
            return ErrorCode.none
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.is_(COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def is_empty(self, group_id: str) -> bool:
        """No members (unknown groups too): its offsets may be deleted or expire."""
        g = self.groups.get(group_id)
        return g is None or not g.members

    def subscribed(self, group_id: str, topic: str) -> bool:
        """A member of this `consumer` group subscribes to topic (OffsetDelete answers
        GROUP_SUBSCRIBED_TO_TOPIC). Other protocol types are opaque: never subscribed."""
        g = self.groups.get(group_id)
        if g is None or g.protocol_type != "consumer":
            return False
        return any(
            topic in consumer_subscription_topics(m.metadata(g.protocol_name))
            for m in g.members.values()
        )

    def state_of(self, group_id: str) -> str | None:
        g = self.groups.get(group_id)
        return None if g is None else g.state

    # ---------------------------------------------------------------- clock

    def next_deadline(self) -> float | None:
        """When tick() next has something to do (None: nothing scheduled)."""
        while self._heap:
            when, _, gid = self._heap[0]
            g = self.groups.get(gid)
            if g is not None and g.heap_at == when:
                return when
            heapq.heappop(self._heap)  # stale entry
        return None

    def tick(self, now: float) -> list[Effect]:
        out = self._begin()
        while self._heap and self._heap[0][0] <= now:
            when, _, gid = heapq.heappop(self._heap)
            g = self.groups.get(gid)
            if g is None or g.heap_at != when:
                continue
            g.heap_at = None
            self._expire(now, g)
            self._forget_if_unused(g)
            self._schedule(g)
        return out

    def _expire(self, now: float, group: Group) -> None:
        removed = False
        for m in list(group.members.values()):
            if m.deadline <= now:
                if m.heartbeat_satisfied():
                    m.deadline = now + m.session_timeout_ms
                else:
                    log.info("groups.expired group=%s member=%s", group.group_id, m.member_id)
                    self.evictions += 1
                    self._remove_member(group, m.member_id)
                    removed = True
        expired = [mid for mid, t in group.pending.items() if t <= now]
        for mid in expired:
            del group.pending[mid]
        if removed:
            self._member_left(now, group)
        elif expired:
            self._try_complete_join(now, group)
        if group.join_deadline is not None and group.join_deadline <= now:
            self._on_join_deadline(now, group)
        if group.sync_deadline is not None and group.sync_deadline <= now:
            group.sync_deadline = None
            if group.is_(COMPLETING_REBALANCE) and group.awaiting_sync:
                for mid in list(group.awaiting_sync):
                    self._remove_member(group, mid)
                self._prepare_rebalance(now, group, "members did not SyncGroup in time")
                self._try_complete_join(now, group)

    def _schedule(self, group: Group) -> None:
        if self.groups.get(group.group_id) is not group:
            return
        nd = group.next_deadline()
        if nd is not None and (group.heap_at is None or nd < group.heap_at):
            group.heap_at = nd
            heapq.heappush(self._heap, (nd, next(self._seq), group.group_id))

    def _forget_if_unused(self, group: Group) -> None:
        """A group made by a join that failed (nothing logged, nobody in it) is dropped."""
        if (
            group.is_(EMPTY)
            and not group.members
            and not group.pending
            and not group.persisted
            and group.generation == 0
            and self.groups.get(group.group_id) is group
        ):
            del self.groups[group.group_id]

    # ------------------------------------------------------------ proposals

    def committed(self, now: float, proposal: int, error: ErrorCode) -> list[Effect]:
        """The outcome of a Propose: error none once committed and applied."""
        out = self._begin()
        on_commit = self._proposals.pop(proposal, None)
        if on_commit is not None:
            on_commit(now, error)
        return out

    def _persist(self, now: float, group: Group, on_commit: OnCommit | None) -> None:
        """Log the group's current generation (assignments as they are now)."""
        assignments = {m.member_id: m.assignment for m in group.members.values()}
        record = self._record(group, assignments)

        def done(now: float, err: ErrorCode) -> None:
            if err == ErrorCode.none:
                group.persisted = True
            if on_commit is not None:
                on_commit(now, err)

        self._propose(now, encode_generation(record), done)

    def _record(self, group: Group, assignments: dict[str, bytes]) -> GroupRecord:
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

    def _propose(self, now: float, data: bytes, on_commit: OnCommit) -> int:
        """A command for the log. One larger than max_group_record_bytes is never
        proposed (a Raft entry has a hard size limit): it fails at once, INVALID_REQUEST."""
        proposal = next(self._next_proposal)
        if len(data) > self.options.max_group_record_bytes:
            log.warning("groups.record_too_large bytes=%d", len(data))
            on_commit(now, ErrorCode.invalid_request)
            return proposal
        self._proposals[proposal] = on_commit
        self._out.append(Propose(proposal, data))
        return proposal

    # ------------------------------------------------------------- plumbing

    def _begin(self) -> list[Effect]:
        self._out = []
        return self._out

    def _reply(self, token: int, response: object) -> None:
        self._out.append(Reply(token, response))


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def consumer_subscription_topics(metadata: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription (every version starts with i16
    version, then an array of strings); empty when it cannot be read."""
    try:
        pos = 2
        (n,) = _I32.unpack_from(metadata, pos)
        pos += 4
        out = set()
        for _ in range(max(n, 0)):
            (ln,) = _I16.unpack_from(metadata, pos)
            pos += 2
            out.add(metadata[pos : pos + ln].decode())
            pos += ln
        return out
    except (struct.error, UnicodeDecodeError):
        return set()
