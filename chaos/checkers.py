"""Checkers over a history (after Jepsen's Kafka/Redpanda workload).

Every checker takes the list of operations (see history.py) and returns a list
of anomalies, each a dict with "kind" and the evidence. Observations:

    acks      send completions of type ok: (partition, offset, value)
    reads     records of poll and final_read completions (any consumer, any node)

Kinds:
    lost_write            an acknowledged value no read ever returned, although
                          reads covered its offset (or a complete final read of
                          its partition exists)
    duplicate             one value at two or more (partition, offset) positions
                          (acks and reads together)
    inconsistent_offset   one (partition, offset) with two or more values
                          (across acks, polls, and every node's final read)
    unseen                a consumer that read to the end (caught_up) never
                          polled a committed value below its end offset
    poll_skip             a consumer's next offset in a partition jumped over an
                          offset that holds a known value
    nonmonotonic_poll     a consumer's next offset in a partition was not above
                          the previous one (without a seek in between)
    hw_backwards          a high watermark went down: on one node process
                          (read API, same incarnation), or in real time for the
                          linearizable sources (Kafka ListOffsets; read API
                          Partitions with linearizable=true, which must also
                          include every write acknowledged before it began)

Outcomes "info" (unknown) of sends impose nothing but "at most once" (the
duplicate checker); "fail" is treated like "info" (Kafka errors are rarely
definite).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from chaos.history import Op

ANOMALY_KINDS = (
    "lost_write",
    "duplicate",
    "inconsistent_offset",
    "unseen",
    "poll_skip",
    "nonmonotonic_poll",
    "hw_backwards",
)

READ_KINDS = ("poll", "final_read")


def _offset(op: Op) -> int:
    """An acknowledgement's offset; -1 when the client reported none (librdkafka gives
    msg.offset() None for a delivery whose produce response carried no offset; seen once,
    seed 7, at the final flush)."""
    o = op.get("offset")
    return o if isinstance(o, int) and o >= 0 else -1


def _acks(ops: Iterable[Op]) -> list[tuple[int, int, str, str]]:
    return [
        (op["partition"], op["offset"], op["value"], op["process"])
        for op in ops
        if op["f"] == "send" and op["type"] == "ok" and _offset(op) >= 0
    ]


def _acks_without_offset(ops: Iterable[Op]) -> list[tuple[int, str, str]]:
    """Acknowledged sends with no offset: checkable only against a complete final read."""
    return [
        (op["partition"], op["value"], op["process"])
        for op in ops
        if op["f"] == "send" and op["type"] == "ok" and _offset(op) < 0
    ]


def _reads(ops: Iterable[Op]) -> list[tuple[int, int, str, str]]:
    out = []
    for op in ops:
        if op["f"] in READ_KINDS and op["type"] == "ok":
            for p, o, v in op.get("records", ()):
                out.append((p, o, v, op["process"]))
    return out


def _complete_final_partitions(ops: Iterable[Op]) -> set[int]:
    return {
        int(p)
        for op in ops
        if op["f"] == "final_read" and op["type"] == "ok" and op.get("complete")
        for p in op.get("ends", {})
    }


def _read_coverage(ops: list[Op]) -> tuple[set, dict[int, int], set[int]]:
    """(values read, per partition the offset after the highest read, partitions a
    final read covered completely): what an acknowledged value is judged against."""
    reads = _reads(ops)
    seen = {v for _, _, v, _ in reads}
    horizon: dict[int, int] = defaultdict(lambda: -1)
    for p, o, _, _ in reads:
        horizon[p] = max(horizon[p], o + 1)
    return seen, horizon, _complete_final_partitions(ops)


def lost_writes(ops: list[Op]) -> list[dict[str, Any]]:
    seen, horizon, complete = _read_coverage(ops)
    out = []
    for p, o, v, proc in _acks(ops):
        if v in seen:
            continue
        if o < horizon[p] or p in complete:
            out.append(
                {
                    "kind": "lost_write",
                    "value": v,
                    "partition": p,
                    "acked_offset": o,
                    "producer": proc,
                    "read_horizon": horizon[p],
                }
            )
    for p, v, proc in _acks_without_offset(ops):
        if v not in seen and p in complete:
            out.append(
                {
                    "kind": "lost_write",
                    "value": v,
                    "partition": p,
                    "acked_offset": None,
                    "producer": proc,
                    "read_horizon": horizon[p],
                }
            )
    return out


def unverified_acks(ops: list[Op]) -> int:
    """Acknowledged values whose offsets no read reached (not an anomaly: no evidence)."""
    seen, horizon, complete = _read_coverage(ops)
    return sum(
        1 for p, o, v, _ in _acks(ops) if v not in seen and o >= horizon[p] and p not in complete
    )


def duplicates(ops: list[Op]) -> list[dict[str, Any]]:
    where: dict[str, dict[tuple[int, int], set[str]]] = defaultdict(lambda: defaultdict(set))
    for p, o, v, proc in _acks(ops):
        where[v][(p, o)].add(f"ack:{proc}")
    for p, o, v, proc in _reads(ops):
        where[v][(p, o)].add(f"read:{proc}")
    out = []
    for v, positions in where.items():
        if len(positions) > 1:
            out.append(
                {
                    "kind": "duplicate",
                    "value": v,
                    "positions": [
                        {"partition": p, "offset": o, "sources": sorted(src)}
                        for (p, o), src in sorted(positions.items())
                    ],
                }
            )
    return out


def inconsistent_offsets(ops: list[Op]) -> list[dict[str, Any]]:
    at: dict[tuple[int, int], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for p, o, v, proc in _acks(ops):
        at[(p, o)][v].add(f"ack:{proc}")
    for p, o, v, proc in _reads(ops):
        at[(p, o)][v].add(f"read:{proc}")
    out = []
    for (p, o), values in sorted(at.items()):
        if len(values) > 1:
            out.append(
                {
                    "kind": "inconsistent_offset",
                    "partition": p,
                    "offset": o,
                    "values": {v: sorted(src) for v, src in sorted(values.items())},
                }
            )
    return out


def _known_offsets(ops: list[Op]) -> dict[int, list[int]]:
    known: dict[int, set[int]] = defaultdict(set)
    for p, o, _, _ in _acks(ops):
        known[p].add(o)
    for p, o, _, _ in _reads(ops):
        known[p].add(o)
    return {p: sorted(s) for p, s in known.items()}


def poll_order(ops: list[Op]) -> list[dict[str, Any]]:
    """poll_skip and nonmonotonic_poll, per consumer process and partition.

    A seek sets the next expected offset; before any seek, the first poll of a
    partition sets the start. Final reads are checked like polls."""
    known = _known_offsets(ops)
    last: dict[tuple[str, int], int | None] = {}
    out = []
    for op in ops:
        if op["type"] != "ok":
            continue
        proc = op["process"]
        if op["f"] == "seek":
            last[(proc, op["partition"])] = op["offset"] - 1
            continue
        if op["f"] not in READ_KINDS:
            continue
        for p, o, v in op.get("records", ()):
            prev = last.get((proc, p))
            if prev is not None:
                if o <= prev:
                    out.append(
                        {
                            "kind": "nonmonotonic_poll",
                            "process": proc,
                            "partition": p,
                            "previous_offset": prev,
                            "offset": o,
                            "value": v,
                            "time": op["time"],
                        }
                    )
                elif o > prev + 1:
                    ks = known.get(p, [])
                    i = bisect.bisect_right(ks, prev)
                    if i < len(ks) and ks[i] < o:
                        out.append(
                            {
                                "kind": "poll_skip",
                                "process": proc,
                                "partition": p,
                                "previous_offset": prev,
                                "offset": o,
                                "skipped_known": ks[i : bisect.bisect_left(ks, o)][:10],
                                "time": op["time"],
                            }
                        )
            last[(proc, p)] = o
    return out


def unseen(ops: list[Op]) -> list[dict[str, Any]]:
    """Committed values below a caught-up consumer's end that it never polled."""
    committed: dict[int, dict[int, str]] = defaultdict(dict)
    for p, o, v, proc in _reads(ops):
        if proc.startswith("final"):
            committed[p].setdefault(o, v)
    for p, o, v, _ in _acks(ops):
        committed[p].setdefault(o, v)
    polled: dict[str, set[str]] = defaultdict(set)
    start: dict[tuple[str, int], int] = {}
    out = []
    for op in ops:
        if op["type"] != "ok":
            continue
        proc = op["process"]
        if op["f"] == "seek":
            start.setdefault((proc, op["partition"]), op["offset"])
        elif op["f"] == "poll":
            polled[proc].update(v for _, _, v in op.get("records", ()))
        elif op["f"] == "caught_up":
            for ps, end in op["ends"].items():
                p = int(ps)
                lo = start.get((proc, p), 0)
                missing = [
                    (o, v)
                    for o, v in sorted(committed.get(p, {}).items())
                    if lo <= o < end and v not in polled[proc]
                ]
                if missing:
                    out.append(
                        {
                            "kind": "unseen",
                            "process": proc,
                            "partition": p,
                            "end": end,
                            "count": len(missing),
                            "first": [{"offset": o, "value": v} for o, v in missing[:10]],
                        }
                    )
    return out


def hw_backwards(ops: list[Op]) -> list[dict[str, Any]]:
    invokes = {op["id"]: op["time"] for op in ops if op["type"] == "invoke"}
    out: list[dict[str, Any]] = []
    # 1. one node process (source read_api, same node and incarnation), in completion order
    highest: dict[tuple[int, int, int], tuple[int, float]] = {}
    # 2. real-time order for the linearizable sources: (invoke, complete, hw) per partition
    samples: dict[tuple[str, int], list[tuple[float, float, int, str]]] = defaultdict(list)
    for op in ops:
        if op["type"] != "ok":
            continue
        if op["f"] == "send" and _offset(op) >= 0:
            # An acknowledged write: later linearizable reads must include it.
            samples[("read_api_lin", op["partition"])].append(
                (invokes.get(op["id"], op["time"]), op["time"], op["offset"] + 1, "ack")
            )
            continue
        if op["f"] != "hw":
            continue
        src = op["source"]
        for ps, hw in op["partitions"].items():
            p = int(ps)
            if src == "read_api":
                key = (op["node"], op.get("gen", 0), p)
                prev = highest.get(key)
                if prev is not None and hw < prev[0]:
                    out.append(
                        {
                            "kind": "hw_backwards",
                            "source": src,
                            "node": op["node"],
                            "partition": p,
                            "before": prev[0],
                            "before_time": prev[1],
                            "after": hw,
                            "time": op["time"],
                        }
                    )
                if prev is None or hw >= prev[0]:
                    highest[key] = (hw, op["time"])
            else:
                label = f"{src}:{op.get('node', '')}:{op['process']}"
                samples[(src, p)].append((invokes.get(op["id"], op["time"]), op["time"], hw, label))
    for (src, p), group in samples.items():
        reads = [s for s in group if s[3] != "ack"]
        if not reads:
            continue
        by_end = sorted(group, key=lambda s: s[1])
        ends = [s[1] for s in by_end]
        prefix: list[tuple[int, int]] = []  # (max hw, index of its sample)
        best = (-1, -1)
        for i, s in enumerate(by_end):
            if s[2] > best[0]:
                best = (s[2], i)
            prefix.append(best)
        for inv, end, hw, label in reads:
            k = bisect.bisect_left(ends, inv)  # samples completed strictly before inv
            if k == 0:
                continue
            top, idx = prefix[k - 1]
            if hw < top:
                before = by_end[idx]
                out.append(
                    {
                        "kind": "hw_backwards",
                        "source": src,
                        "partition": p,
                        "before": top,
                        "before_by": before[3],
                        "before_completed": before[1],
                        "after": hw,
                        "after_by": label,
                        "after_invoked": inv,
                        "time": end,
                    }
                )
    return out


def check_all(ops: list[Op]) -> dict[str, list[dict[str, Any]]]:
    """Every checker; returns {kind: [anomaly, ...]} with every kind present."""
    found: dict[str, list[dict[str, Any]]] = {k: [] for k in ANOMALY_KINDS}
    for fn in (lost_writes, duplicates, inconsistent_offsets, poll_order, unseen, hw_backwards):
        for a in fn(ops):
            found[a["kind"]].append(a)
    return found


def stats(ops: list[Op]) -> dict[str, Any]:
    """Counts of the history for the report."""
    sends = defaultdict(int)
    for op in ops:
        if op["f"] == "send":
            sends[op["type"]] += 1
    reads = defaultdict(int)
    for op in ops:
        if op["f"] in READ_KINDS and op["type"] == "ok":
            reads[op["f"] + ":" + op.get("source", "final")] += len(op.get("records", ()))
    hw_samples: dict[str, int] = defaultdict(int)
    for op in ops:
        if op["f"] == "hw" and op["type"] == "ok":
            hw_samples[op["source"]] += 1
    return {
        "hw_samples": dict(hw_samples),
        "sends_invoked": sends["invoke"],
        "sends_ok": sends["ok"],
        "sends_info": sends["info"],
        "sends_fail": sends["fail"],
        "acked_unverified": unverified_acks(ops),
        "records_read": dict(reads),
        "operations": len(ops),
    }
