"""The campaign report: report.json, summary.txt and plot.png.

The plot has three panels over time, every fault window shaded in its
kind's colour and labelled with its node (nL2: node 2, the leader then):
    1. acknowledged records/s, and sends with an unknown/failed outcome /s
    2. produce latency (invoke -> delivery report) of acknowledged sends per
       second: median, p99 and max, log scale
    3. records polled/s per consumer kind (Kafka Fetch, read API)
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from typing import Any

from chaos.checkers import ANOMALY_KINDS
from chaos.history import Op

COLORS = {"kill": "#d62728", "pause": "#9467bd", "partition": "#ff7f0e", "disk": "#2ca02c"}
EXAMPLES = 20


def build(**kw: Any) -> dict[str, Any]:
    anomalies: dict[str, list] = kw.pop("anomalies")
    counts = {k: len(anomalies.get(k, [])) for k in ANOMALY_KINDS}
    total = sum(counts.values())
    liveness = []
    if kw["crashes"]:
        liveness.append(f"{len(kw['crashes'])} node crash(es)")
    for proc, err in sorted(kw.get("worker_crashes", {}).items()):
        liveness.append(f"{proc} crashed ({err})")
    for proc, ok in kw["caught_up"].items():
        if not ok:
            liveness.append(f"{proc} did not read to the end")
    why = kw.get("final_read_why") or {}
    for proc, ok in kw["final_reads"].items():
        if not ok:
            stop = f" ({why[proc]})" if proc in why else ""
            liveness.append(f"{proc} final read incomplete{stop}")
    if not kw["final_reads"]:
        liveness.append("no final reads")
    if total or kw["crashes"]:
        verdict = "INVALID"
    elif liveness:
        verdict = "UNKNOWN"
    else:
        verdict = "VALID"
    return {
        "verdict": verdict,
        "anomaly_count": total,
        "anomaly_counts": counts,
        "anomalies": {k: v[:EXAMPLES] for k, v in anomalies.items()},
        "liveness": liveness,
        **kw,
    }


def summary_text(data: dict[str, Any]) -> str:
    st = data["stats"]
    lines = [
        f"raftsink chaos campaign  seed={data['seed']}  verdict={data['verdict']}",
        f"duration {data['options']['seconds']:.0f} s; nemeses {', '.join(data['options']['nemeses'])}",
        "",
        "records: "
        f"{st['sends_invoked']} sent, {st['sends_ok']} acknowledged, {st['sends_info']} unknown, "
        f"{st['sends_fail']} refused; {st['acked_unverified']} acknowledged but not checkable",
        "records read: " + ", ".join(f"{k} {v}" for k, v in sorted(st["records_read"].items())),
        "final high watermarks: "
        + ", ".join(f"p{p}={e}" for p, e in sorted(data["ends"].items(), key=lambda x: int(x[0]))),
        "",
        f"faults injected ({len(data['faults'])}): "
        + ", ".join(f"{k} x{n}" for k, n in sorted(data["fault_counts"].items())),
    ]
    for k, f in enumerate(data["faults"], 1):
        lead = " (the leader)" if f.get("leader") == f["node"] else ""
        extra = ""
        if "links" in f:
            extra = " links " + " ".join(f["links"])
        if f.get("groups_led"):  # partition groups: data groups led per node at the start
            led = f["groups_led"]
            extra += f" leads {led.get(str(f['node']), 0)} of {sum(led.values())} data groups"
        lines.append(
            f"  #{k:<3} {f['start']:7.1f}-{f['end']:7.1f} s  {f['kind']:<9} {f['mode']:<15} "
            f"node {f['node']}{lead}{extra}"
        )
    lines += ["", f"anomalies: {data['anomaly_count']}"]
    for k in ANOMALY_KINDS:
        n = data["anomaly_counts"][k]
        lines.append(f"  {k:<20} {n}")
        for a in data["anomalies"].get(k, [])[:3]:
            lines.append("      " + json.dumps(a)[:300])
    if data["liveness"]:
        lines += ["", "liveness: " + "; ".join(data["liveness"])]
    if data["crashes"]:
        for c in data["crashes"]:
            lines.append(f"  node {c['node']} exited {c['code']} at {c['time']:.1f} s")
    if data.get("fatal_producer_errors"):
        lines += ["", f"fatal producer errors: {data['fatal_producer_errors']}"]
    if data.get("notes"):
        lines += ["", "notes: " + "; ".join(data["notes"])]
    return "\n".join(lines) + "\n"


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return math.nan
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


def series(ops: list[Op], bucket: float = 1.0) -> dict[str, Any]:
    invoked = {op["id"]: op["time"] for op in ops if op["type"] == "invoke" and op["f"] == "send"}
    acks: dict[int, int] = defaultdict(int)
    bad: dict[int, int] = defaultdict(int)
    lat: dict[int, list[float]] = defaultdict(list)
    polled: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    end = 0.0
    for op in ops:
        end = max(end, op["time"])
        if op["type"] == "invoke":
            continue
        b = int(op["time"] // bucket)
        if op["f"] == "send":
            if op["type"] == "ok":
                acks[b] += 1
                if op["id"] in invoked:
                    lat[b].append(op["time"] - invoked[op["id"]])
            else:
                bad[b] += 1
        elif op["f"] == "poll" and op["type"] == "ok":
            polled[op.get("source", "?")][b] += len(op.get("records", ()))
    n = int(end // bucket) + 1
    xs = [i * bucket for i in range(n)]
    return {
        "t": xs,
        "acks": [acks[i] / bucket for i in range(n)],
        "bad": [bad[i] / bucket for i in range(n)],
        "p50": [_percentile(lat[i], 0.5) for i in range(n)],
        "p99": [_percentile(lat[i], 0.99) for i in range(n)],
        "max": [max(lat[i]) if lat[i] else math.nan for i in range(n)],
        "polled": {src: [d[i] / bucket for i in range(n)] for src, d in polled.items()},
    }


def plot(data: dict[str, Any], ops: list[Op], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    s = series(ops)
    # Long runs get a wider figure (up to 30 in), so a fault window stays visible.
    seconds = max([1.0, *s["t"]])
    width = min(30.0, max(14.0, seconds / 25))
    faults = data["faults"]
    # Full labels need about 0.8 in each; when windows are closer than that the
    # plot shows fault numbers, which summary.txt lists (#k) with every detail.
    numbered = bool(faults) and width * 0.85 / len(faults) < 0.8
    fig, axes = plt.subplots(3, 1, figsize=(width, 9), sharex=True)
    ax1, ax2, ax3 = axes
    ax1.plot(s["t"], s["acks"], color="#1f77b4", lw=1.2, label="acknowledged/s")
    ax1.plot(s["t"], s["bad"], color="black", lw=1.0, ls="--", label="unknown or failed/s")
    ax1.set_ylabel("records/s")
    ax2.plot(s["t"], s["p50"], color="#1f77b4", lw=1.0, label="median")
    ax2.plot(s["t"], s["p99"], color="#ff7f0e", lw=1.0, label="p99")
    ax2.plot(s["t"], s["max"], color="#7f7f7f", lw=0.8, ls=":", label="max")
    ax2.set_yscale("log")
    ax2.set_ylabel("produce latency (s)")
    styles = {"kafka": "#17becf", "read_api": "#8c564b"}
    for src, ys in sorted(s["polled"].items()):
        ax3.plot(s["t"], ys, lw=1.0, color=styles.get(src), label=f"polled via {src}")
    ax3.set_ylabel("records polled/s")
    ax3.set_xlabel("seconds since start")
    ymax = max([1.0, *s["acks"]])
    for k, f in enumerate(faults):
        color = COLORS.get(f["kind"], "#aaaaaa")
        for ax in axes:
            ax.axvspan(f["start"], f["end"], color=color, alpha=0.18, lw=0)
        lead = "L" if f.get("leader") == f["node"] else ""
        if numbered:
            label = f"{k + 1}"
        else:
            label = f"{f['kind']}{' ' + f['mode'] if f['mode'] else ''}\nn{lead}{f['node']}"
        ax1.text(
            (f["start"] + f["end"]) / 2,
            ymax * (1.02 if k % 2 == 0 else 1.16),
            label,
            ha="center",
            va="bottom",
            fontsize=7,
            color=color,
        )
    if data.get("workload_end"):
        for ax in axes:
            ax.axvline(data["workload_end"], color="black", lw=0.8, ls="-.")
        ax3.text(data["workload_end"], 0, " healed, draining", fontsize=7, va="bottom")
    ax1.set_ylim(0, ymax * 1.32)
    handles = [Patch(color=c, alpha=0.3, label=k) for k, c in COLORS.items()]
    # Legends sit right of the axes, clear of the fault labels and the curves.
    outside = {"loc": "upper left", "bbox_to_anchor": (1.005, 1.0), "fontsize": 8}
    ax1.legend(**outside)
    ax2.legend(**outside)
    ax3.legend(handles=ax3.get_legend_handles_labels()[0] + handles, **outside)
    fig.suptitle(
        f"raftsink chaos  seed={data['seed']}  verdict={data['verdict']}  "
        f"anomalies={data['anomaly_count']}  acked={data['stats']['sends_ok']}"
        + ("  (fault numbers: see summary.txt)" if numbered else ""),
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(out_dir: str, data: dict[str, Any], ops: list[Op]) -> None:
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(data, f, indent=2, default=str)
    text = summary_text(data)
    with open(os.path.join(out_dir, "summary.txt"), "w") as f:
        f.write(text)
    plot(data, ops, os.path.join(out_dir, "plot.png"))
