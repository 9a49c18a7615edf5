"""The loops of a RaftHost: ticks and housekeeping (a part of
raftlog.runtime.host.RaftHost: every field is RaftHost's, set in its __init__;
this class holds no state of its own).

The tick loop ticks every group that is not quiesced, at most
campaigns_per_tick of them starting a (pre-)campaign per tick; a stalled loop
skips the missed ticks for followers and replays them for leaders. A fresh
group's first election is staggered across the host. The housekeeping loop runs
every group's proposal/read timeouts and commit checkpoints.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from raftlog.core import Role

if TYPE_CHECKING:
    from raftlog.runtime.group import RaftGroup

_STALL_DRAIN_ROUNDS = 4
"""Loop rounds run after a stall before leaders replay its ticks (see _ticker)."""


class HostTicks:
    """The tick and housekeeping loops of RaftHost (no state of its own)."""

    def _stagger_first_election(self, group: RaftGroup) -> None:
        """A fresh group (term 0) elects first on its preferred replica (the
        group's preferred_leader when it is a voter, else voters[gid mod n]
        sorted), in the next free slot of campaigns_per_tick
        first elections per tick on this host; the other replicas wait 3T ticks
        beyond that slot (they campaign only if the preferred one could not).
        1,000 groups started together then elect a few per tick without
        competing candidates, each quiesces soon after, and only a few dozen are
        awake (heartbeating every tick) at any time: no storm of split votes on
        a starved box. Their leaders spread over the nodes."""
        if not self.quiescence_on:
            return
        c = group.core
        voters = sorted(c.membership.voters)
        if c.term != 0 or len(voters) < 2 or self.node_id not in voters:
            return
        now = self.stats.ticks
        rate = self.options.campaigns_per_tick or 1_000_000
        self._first_slot = max(self._first_slot, float(now)) + 1.0 / rate
        delay = int(self._first_slot - now)
        t = group.options.election_ticks
        preferred = group.preferred_leader
        if preferred not in voters:
            preferred = voters[group.group_id % len(voters)]
        if preferred != self.node_id:
            delay += 3 * t
        c.postpone_election(delay)

    # -------------------------------------------------------------- loops

    def _idle_span(self) -> int:
        """Ticks until the loop must wake next: 1, or while no group ticks (and
        HostOptions.idle_wakes_on_beat_ticks), up to the next beat tick. Nothing
        between two beat ticks needs a wake-up then: held beats and deferred answers
        leave on beat ticks, node beats go on beat ticks, and node liveness is
        counted in ticks, which the wake runs back to back."""
        k = self.options.beat_ticks
        if k == 1 or self._ticking or not self.options.idle_wakes_on_beat_ticks:
            return 1
        return k - self.stats.ticks % k

    async def _ticker(self) -> None:
        interval = self.options.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            span = self._idle_span()
            # A leader's claims stay as fresh as planned while the loop sleeps on
            # purpose (ticks_current): an idle host's groups are all quiesced, and
            # their followers do not time out (node liveness wakes them).
            self._tick_slack_s = (span - 1) * interval
            next_at += span * interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            self._tick_slack_s = 0.0
            self.stats.tick_wakes += 1
            for _ in range(span - 1):
                # The planned ticks before this one: host-level only (no group was
                # ticking when the sleep began; one that woke since ticks from now).
                self.stats.ticks += 1
                if self.quiescence_on:
                    self._node_beats()
            behind = loop.time() - next_at
            skipped = 0
            if behind > interval:
                # The loop stalled (CPU starvation, a long GC). Followers do not
                # replay the missed ticks: replayed back to back they would expire
                # every follower's election timer before it reads the leader's beats
                # waiting in its sockets (a storm of elections across all groups);
                # a follower's slower timer only delays an election (and keeps its
                # vote lease longer, the conservative side). Leaders DO replay them,
                # so CheckQuorum still deposes a cut-off leader within an election
                # timeout of wall time (what "a deposed leader cannot serve stale
                # reads" relies on).
                skipped = int(behind / interval)
                self.stats.ticks_skipped += skipped
                next_at += skipped * interval
                # Before leaders replay the missed ticks (CheckQuorum among them), let
                # the loop run what arrived during the stall: the answers waiting there
                # were received in the stalled wall time, and judging without them
                # deposed every awake leader of a starved process at each long stall
                # (at 1,000 groups: an election storm that never settled). A few
                # rounds: transport callbacks first, then the tasks they wake.
                for _ in range(_STALL_DRAIN_ROUNDS):
                    await asyncio.sleep(0)
            self.stats.ticks += 1
            if self.stats.ticks % self.options.beat_ticks == 0 and (self._answers or self._held):
                # A beat tick: the deferred answers (defer_beat_answers) and the held
                # beats leave together with the beats this tick makes.
                self._out.extend(self._held)
                self._out.extend(self._answers)
                self._held = []
                self._answers = []
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self._loop.call_soon(self._flush)
            if self.quiescence_on:
                self._node_beats()
            self._tick_groups(skipped)
            self.last_tick_at = time.monotonic()

    def ticks_current(self, max_gap_s: float) -> bool:
        """The tick loop finished a tick within max_gap_s. False after the process was
        stopped or stalled longer (SIGSTOP, a long pause): until its ticks catch up, the
        messages that arrived meanwhile are read (a newer term deposes a leader at once)
        and CheckQuorum runs, a leader of this process may have been deposed without
        knowing it. The loop's I/O callbacks (a Kafka request waiting in a socket) run
        before its timers after a stall, so without this check such a leader answered
        with a high watermark below one its successor had already answered (chaos, 5
        nodes, pause: `hw_backwards`)."""
        return time.monotonic() - self.last_tick_at <= max_gap_s + self._tick_slack_s

    def _tick_groups(self, skipped: int) -> None:
        """Tick every group that is not quiesced; at most campaigns_per_tick of
        them may start a campaign (the rest wait: their turn comes first next
        tick, as the scan starts after the last group ticked)."""
        budget = self.options.campaigns_per_tick or -1
        groups = list(self._ticking.values())
        if not groups:
            return
        start = self._tick_from % len(groups)
        deferred = 0
        for k in range(len(groups)):
            g = groups[(start + k) % len(groups)]
            if not g._started or g._stopped or g._fatal is not None:
                continue
            if budget >= 0 and g.core.campaign_due():
                if budget == 0:
                    if not deferred:
                        self._tick_from = start + k  # the first one held back goes first
                    deferred += 1
                    continue
                budget -= 1
            if skipped and g.role is Role.LEADER:
                for _ in range(min(skipped, 2 * g.options.election_ticks)):
                    g.core.tick()
            g._tick()
        self.stats.campaigns_deferred += deferred

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.options.housekeeping_s)
            now = time.monotonic()
            for g in list(self.groups.values()):
                if g._started and not g._stopped and g._fatal is None:
                    try:
                        g._housekeep(now)
                    except Exception as exc:  # a broken group stops alone
                        g._fail(exc)
