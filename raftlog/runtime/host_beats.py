"""The coalesced heartbeats of a RaftHost, out and in (a part of
raftlog.runtime.host.RaftHost: every field is RaftHost's, set in its __init__;
this class holds no state of its own).

Sending: a group's heartbeats and heartbeat responses wait for the flush that
runs after the groups woken in one loop iteration, and leave merged per peer
(transport/beats.py), each flush also standing in for that peer's node beat.
Receiving: a coalesced message is expanded into the core's own
Heartbeat/HeartbeatResponse rows and stepped into each row's group; rows for a
group not hosted here (or not started) are dropped alone and counted.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftlog.core.messages import Message, MsgType
from raftlog.transport.beats import COALESCED_KINDS, coalesce, coalescible, expand


class HostBeats:
    """The coalesced-beats part of RaftHost (no state of its own)."""

    # ------------------------------------------------------------ sending

    def send(self, msgs: Iterable[Message]) -> None:
        """Send a group's messages; heartbeats wait for this loop iteration's flush."""
        if not self.options.coalesce_heartbeats:
            self.transport.send(msgs)
            return
        other: list[Message] = []
        out = self._out
        n = len(out)
        defer = self.options.defer_beat_answers
        k = self.options.beat_ticks
        # Off a beat tick, context-less beats wait for the next one (k > 1 only: with
        # k == 1 every tick is a beat tick).
        hold = k > 1 and self.stats.ticks % k != 0
        for m in msgs:
            if coalescible(m):
                if m.context:
                    out.append(m)  # confirms a read: leaves in this iteration's flush
                elif defer and m.type is MsgType.HEARTBEAT_RESP:
                    self._answers.append(m)  # leaves with the next beat tick's beats
                elif hold:
                    self._held.append(m)
                else:
                    out.append(m)  # merged per peer at the flush, with every other group's
            else:
                other.append(m)
        if other:
            self.transport.send(other)
        if len(out) > n and not self._flush_scheduled:
            # The groups' raft loops woken together run one after another in this
            # loop iteration; the flush runs after them.
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out:
            # send() holds only coalescible messages here, so nothing comes back alone.
            coalesced, _ = coalesce(out, self.node_id, self.nonce)
            st = self.stats
            st.beats_messages_sent += len(coalesced)
            st.beat_rows_sent += len(out)
            beaten = self._beaten
            for m in coalesced:
                beaten.add(m.dst)  # stands in for this tick's node beat to m.dst
            self.transport.send(coalesced)
        if self._node_beats_due:
            # After the tick's beats (inline Readies made theirs before this flush
            # ran): only peers that got none are owed a node beat.
            self._node_beats_due = False
            self._send_node_beats()

    # ---------------------------------------------------------- receiving

    def _on_coalesced(self, msgs: list[Message]) -> None:
        groups = self.groups
        st = self.stats
        for m in msgs:
            if m.type not in COALESCED_KINDS:
                continue  # only coalesced kinds travel under HOST_GROUP_ID
            self._heard_from(m)  # type: ignore[arg-type]
            per_group: dict[int, list[Message]] = {}
            for hb in expand(m):
                st.beat_rows_received += 1
                g = groups.get(hb.group_id)
                # A group still opening (no core yet) or stopping counts as absent,
                # exactly as the transport treats a group not yet registered.
                if g is None or not g._started or g._stopped:
                    st.unknown_group_beats += 1
                    continue
                per_group.setdefault(hb.group_id, []).append(hb)
            for gid, run in per_group.items():
                groups[gid]._on_messages(run)
