"""JoinGroup on the coordinator: who joins, under which member id, and which
rebalance that starts (Kafka's GroupCoordinator.handleJoinGroup).

- two-step join (v4+): an unknown member gets MEMBER_ID_REQUIRED and a pending id
  that expires after its session timeout (Redpanda #3300: pending members that
  never came back pinned groups in PreparingRebalance);
- a known member that rejoins with unchanged metadata while nothing needs to change
  gets the current generation; otherwise it (re)starts a rebalance, whose join phase
  answers every parked JoinGroup (rebalance.py);
- static membership: a known group.instance.id joining with an unknown member id
  takes over the old member's id and fences the old incarnation
  (FENCED_INSTANCE_ID); with unchanged metadata of the chosen protocol a Stable
  group does not rebalance (the new id is logged, then answered).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from sink.groups.group import COMPLETING_REBALANCE, DEAD, STABLE, Group, Member
from sink.groups.messages import JoinRequest, JoinResponse
from sink.groups.options import GroupOptions
from sink.groups.outbox import Outbox
from sink.groups.rebalance import Rebalance, current_generation

log = logging.getLogger("sink.groups")


def uuid_member_id(client_id: str) -> str:
    """Kafka's form: client id, dash, a random UUID."""
    return f"{client_id or 'member'}-{uuid.uuid4()}"


def rebalance_ms(req: JoinRequest) -> int:
    # JoinGroup v0 has no rebalance timeout (the handler passes the session
    # timeout); a non-positive one would complete rebalances at once and loop.
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms


class Join:
    def __init__(
        self,
        options: GroupOptions,
        outbox: Outbox,
        rebalance: Rebalance,
        new_member_id: Callable[[str], str],
    ) -> None:
        self.options = options
        self.outbox = outbox
        self.rebalance = rebalance
        self._new_member_id = new_member_id

    def join(
        self, now: float, token: int, req: JoinRequest, groups: dict[str, Group], loaded: bool
    ) -> Group | None:
        """Handle a JoinGroup (answered now or parked); the group it touched, for the
        caller to forget if unused and schedule (None: answered before any group)."""
        err = self._precheck(req, loaded)
        if err != ErrorCode.none:
            self.outbox.reply(token, JoinResponse(err, member_id=req.member_id))
            return None
        group = groups.get(req.group_id)
        if group is None:
            if req.member_id:
                self.outbox.reply(
                    token, JoinResponse(ErrorCode.unknown_member_id, member_id=req.member_id)
                )
                return None
            group = groups[req.group_id] = Group(req.group_id)
        if req.member_id:
            self._known_join(now, token, group, req)
        else:
            self._unknown_join(now, token, group, req)
        return group

    def _precheck(self, req: JoinRequest, loaded: bool) -> ErrorCode:
        o = self.options
        if not loaded:
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
            self.outbox.reply(token, JoinResponse(ErrorCode.coordinator_not_available))
            return
        if not group.supports(req.protocol_type, req.protocols):
            self.outbox.reply(token, JoinResponse(ErrorCode.inconsistent_group_protocol))
            return
        new_id = self._new_member_id(req.client_id)
        if req.instance_id is not None:
            old = group.static.get(req.instance_id)
            if old is not None and old in group.members:
                self._static_rejoin(now, token, group, old, new_id, req)
                return
        if group.size() >= self.options.max_size:
            self.outbox.reply(token, JoinResponse(ErrorCode.group_max_size_reached))
            return
        if req.instance_id is None and req.require_known_member_id:
            group.pending[new_id] = now + req.session_timeout_ms
            self.outbox.reply(token, JoinResponse(ErrorCode.member_id_required, member_id=new_id))
            return
        self._add_member_and_rebalance(now, token, group, new_id, req)

    def _known_join(self, now: float, token: int, group: Group, req: JoinRequest) -> None:
        mid = req.member_id
        reply = self.outbox.reply
        if group.is_(DEAD):
            reply(token, JoinResponse(ErrorCode.coordinator_not_available, member_id=mid))
            return
        if not group.supports(req.protocol_type, req.protocols):
            reply(token, JoinResponse(ErrorCode.inconsistent_group_protocol, member_id=mid))
            return
        if mid in group.pending:
            del group.pending[mid]
            self._add_member_and_rebalance(now, token, group, mid, req)
            return
        if group.is_fenced(mid, req.instance_id):
            reply(token, JoinResponse(ErrorCode.fenced_instance_id, member_id=mid))
            return
        m = group.members.get(mid)
        if m is None:
            reply(token, JoinResponse(ErrorCode.unknown_member_id, member_id=mid))
            return
        if (group.is_(COMPLETING_REBALANCE) and m.matches(req.protocols)) or (
            group.is_(STABLE) and group.leader != mid and m.matches(req.protocols)
        ):
            m.deadline = now + m.session_timeout_ms
            reply(token, current_generation(group, mid))
        else:
            self._update_member_and_rebalance(now, token, group, m, req)

    def _static_rejoin(
        self, now: float, token: int, group: Group, old: str, new: str, req: JoinRequest
    ) -> None:
        """A known group.instance.id with an unknown member id: a restarted static
        member. It replaces (fences) the old incarnation under the new id."""
        m = group.members[old]
        self.rebalance.fail_parked(m, ErrorCode.fenced_instance_id)
        old_leader = group.leader
        group.replace_member_id(old, new)
        m.session_timeout_ms, m.rebalance_timeout_ms = (
            req.session_timeout_ms,
            rebalance_ms(req),
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
            reply = self.outbox.reply

            def done(now2: float, err: ErrorCode) -> None:
                if err != ErrorCode.none:
                    reply(token, JoinResponse(err, member_id=new))
                elif new not in group.members or group.generation != generation:
                    reply(token, JoinResponse(ErrorCode.unknown_member_id, member_id=new))
                elif group.leader == new and req.supports_skip_assignment:
                    r = current_generation(group, new)
                    reply(token, replace(r, skip_assignment=True))
                else:
                    r = current_generation(group, new)
                    leader = old if old_leader == old else (group.leader or "")
                    reply(token, replace(r, leader=leader, members=()))

            self.rebalance.persist(now, group, done)
            return
        log.info(
            "groups.static_rejoin group=%s instance=%s state=%s: rebalance",
            group.group_id,
            req.instance_id,
            group.state,
        )
        self._update_member_and_rebalance(now, token, group, m, req)

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
            rebalance_ms(req),
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
        self.rebalance.maybe_prepare(now, group, f"new member {mid}")
        self.rebalance.try_complete_join(now, group)

    def _update_member_and_rebalance(
        self, now: float, token: int, group: Group, m: Member, req: JoinRequest
    ) -> None:
        if m.join_token is not None and m.join_token != token:
            # A second JoinGroup from the same member (its client retried on another
            # connection): the older one is answered, so no request stays parked.
            self.outbox.reply(m.join_token, JoinResponse(ErrorCode.rebalance_in_progress))
        m.protocols = req.protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = (
            req.session_timeout_ms,
            rebalance_ms(req),
        )
        m.join_token = token
        self.rebalance.maybe_prepare(now, group, f"member {m.member_id} rejoined")
        self.rebalance.try_complete_join(now, group)
