"""Child process for the storage crash test.

Appends through a DiskQueue from several concurrent submitters with random
entry sizes and saves hard state now and then; after each durable operation it
prints one line to stdout ("A <last index> <term>" or "H <term>") and flushes.
The parent kills it with SIGKILL at a random point and checks the log.
"""

from __future__ import annotations

import asyncio
import random
import sys

from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.storage import DiskQueue, LogStore, StorageOptions
from tests.helpers.storage import payload


async def main(data_dir: str, seed: int) -> None:
    rng = random.Random(seed)
    opts = StorageOptions(
        segment_bytes=256 * 1024, index_checkpoint_entries=300, index_checkpoint_bytes=128 * 1024
    )
    q = DiskQueue(LogStore.open(data_dir, opts))
    term = max(q.store.hard_state().term, q.last_term()) + 1
    out = sys.stdout

    async def submitter() -> None:
        nonlocal term
        while True:
            # Report what this submitter saved or appended, never the shared `term`
            # after an await: another submitter may have raised it meanwhile, and its
            # hard state may not be durable yet (the parent then saw a "lost" one).
            if rng.random() < 0.02:
                term += 1
                hs = HardState(term, 1, 0)
                await q.save_hard_state(hs)
                out.write(f"H {hs.term}\n")
                out.flush()
                continue
            n = rng.randint(1, 20)
            size = rng.choice([0, 10, 100, 1000, 20_000])
            start = q.last_index() + 1
            batch = [
                LogEntry(i, term, EntryType.DATA, payload(i, term, size))
                for i in range(start, start + n)
            ]
            last = await q.append(batch)
            out.write(f"A {last} {batch[-1].term}\n")
            out.flush()
            q.set_applied(last)

    await asyncio.gather(*(submitter() for _ in range(4)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
