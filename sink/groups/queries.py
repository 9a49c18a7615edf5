"""What the group coordinator answers without changing anything: DescribeGroups,
ListGroups, and the offsets' questions (may an OffsetCommit be stored, does a group
subscribe to a topic). Functions of the coordinator's groups; `loaded` false (not
the coordinator now) answers COORDINATOR_LOAD_IN_PROGRESS.

A group that only holds committed offsets (assign() consumers, admin tools) is, to
Kafka, an Empty group with protocol type "": offset_holders() (read each time, a
snapshot load replaces the table) says which.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from sink.groups.group import COMPLETING_REBALANCE, DEAD, EMPTY, STABLE, Group
from sink.groups.membership import OffsetHolders
from sink.groups.messages import DescribedGroup, DescribedMember, ListedGroup

Groups = Mapping[str, Group]


def describe_groups(
    groups: Groups,
    loaded: bool,
    offset_holders: Callable[[], OffsetHolders],
    group_ids: Iterable[str],
) -> list[DescribedGroup]:
    out = []
    for gid in group_ids:
        g = groups.get(gid)
        if not loaded:
            out.append(DescribedGroup(gid, ErrorCode.coordinator_load_in_progress, "", "", ""))
        elif g is None:
            # Only committed offsets: Kafka's Empty group without a protocol type.
            state = EMPTY if offset_holders().has_group(gid) else DEAD
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
    groups: Groups,
    loaded: bool,
    offset_holders: Callable[[], OffsetHolders],
    states: Iterable[str] = (),
    types: Iterable[str] = (),
) -> tuple[ErrorCode, list[ListedGroup]]:
    """Kafka matches state and type filters case-insensitively; empty: all."""
    if not loaded:
        return ErrorCode.coordinator_load_in_progress, []
    want_states = {s.lower() for s in states}
    want_types = {t.lower() for t in types}
    if want_types and "classic" not in want_types:
        return ErrorCode.none, []
    listed = [
        ListedGroup(g.group_id, g.protocol_type or "", g.state)
        for g in groups.values()
        if not g.is_(DEAD) and (not want_states or g.state.lower() in want_states)
    ]
    # Groups that only commit offsets (assign() consumers, admin tools) are Empty
    # groups with protocol type "" to Kafka (GroupMetadataManager loads them so):
    # `kafka-consumer-groups --list` shows them.
    if not want_states or EMPTY.lower() in want_states:
        listed.extend(
            ListedGroup(gid, "", EMPTY) for gid in offset_holders().groups() if gid not in groups
        )
    return ErrorCode.none, listed


def check_commit(
    groups: Groups,
    loaded: bool,
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
) -> ErrorCode:
    """May this OffsetCommit be stored? Kafka's rules: a group unknown to the
    coordinator, or an Empty one, takes commits with generation < 0 (the group
    only stores offsets: assign() consumers, admin tools); otherwise the member
    and generation must be current, and not while the group completes a rebalance."""
    if not loaded:
        return ErrorCode.coordinator_load_in_progress
    g = groups.get(group_id)
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


def subscribed(groups: Groups, group_id: str, topic: str) -> bool:
    """A member of this `consumer` group subscribes to topic (OffsetDelete answers
    GROUP_SUBSCRIBED_TO_TOPIC). Other protocol types are opaque: never subscribed."""
    g = groups.get(group_id)
    if g is None or g.protocol_type != "consumer":
        return False
    return any(
        topic in consumer_subscription_topics(m.metadata(g.protocol_name))
        for m in g.members.values()
    )


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
