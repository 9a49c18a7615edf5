"""Replay or sweep simulation seeds.

python -m raftlog.sim --seed 42 [--steps 100] [--groups G] [--verbose]
python -m raftlog.sim --seeds 0:500 [--groups G] [--workers W]
"""

from __future__ import annotations

import argparse
import sys

from raftlog.sim.runner import DEFAULT_STEPS, SimFailure, run_seed
from raftlog.sim.sweep import default_workers, sweep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raftlog.sim", description=__doc__)
    ap.add_argument("--seed", type=int, help="run one seed")
    ap.add_argument("--seeds", help="run a range lo:hi of seeds")
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="chaos-phase length in ticks")
    ap.add_argument("--groups", type=int, default=1, help="Raft groups over the nodes (default 1)")
    ap.add_argument(
        "--quiesce-ticks", type=int, default=0, help="quiescence and node liveness (0: off)"
    )
    ap.add_argument("--verbose", action="store_true", help="print every event")
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for --seeds (default: the cores, at most 4; 1 = this process)",
    )
    a = ap.parse_args(argv)
    if a.seed is not None:
        seeds = range(a.seed, a.seed + 1)
    elif a.seeds:
        lo, hi = (int(x) for x in a.seeds.split(":"))
        seeds = range(lo, hi)
    else:
        ap.error("give --seed N or --seeds LO:HI")
    if a.groups < 1:
        ap.error("--groups must be >= 1")
    extra = {"quiesce_ticks": a.quiesce_ticks} if a.quiesce_ticks else {}
    if a.seed is None and not a.verbose:
        report = sweep(
            ((s, {"steps": a.steps, "groups": a.groups, **extra}) for s in seeds),
            workers=a.workers if a.workers is not None else default_workers(),
        )
        for _seed, text in report.failures:
            print(text, file=sys.stderr)
        failed = len(report.failures)
        print(f"seeds {seeds.start}..{seeds.stop - 1}: {len(seeds) - failed} ok, {failed} failed")
        return 1 if failed else 0
    failed = 0
    for s in seeds:
        try:
            res = run_seed(s, a.steps, a.verbose, groups=a.groups, **extra)
        except SimFailure as e:
            print(e, file=sys.stderr)
            failed += 1
            if a.seed is not None:
                return 1
            continue
        if a.seed is not None or a.verbose:
            print(
                f"seed {s} ok: committed={res.committed} term={res.terms} "
                f"live after {res.liveness_ticks} ticks; params={res.params}"
            )
            if res.groups > 1:
                print(
                    f"  {res.groups} groups: {res.beats_sent} coalesced beat messages carried "
                    f"{res.beat_rows_sent} beats; {res.disk_rounds} disk rounds; "
                    f"I8: {res.misrouted} misrouted, {res.unknown_group_drops} dropped as not hosted"
                )
            if a.quiesce_ticks:
                print(
                    f"  quiescence: {res.quiesced_after_idle} groups quiesced after the idle "
                    f"phase; {res.peers_declared_down} peers declared down; "
                    f"{res.liveness_wakes} liveness wakes"
                )
    if a.seed is None:
        print(f"seeds {seeds.start}..{seeds.stop - 1}: {len(seeds) - failed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
