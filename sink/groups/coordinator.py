"""GroupCoordinator: the classic group protocol as a sans-I/O state machine (h11 style).

Inputs: requests (each with a token its driver chose), clock ticks, and the outcome
of proposals. Outputs: effects, Reply(token, response) to answer a request (at once
or later: JoinGroup and SyncGroup park until their rebalance step completes) and
Propose(proposal, data) to write a group command to the log. No asyncio, no clock
of its own: `now` is milliseconds of the driver's monotonic clock.

Semantics follow Kafka's GroupCoordinator/GroupMetadata (classic protocol). This
module holds the entry points and what they share (the groups, the timers); the
protocol's parts are beside it:
- join.py: JoinGroup (two-step join, static members);
- rebalance.py: the rebalance steps (join phase, expiry, logging a generation);
- here: SyncGroup (the leader's assignment is proposed to the log; SyncGroup is
  answered to the leader and the members only after that generation is committed,
  so a generation a member acts on is one a new coordinator will load), Heartbeat,
  LeaveGroup, DeleteGroups;
- queries.py: DescribeGroups, ListGroups and the offsets' questions;
- outbox.py / timers.py: the effects and proposals, the timer heap.
After a leader change, load() rebuilds the groups from the applied records with a
fresh session timeout for every member: a failover does not force a rebalance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from sink.groups.group import DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group, Member
from sink.groups.join import Join, uuid_member_id
from sink.groups.membership import NO_OFFSETS, OffsetHolders
from sink.groups.messages import (
    DescribedGroup,
    Effect,
    HeartbeatRequest,
    JoinRequest,
    LeaveResponse,
    ListedGroup,
    SyncRequest,
    SyncResponse,
)
from sink.groups.options import GroupOptions
from sink.groups.outbox import Outbox
from sink.groups.queries import check_commit, describe_groups, list_groups, subscribed
from sink.groups.rebalance import Rebalance, group_record
from sink.groups.records import GroupRecord, encode_delete, encode_generation
from sink.groups.timers import GroupTimers


class GroupCoordinator:
    """Every group this node coordinates. Not loaded (load() not called since the
    last unload()): every group request answers COORDINATOR_LOAD_IN_PROGRESS."""

    def __init__(
        self,
        options: GroupOptions | None = None,
        new_member_id: Callable[[str], str] = uuid_member_id,
        offset_holders: Callable[[], OffsetHolders] = lambda: NO_OFFSETS,
    ) -> None:
        """offset_holders() -> the applied committed-offsets table (read each time: a
        snapshot load replaces it)."""
        opts = options or GroupOptions()
        self._offset_holders = offset_holders
        self.groups: dict[str, Group] = {}
        self.loaded = False
        self._outbox = Outbox(opts)
        self._timers = GroupTimers()
        self._rebalance = Rebalance(opts, self._outbox)
        self._join = Join(opts, self._outbox, self._rebalance, new_member_id)
        self.options = opts

    @property
    def options(self) -> GroupOptions:
        return self._options

    @options.setter
    def options(self, options: GroupOptions) -> None:
        # Replaceable (the tests tighten limits on a running node): every part reads
        # the same options.
        self._options = self._outbox.options = options
        self._rebalance.options = self._join.options = options

    @property
    def rebalances(self) -> int:
        """Rebalances started (metrics: group_rebalances)."""
        return self._rebalance.rebalances

    @property
    def evictions(self) -> int:
        """Members removed because their session or rebalance time ran out."""
        return self._rebalance.evictions

    # ------------------------------------------------------------ load / unload

    def load(self, records: Iterable[GroupRecord], now: float) -> None:
        """Become the coordinator of the applied groups; members get a fresh session."""
        self.groups = {}
        self._timers.clear()
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
        out = self._outbox.begin()
        for g in self.groups.values():
            for m in g.members.values():
                self._rebalance.fail_parked(m, ErrorCode.not_coordinator)
        self.groups = {}
        self._timers.clear()
        self._outbox.forget_proposals()
        self.loaded = False
        return out

    # ------------------------------------------------------------------ join

    def join(self, now: float, token: int, req: JoinRequest) -> list[Effect]:
        out = self._outbox.begin()
        group = self._join.join(now, token, req, self.groups, self.loaded)
        if group is not None:
            self._forget_if_unused(group)
            self._schedule(group)
        return out

    # ------------------------------------------------------------------ sync

    def sync(self, now: float, token: int, req: SyncRequest) -> list[Effect]:
        out = self._outbox.begin()
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
            self._outbox.reply(token, SyncResponse(err))
            return out
        m = group.members[req.member_id]
        m.deadline = now + m.session_timeout_ms
        if group.is_(STABLE):
            self._outbox.reply(token, self._sync_answer(group, m))
            return out
        # COMPLETING_REBALANCE: park until the leader's assignment is committed.
        if m.sync_token is not None:
            self._outbox.reply(m.sync_token, SyncResponse(ErrorCode.rebalance_in_progress))
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
        data = encode_generation(group_record(group, assignments))
        rebalance = self._rebalance
        if len(data) > self.options.max_group_record_bytes or any(
            len(a) > self.options.max_member_metadata_bytes for a in assignments.values()
        ):
            rebalance.reset_sync(group, ErrorCode.invalid_request)
            rebalance.prepare(now, group, "assignment too large")
            return
        generation = group.generation

        def done(now2: float, err: ErrorCode) -> None:
            if group.storing != proposal or group.generation != generation:
                return  # superseded by a rebalance, which answered the parked syncs
            group.storing = None
            if err != ErrorCode.none:
                rebalance.reset_sync(group, err)
                rebalance.prepare(now2, group, f"storing the assignment failed: {err.name}")
                self._schedule(group)
                return
            group.persisted = True
            group.state = STABLE
            group.sync_deadline = None
            group.awaiting_sync.clear()
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
                if m.sync_token is not None:
                    self._outbox.reply(m.sync_token, self._sync_answer(group, m))
                    m.sync_token = None
                    m.deadline = now2 + m.session_timeout_ms
            self._schedule(group)

        proposal = self._outbox.propose(now, data, done)
        group.storing = proposal

    # ------------------------------------------------------------- heartbeat

    def heartbeat(self, now: float, token: int, req: HeartbeatRequest) -> list[Effect]:
        out = self._outbox.begin()
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
        self._outbox.reply(token, err)
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
        out = self._outbox.begin()
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
            self._outbox.reply(token, LeaveResponse(top, tuple((m, i, top) for m, i in members)))
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
                    self._rebalance.remove_member(group, current)
                    left = True
            elif mid in group.pending:
                del group.pending[mid]
                left = True
            elif mid not in group.members:
                err = ErrorCode.unknown_member_id
            else:
                self._rebalance.remove_member(group, mid)
                left = True
            results.append((mid, iid, err))
        if left:
            self._rebalance.member_left(now, group)
        self._schedule(group)
        self._outbox.reply(token, LeaveResponse(ErrorCode.none, tuple(results)))
        return out

    # ---------------------------------------------------------- admin APIs

    def delete(self, now: float, token: int, group_ids: Iterable[str]) -> list[Effect]:
        """DeleteGroups: Empty groups only; answered (list of (group, error)) once the
        deletion is committed."""
        out = self._outbox.begin()
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
            self._outbox.reply(token, list(results.items()))
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
            self._outbox.reply(token, list(results.items()))

        self._outbox.propose(now, encode_delete([g.group_id for g in doomed] + offsets_only), done)
        return out

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        return describe_groups(self.groups, self.loaded, self._offset_holders, group_ids)

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        """Kafka matches state and type filters case-insensitively; empty: all."""
        return list_groups(self.groups, self.loaded, self._offset_holders, states, types)

    # ------------------------------------------------------ offsets' questions

    def check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """May this OffsetCommit be stored? (queries.check_commit: Kafka's rules)"""
        return check_commit(self.groups, self.loaded, group_id, generation, member_id, instance_id)

    def is_empty(self, group_id: str) -> bool:
        """No members (unknown groups too): its offsets may be deleted or expire."""
        g = self.groups.get(group_id)
        return g is None or not g.members

    def subscribed(self, group_id: str, topic: str) -> bool:
        """A member of this `consumer` group subscribes to topic (queries.subscribed)."""
        return subscribed(self.groups, group_id, topic)

    def state_of(self, group_id: str) -> str | None:
        g = self.groups.get(group_id)
        return None if g is None else g.state

    # ---------------------------------------------------------------- clock

    def next_deadline(self) -> float | None:
        """When tick() next has something to do (None: nothing scheduled)."""
        return self._timers.next_deadline(self.groups)

    def tick(self, now: float) -> list[Effect]:
        out = self._outbox.begin()
        for g in self._timers.due(now, self.groups):
            self._rebalance.expire(now, g)
            self._forget_if_unused(g)
            self._schedule(g)
        return out

    def _schedule(self, group: Group) -> None:
        if self.groups.get(group.group_id) is group:
            self._timers.schedule(group)

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
        out = self._outbox.begin()
        self._outbox.committed(now, proposal, error)
        return out
