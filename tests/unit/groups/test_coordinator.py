"""The classic group protocol, step by step, against the sans-I/O coordinator
(Kafka's GroupCoordinator semantics; Redpanda's group bugs as regression cases)."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from sink.groups import GroupCoordinator, GroupOptions
from sink.groups.messages import JoinResponse, LeaveResponse
from sink.groups.records import decode_generation
from tests.unit.groups.harness import RANGE, Harness

RR = ("roundrobin", b"rr")


def test_two_step_join_initial_delay_and_sync_after_commit():
    h = Harness(GroupOptions(initial_rebalance_delay_ms=3000), auto_commit=False)
    a, ta = h.join_id()
    assert h.reply(ta) is None and h.core.state_of("g") == "PreparingRebalance"
    h.advance(1000)
    b, tb = h.join_id()
    h.advance(1999)  # the delay is not over yet
    assert h.reply(ta) is None and h.reply(tb) is None
    h.advance(1)  # 3000: b joined at 1000, so the group waits until 1000 + 3000
    assert h.reply(ta) is None
    h.advance(999)
    assert h.reply(ta) is None
    h.advance(1)
    ra, rb = h.join_reply(ta), h.join_reply(tb)
    assert (ra.error, ra.generation_id, ra.leader, ra.protocol_name) == (
        ErrorCode.none,
        1,
        a,
        "range",
    )
    assert [m.member_id for m in ra.members] == [a, b] and rb.members == ()
    assert h.core.state_of("g") == "CompletingRebalance"
    sb = h.sync("g", b, 1)
    sa = h.sync("g", a, 1, [(a, b"A"), (b, b"B")])
    # Nobody is answered before the generation is committed to the log.
    assert h.reply(sa) is None and h.reply(sb) is None and len(h.pending) == 1
    h.commit_all()
    assert h.sync_reply(sa).assignment == b"A" and h.sync_reply(sb).assignment == b"B"
    rec = decode_generation(h.log[-1])
    assert (rec.generation, rec.leader, [m.assignment for m in rec.members]) == (
        1,
        a,
        [b"A", b"B"],
    )
    assert h.core.state_of("g") == "Stable"


def test_initial_delay_is_capped_by_the_rebalance_timeout():
    h = Harness(GroupOptions(initial_rebalance_delay_ms=3000))
    _a, ta = h.join_id(rebalance=10_000)
    for _ in range(3):  # a new member every 2.5 s keeps extending the delay
        h.advance(2_500)
        h.join_id(rebalance=10_000)
    h.advance(2_499)  # 9_999: the last joined at 7_500, so quiet only at 10_500
    assert h.reply(ta) is None
    h.advance(1)  # 10_000: the rebalance timeout caps it
    assert h.join_reply(ta).generation_id == 1 and len(h.join_reply(ta).members) == 4


def test_join_checks():
    h = Harness(
        GroupOptions(initial_rebalance_delay_ms=0, max_member_metadata_bytes=100, max_size=2)
    )
    assert h.join_reply(h.join("")).error == ErrorCode.invalid_group_id
    assert h.join_reply(h.join(session=10)).error == ErrorCode.invalid_session_timeout
    big = (("range", b"x" * 101),)
    assert h.join_reply(h.join(protocols=big)).error == ErrorCode.invalid_request
    assert h.join_reply(h.join(ptype="")).error == ErrorCode.inconsistent_group_protocol
    assert h.join_reply(h.join(protocols=())).error == ErrorCode.inconsistent_group_protocol
    assert h.join_reply(h.join(member="ghost")).error == ErrorCode.unknown_member_id
    assert h.core.groups == {}  # failed joins leave nothing behind
    h.stable_group(2)
    assert h.join_reply(h.join()).error == ErrorCode.group_max_size_reached
    # a protocol no member supports, or another protocol type
    assert h.join_reply(h.join(protocols=(RR,))).error == ErrorCode.inconsistent_group_protocol
    assert h.join_reply(h.join(ptype="connect")).error == ErrorCode.inconsistent_group_protocol


def test_oversize_assignment_or_record_is_refused_and_rebalances():
    h = Harness(GroupOptions(initial_rebalance_delay_ms=0, max_group_record_bytes=4096))
    a, ta = h.join_id()
    b, _tb = h.join_id()
    h.advance(0)
    gen, leader = h.join_reply(ta).generation_id, h.join_reply(ta).leader
    follower = b if leader == a else a
    tf = h.sync("g", follower, gen)
    tl = h.sync("g", leader, gen, [(a, b"x" * 3000), (b, b"y" * 3000)])  # 6 KB record
    assert h.sync_reply(tl).error == ErrorCode.invalid_request
    assert h.sync_reply(tf).error == ErrorCode.invalid_request
    assert h.core.state_of("g") == "PreparingRebalance" and h.log == []


def test_protocol_selection_by_votes():
    h = Harness()
    x, y, z = ("x", b"1"), ("y", b"2"), ("z", b"3")
    ma, ta = h.join_id(protocols=(x, y))
    mb, _tb = h.join_id(protocols=(y, x, z))
    mc, _tc = h.join_id(protocols=(y, x))
    h.advance(0)
    r = h.join_reply(ta)
    assert r.protocol_name == "y"  # two votes for y, one for x
    assert {m.member_id: m.metadata for m in r.members} == {ma: b"2", mb: b"2", mc: b"2"}


def test_connect_protocol_type_is_opaque():
    h = Harness()
    _ids, _gen = h.stable_group(2, ptype="connect", protocols=(("sessioned", b"cfg"),))
    d = h.core.describe(["g"])[0]
    assert (d.protocol_type, d.protocol_name, d.state) == ("connect", "sessioned", "Stable")
    assert [m.metadata for m in d.members] == [b"cfg", b"cfg"]


def test_new_member_rebalances_stable_group():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    _c, tc = h.join_id()
    assert h.core.state_of("g") == "PreparingRebalance"
    assert h.heartbeat("g", a, gen) == ErrorCode.rebalance_in_progress
    ta = h.join("g", a)
    assert h.reply(tc) is None  # b has not rejoined yet
    tb = h.join("g", b)
    assert {h.join_reply(t).generation_id for t in (ta, tb, tc)} == {gen + 1}
    # the old generation is refused everywhere
    assert h.heartbeat("g", a, gen) == ErrorCode.illegal_generation
    assert h.sync_reply(h.sync("g", a, gen)).error == ErrorCode.illegal_generation


def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout():
    h = Harness()
    (a, b), gen = h.stable_group(2, rebalance=20_000)
    h.leave("g", (a, None))  # a leaves: rebalance; b must rejoin
    assert h.core.state_of("g") == "PreparingRebalance"
    for _ in range(3):
        h.advance(5_000)
        assert h.heartbeat("g", b, gen) == ErrorCode.rebalance_in_progress
    h.advance(4_999)
    assert h.core.state_of("g") == "PreparingRebalance"
    h.advance(1)
    # b never rejoined (its heartbeats alone do not count): removed, group Empty and logged
    assert h.core.state_of("g") == "Empty" and h.core.groups["g"].members == {}
    assert decode_generation(h.log[-1]).members == ()


def test_eviction_of_a_member_that_stops_heartbeating():
    h = Harness()
    (a, b), gen = h.stable_group(2, session=10_000)
    h.advance(5_000)
    assert h.heartbeat("g", a, gen) == ErrorCode.none  # b is silent
    h.advance(4_999)
    assert h.heartbeat("g", a, gen) == ErrorCode.none and b in h.core.groups["g"].members
    h.advance(1)  # b's session (10 s since its SyncGroup) is over
    assert h.heartbeat("g", a, gen) == ErrorCode.rebalance_in_progress
    assert b not in h.core.groups["g"].members
    r = h.join_reply(h.join("g", a))
    assert (r.generation_id, [m.member_id for m in r.members]) == (gen + 1, [a])


def test_pending_member_expires_so_the_group_never_sticks():
    """Redpanda #3300: a member that got MEMBER_ID_REQUIRED and vanished pinned the
    group in PreparingRebalance. Here it expires after its session timeout."""
    h = Harness()
    (a,), gen = h.stable_group(1, session=10_000, rebalance=300_000)
    ghost = h.join_reply(h.join(session=6_000)).member_id  # never comes back
    ta = h.join("g", a, session=10_000, rebalance=300_000)  # a rejoins (e.g. metadata change)
    assert ghost in h.core.groups["g"].pending and h.reply(ta) is None
    h.advance(6_000)
    assert h.join_reply(ta).generation_id == gen + 1


def test_v0_join_uses_the_session_timeout_as_rebalance_timeout():
    """brod against Redpanda: JoinGroup v0 has no rebalance timeout; treating it as
    none completed every rebalance at once and looped. v0 waits the session timeout."""
    h = Harness()
    t1, t2 = (h.join(session=10_000, rebalance=-1, v4=False) for _ in range(2))
    h.advance(0)
    a, b = h.join_reply(t1).member_id, h.join_reply(t2).member_id
    gen = h.join_reply(t1).generation_id
    h.sync("g", a, gen, [(a, b"x"), (b, b"y")])
    assert h.core.state_of("g") == "Stable"
    assert h.core.groups["g"].members[a].rebalance_timeout_ms == 10_000
    ta = h.join("g", a, session=10_000, rebalance=-1, v4=False, protocols=(RANGE, RR))
    h.advance(5_000)
    assert h.reply(ta) is None  # waiting for b
    tb = h.join("g", b, session=10_000, rebalance=-1, v4=False)
    assert h.join_reply(ta).generation_id == h.join_reply(tb).generation_id == gen + 1


def test_v3_join_without_member_id_step():
    h = Harness()
    t = h.join(v4=False)
    h.advance(0)
    r = h.join_reply(t)
    assert r.error == ErrorCode.none and r.member_id and r.leader == r.member_id


def test_heartbeat_and_sync_errors():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    assert h.heartbeat("nope", a, gen) == ErrorCode.unknown_member_id
    assert h.heartbeat("g", "ghost", gen) == ErrorCode.unknown_member_id
    assert h.heartbeat("g", a, gen + 7) == ErrorCode.illegal_generation
    assert h.sync_reply(h.sync("nope", a, gen)).error == ErrorCode.unknown_member_id
    assert h.sync_reply(h.sync("g", "ghost", gen)).error == ErrorCode.unknown_member_id
    assert h.sync_reply(h.sync("g", a, gen - 1)).error == ErrorCode.illegal_generation
    assert h.sync_reply(h.sync("g", b, gen)).assignment == b"a-" + b.encode()  # Stable: again
    r = h.leave("nope", (a, None))
    assert isinstance(r, LeaveResponse) and r.error == ErrorCode.unknown_member_id
    r = h.leave("g", ("ghost", None), (a, None))
    assert [e for _, _, e in r.members] == [ErrorCode.unknown_member_id, ErrorCode.none]


def test_static_member_restart_without_rebalance_and_fencing():
    h2 = Harness()
    tokens = []
    for inst in ("i1", "i2"):
        tokens.append(h2.join(instance=inst))
    h2.advance(0)
    rs = [h2.join_reply(t) for t in tokens]
    ids = [r.member_id for r in rs]
    gen = rs[0].generation_id
    leader = rs[0].leader
    for mid in ids:
        h2.sync("g", mid, gen, [(m, m.encode()) for m in ids] if mid == leader else ())
    assert h2.core.state_of("g") == "Stable"
    follower = ids[1] if leader == ids[0] else ids[0]
    inst = "i2" if follower == ids[1] else "i1"
    # the follower restarts: same instance id, no member id, same subscription
    t = h2.join(instance=inst)
    r = h2.join_reply(t)
    assert r.error == ErrorCode.none and r.generation_id == gen and r.member_id != follower
    assert h2.core.state_of("g") == "Stable"  # no rebalance
    assert decode_generation(h2.log[-1]).members[ids.index(follower)].member_id == r.member_id
    # the old incarnation is fenced
    assert h2.heartbeat("g", follower, gen, instance=inst) == ErrorCode.fenced_instance_id
    assert h2.heartbeat("g", r.member_id, gen, instance=inst) == ErrorCode.none
    assert h2.sync_reply(h2.sync("g", r.member_id, gen)).assignment == follower.encode()
    # a static member leaves by instance id alone
    lr = h2.leave("g", ("", inst))
    assert lr.members[0][2] == ErrorCode.none
    assert h2.core.state_of("g") == "PreparingRebalance"


def test_static_member_restart_changing_the_chosen_protocol_rebalances():
    h = Harness()
    t = h.join(instance="i1", protocols=(RANGE, RR))
    h.advance(0)
    r = h.join_reply(t)
    h.sync("g", r.member_id, r.generation_id, [(r.member_id, b"x")])
    assert h.core.state_of("g") == "Stable" and r.protocol_name == "range"
    t = h.join(instance="i1", protocols=(RR, RANGE))  # prefers roundrobin: the vote changes
    r2 = h.join_reply(t)  # a rebalance (the only member rejoined: it completes at once)
    assert (r2.generation_id, r2.protocol_name) == (r.generation_id + 1, "roundrobin")


def test_static_leader_restart_keeps_the_group_stable():
    """As Kafka: a restarted static leader is answered with the OLD leader id (v < 9),
    so it runs no assignment; v9 members get skip_assignment and the member list."""
    h = Harness()
    t1, t2 = h.join(instance="i1"), h.join(instance="i2")
    h.advance(0)
    r1 = h.join_reply(t1)
    leader, gen = r1.leader, r1.generation_id
    ids = [h.join_reply(t).member_id for t in (t1, t2)]
    for mid in ids:
        h.sync("g", mid, gen, [(m, m.encode()) for m in ids] if mid == leader else ())
    inst = "i1" if leader == ids[0] else "i2"
    r = h.join_reply(h.join(instance=inst))
    assert h.core.state_of("g") == "Stable"
    assert (r.generation_id, r.leader, r.members) == (gen, leader, ())
    assert r.member_id != leader and h.core.groups["g"].leader == r.member_id
    assert h.sync_reply(h.sync("g", r.member_id, gen)).assignment == leader.encode()
    token = next(h.tokens)
    from sink.groups.messages import JoinRequest

    req = JoinRequest("g", "", inst, "consumer", (RANGE,), 10_000, 30_000, "c", "/h", True, True)
    h._run(h.core.join(h.now, token, req))
    r9 = h.join_reply(token)
    assert r9.skip_assignment and r9.leader == r9.member_id and len(r9.members) == 2
    assert h.core.state_of("g") == "Stable"


def test_leader_that_never_syncs_is_removed():
    h = Harness()
    a, ta = h.join_id(rebalance=20_000)
    b, _tb = h.join_id(rebalance=20_000)
    h.advance(0)
    gen = h.join_reply(ta).generation_id
    leader = h.join_reply(ta).leader
    follower = b if leader == a else a
    tf = h.sync("g", follower, gen)
    h.advance(20_000)
    assert h.sync_reply(tf).error == ErrorCode.rebalance_in_progress
    assert leader not in h.core.groups["g"].members


def test_failed_store_rebalances():
    h = Harness(auto_commit=False)
    a, ta = h.join_id()
    h.advance(0)
    gen = h.join_reply(ta).generation_id
    ts = h.sync("g", a, gen, [(a, b"x")])
    h.commit_all(ErrorCode.coordinator_not_available)
    assert h.sync_reply(ts).error == ErrorCode.coordinator_not_available
    assert h.core.state_of("g") == "PreparingRebalance"


def test_failover_load_keeps_the_generation_without_rebalance():
    h = Harness()
    (a, b), gen = h.stable_group(2, session=10_000)
    h.advance(9_000)  # close to expiry on the old coordinator
    new = GroupCoordinator(GroupOptions())
    new.load(h.store.records(), now=100_000.0)
    g = new.groups["g"]
    assert (g.state, g.generation, list(g.members)) == ("Stable", gen, [a, b])
    assert g.members[b].assignment == b"a-" + b.encode()
    assert new.check_commit("g", gen, a, None) == ErrorCode.none
    # a fresh session: nobody expires before 100_000 + 10_000
    assert new.next_deadline() == 110_000.0
    new.tick(109_999.0)
    assert len(new.groups["g"].members) == 2


def test_unload_answers_parked_requests():
    h = Harness()
    _a, ta = h.join_id()
    _b, tb = h.join_id()
    # both parked in the initial delay (0 ms, not yet ticked)
    h._run(h.core.unload())
    assert h.join_reply(ta).error == ErrorCode.not_coordinator
    assert h.join_reply(tb).error == ErrorCode.not_coordinator
    assert h.join_reply(h.join()).error == ErrorCode.coordinator_load_in_progress


def test_delete_groups():
    h = Harness()
    (a,), _gen = h.stable_group(1)
    h.stable_group(1, group="other")
    t = next(h.tokens)
    h._run(h.core.delete(h.now, t, ["g", "nope", ""]))
    assert dict(h.replies[t]) == {
        "g": ErrorCode.non_empty_group,
        "nope": ErrorCode.group_id_not_found,
        "": ErrorCode.invalid_group_id,
    }
    h.leave("g", (a, None))
    assert h.core.state_of("g") == "Empty" and "g" in h.store.groups
    t = next(h.tokens)
    h._run(h.core.delete(h.now, t, ["g"]))
    assert dict(h.replies[t]) == {"g": ErrorCode.none}
    assert "g" not in h.core.groups and "g" not in h.store.groups and "other" in h.store.groups


def test_check_commit_rules():
    h = Harness()
    assert h.core.check_commit("simple", -1, "", None) == ErrorCode.none  # assign() consumers
    assert h.core.check_commit("simple", 3, "m", None) == ErrorCode.illegal_generation
    (a, _b), gen = h.stable_group(2)
    assert h.core.check_commit("g", gen, a, None) == ErrorCode.none
    assert h.core.check_commit("g", gen - 1, a, None) == ErrorCode.illegal_generation
    assert h.core.check_commit("g", gen, "ghost", None) == ErrorCode.unknown_member_id
    assert h.core.check_commit("g", -1, "", None) == ErrorCode.unknown_member_id
    assert not h.core.is_empty("g") and h.core.subscribed("g", "t")
    assert not h.core.subscribed("g", "other")
    h.join_id()  # rebalance: commits of the current generation still allowed
    assert h.core.check_commit("g", gen, a, None) == ErrorCode.none


def test_list_and_describe():
    h = Harness()
    (a,), _gen = h.stable_group(1)
    h.join_id(group="joining")
    err, groups = h.core.list_groups()
    assert err == ErrorCode.none
    assert {(g.group_id, g.state) for g in groups} == {
        ("g", "Stable"),
        ("joining", "PreparingRebalance"),
    }
    assert [g.group_id for g in h.core.list_groups(["STABLE"])[1]] == ["g"]
    assert h.core.list_groups(types=["consumer"])[1] == []  # group TYPE: classic
    d = {x.group_id: x for x in h.core.describe(["g", "joining", "nope"])}
    assert d["g"].members[0].assignment == b"a-" + a.encode()
    assert d["joining"].members[0].metadata == b""  # no metadata until Stable
    assert d["nope"].state == "Dead"


def test_thousands_of_groups():
    h = Harness(GroupOptions(initial_rebalance_delay_ms=3000))
    start = time.perf_counter()
    members = {}
    for i in range(3000):
        mid, t = h.join_id(group=f"g{i}")
        members[f"g{i}"] = (mid, t)
    h.advance(3000)
    for gid, (mid, t) in members.items():
        r = h.join_reply(t)
        assert r.generation_id == 1
        h.sync(gid, mid, 1, [(mid, b"x")])
    assert all(h.core.state_of(g) == "Stable" for g in members)
    h.advance(10_000)  # nobody heartbeats: every member is evicted, every group Empty
    assert all(h.core.state_of(g) == "Empty" for g in members)
    assert len(h.store.groups) == 3000
    assert time.perf_counter() - start < 60  # generous: a loaded 2-core machine
    assert isinstance(h.join_reply(members["g0"][1]), JoinResponse)
