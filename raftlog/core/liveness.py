"""Node liveness: which peer processes count as down or restarted (pure, in ticks).

The host (raftlog/runtime/host.py) and the simulator (raftlog/sim) both keep one
per process, fed with what the process sees: the ticks its own loop ran, every
node beat (or coalesced Beats) heard with the sender's start nonce, and the
transport's evidence that a stream to a peer broke. What to wake when a peer is
down or restarted is theirs (docs/raft-runtime.md, "Quiescence").

Rules (invariants):
- A peer is *down* when it was silent for its silence limit, drawn in
  [S, 1.5 S] anew for each period it is alive (hosts do not declare a peer down,
  and wake its groups, in lockstep), or when its stream broke, is still down,
  and it was silent for `broken_ticks` (a killed process resets its connections
  at once; a starved one keeps them, so silence alone must wait S).
- Silence is counted in ticks this process ran: a stalled loop never declares
  anyone down.
- A peer is up again at its next message; a new nonce means it restarted.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import TypeVar

from raftlog.core.node_state import RawNode
from raftlog.core.quorum import has_quorum
from raftlog.core.ready import Role

K = TypeVar("K")


class NodeLiveness:
    def __init__(self, rng: random.Random, silence_ticks: int, broken_ticks: int) -> None:
        if silence_ticks < 1 or broken_ticks < 1:
            raise ValueError("silence_ticks and broken_ticks must be >= 1")
        self.rng = rng
        self.silence_ticks = silence_ticks
        self.broken_ticks = broken_ticks
        self.now = 0  # ticks this process ran
        self.peers: set[int] = set()
        self.down: set[int] = set()
        self.seen: dict[int, int] = {}  # tick of the newest message from the peer
        self.limit: dict[int, int] = {}  # its current silence limit
        self.nonce: dict[int, int] = {}
        self.broken_since: dict[int, int] = {}  # tick its stream was seen broken
        self.seen_broken = 0  # peers declared down on broken-stream evidence

    def _draw(self) -> int:
        s = self.silence_ticks
        return self.rng.randrange(s, s + s // 2 + 1)

    def set_peers(self, peers: Iterable[int]) -> None:
        """The peers to watch (new ones count as just heard from)."""
        new = set(peers)
        for p in new - self.peers:
            self.seen.setdefault(p, self.now)
            self.limit[p] = self._draw()
        self.peers = new
        self.down &= new

    def add_peers(self, peers: Iterable[int]) -> None:
        self.set_peers(self.peers | set(peers))

    def heard(self, src: int, nonce: int) -> bool:
        """A message from src (nonce 0: unknown). True if src restarted (a nonce
        other than the one heard before)."""
        self.seen[src] = self.now
        self.broken_since.pop(src, None)
        if src in self.down:
            self.down.discard(src)
            self.limit[src] = self._draw()
        if not nonce:
            return False
        old = self.nonce.get(src)
        self.nonce[src] = nonce
        return old is not None and old != nonce

    def broken(self, peer: int) -> None:
        """The transport says the stream to peer broke (and is down now)."""
        self.broken_since.setdefault(peer, self.now)

    def tick(self, connected: Callable[[int], bool] | None = None) -> list[int]:
        """One tick of this process; returns the peers that are down from now.
        connected(peer): whether the stream to peer is up again (clears the
        broken-stream evidence); None: no transport evidence."""
        self.now += 1
        now = self.now
        out = [
            p
            for p in self.peers
            if p not in self.down and now - self.seen.get(p, now) >= self.limit[p]
        ]
        for p, since in list(self.broken_since.items()):
            if connected is not None and connected(p):
                del self.broken_since[p]
                continue
            if (
                p in self.peers
                and p not in self.down
                and p not in out
                and now > since
                and now - self.seen.get(p, now) >= self.broken_ticks
            ):
                out.append(p)
                self.seen_broken += 1
        self.down.update(out)
        return sorted(out)


def liveness_wakes(
    node_id: int,
    quiesced: Iterable[tuple[K, RawNode]],
    down: set[int],
    gone: set[int],
    restarted: set[int] = frozenset(),  # type: ignore[assignment]
) -> list[tuple[K, bool]]:
    """Which quiesced nodes of this process to wake, and whether to campaign,
    now that the peers `gone` were declared down or restarted (`restarted` is
    the restarted subset; `down` every peer down now):
    - a follower whose leader is gone: campaign (its lease died with the leader's
      process);
    - a leader without a quorum of voters on live processes: wake, so that
      CheckQuorum, judging fresh answers only, can depose it;
    - a leader one of whose members restarted: wake and heartbeat, because the
      restarted replica may have lost storage (a replacement may not campaign,
      so nothing else would ever tell the quiesced leader it lacks the log)."""
    out: list[tuple[K, bool]] = []
    for key, node in quiesced:
        if not node.quiesced:
            continue
        if node.role is Role.LEADER:
            voters = node.membership.voters
            live = {v for v in voters if v == node_id or v not in down}
            if not has_quorum(voters, live) or (restarted & node.membership.members()):
                out.append((key, False))
        elif node.lead in gone:
            out.append((key, True))
    return out
