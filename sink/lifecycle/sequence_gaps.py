"""SequenceGaps: a produce batch whose sequence leaves a gap gets a retriable answer
for a while; OUT_OF_ORDER_SEQUENCE_NUMBER only once the gap has lasted.

Why. librdkafka (and the Java client) read OUT_OF_ORDER_SEQUENCE_NUMBER on a request
that is not the first one in flight as "an earlier request failed": they drain, bump
the producer epoch and renumber every unacknowledged message, of EVERY partition. A
message of another partition whose request timed out but was written is then sent
again under the new epoch, and nothing can deduplicate it (librdkafka issue #4953;
Redpanda #3039 and #12759 met the same). The chaos campaign found exactly that: a
leader paused with one producer's batch for p1 in flight (committed by the next
leader), the producer's next p2 batch reached the new leader before the p2 batch in
front of it, OUT_OF_ORDER, epoch bump, the p1 record written twice.

On a leader a gap is nearly always transient: the request in front failed
retriably (NOT_LEADER_OR_FOLLOWER during an election, a timeout on a paused old
leader) and the client retries it first. Answering NOT_LEADER_OR_FOLLOWER (retriable;
librdkafka: "not persisted", which is true: the batch was not appended) makes the
client resend both in order. A gap that outlasts `kafka.sequence_gap_grace_ms` is
real (a client that skipped sequences): it then gets Kafka's answer.

Invariant: this changes only the error code the client sees, never what is written.
The apply-time verdict (sink/state/producers.py: not appended) is the same on every
node; the grace clock is this leader's own (a new leader starts it afresh, so the
OUT_OF_ORDER answer can come late, never early).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sink.kafka.protocol.errors import ErrorCode

GapKey = tuple[int, str, int, int]
"""(producer id, topic, partition, producer epoch)"""

log = logging.getLogger("sink.produce")

MAX_TRACKED = 10_000  # gaps remembered at once; the oldest is forgotten beyond


class SequenceGaps:
    def __init__(self, grace_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_ms / 1000
        self._clock = clock
        self._first_seen: dict[GapKey, float] = {}
        self.retried = 0
        """OUT_OF_ORDER verdicts answered with NOT_LEADER_OR_FOLLOWER (within the grace)."""
        self.refused = 0
        """OUT_OF_ORDER verdicts answered as such (the gap outlasted the grace)."""

    def answer(self, key: GapKey, error: ErrorCode) -> ErrorCode:
        """The error code the client gets for the applied outcome `error` of a batch of
        producer `key`."""
        if error != ErrorCode.out_of_order_sequence_number:
            if error == ErrorCode.none and self._first_seen:
                self._first_seen.pop(key, None)  # the gap closed: the next one starts afresh
            return error
        now = self._clock()
        first = self._first_seen.get(key)
        if first is None:
            if len(self._first_seen) >= MAX_TRACKED:
                del self._first_seen[next(iter(self._first_seen))]
            self._first_seen[key] = first = now
        if now - first < self.grace_s:
            self.retried += 1
            return ErrorCode.not_leader_or_follower
        self.refused += 1
        # Rare and consequential (the client bumps its epoch and renumbers): an
        # operator reading why a client failed deliveries needs this line.
        log.warning(
            "sink.produce sequence gap of producer %d epoch %d on %s/%d lasted %.1f s: "
            "OUT_OF_ORDER_SEQUENCE_NUMBER",
            key[0],
            key[3],
            key[1],
            key[2],
            now - first,
        )
        return error
